"""Op-level checkpointing on a Llama-style decoder: remat against what practitioners use.

    python bench/eager_ops.py                    # CPU size, writes bench/results/eager_ops/
    python bench/eager_ops.py --device cuda      # the H200 size of the op-level issue (bf16)

Model: examples/models.py's Llama (RMSNorm, fused qkv, causal SDPA, out projection, RMSNorm,
SwiGLU, no biases). At budgets between the least remat accepts and the blocks' no-checkpoint
saved bytes, every method runs the same training step (forward, cross-entropy, backward):

- remat op+region: ``auto_checkpoint(granularity="op")`` (each block plain, a checkpoint region,
  or a selective one with the ops the planner keeps);
- remat region-only: ``auto_checkpoint(granularity="block")``;
- torch's ``checkpoint_sequential`` at every segment count (the blocks as one chain);
- full activation checkpointing per block;
- torchtitan's per-op policy (written here after its description: save matmuls and attention,
  recompute every second matmul; each block a selective region);
- torch's ``sac_milp`` (``torch.distributed._tools``, needs ``pip install pulp pwlf``): its
  SACEstimator, MemTracker and RuntimeEstimator run the step under FakeTensorMode, its PuLP/CBC
  MILP picks a discard ratio per block for the budget, and torch's
  ``get_optimal_checkpointing_policy_per_module`` turns each ratio into the block's per-op SAC
  policy (see ``sac_milp_plans``);
- no checkpointing.

Peak: on CUDA ``torch.cuda.max_memory_allocated`` over the step above what was allocated before
it; on CPU torch's ``MemTracker`` (activations and temporaries at the step's peak). A method
fits a budget when its peak is at most the budget plus what the plain step holds outside the
blocks' saved bytes (embedding, head, loss, backward's working set). Step time: paired against
plain: each round runs plain, then each method in a shuffled order with a plain step after each,
and a method's overhead is the median over rounds of its step over the mean of its two
neighbouring plain steps (a drifting machine moves both alike). On CPU the step runs on one
thread (``--threads 1``, the default there) and is timed by that thread's CPU time, the clock
remat's own measurements then use too (``remat.eager._runtime.clock``): time that other
processes take from a shared machine is not counted. On CUDA, and with more threads, the wall
clock.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pathlib
import platform
import random
import statistics
import sys
import time
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_map_only
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    checkpoint_sequential,
    create_selective_checkpoint_contexts,
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
import remat.torch as rt  # noqa: E402
from remat.eager._runtime import clock  # noqa: E402
from remat.units import format_bytes  # noqa: E402

CONFIGS = {
    "cpu": dict(depth=8, width=256, heads=8, seq=256, batch=4, vocab=2048),
    "cuda": dict(depth=16, width=2048, heads=16, seq=2048, batch=4, vocab=32000),
}

_COMPUTE = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
}


def titan_policy_contexts():
    """torchtitan's op-level SAC policy as it describes it: keep matmul and attention outputs,
    but recompute every second matmul."""
    counter = {"mm": 0}

    def policy(ctx, func, *args, **kwargs):
        if func == torch.ops.aten.mm.default:
            counter["mm"] += 1
            if counter["mm"] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE if func in _COMPUTE else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


class Wrapped(torch.nn.Module):
    """A block run as a checkpoint region (optionally selective)."""

    def __init__(self, block: torch.nn.Module, context_fn: Callable[[], Any] | None) -> None:
        super().__init__()
        self.block, self.context_fn = block, context_fn

    def forward(self, x):
        if self.context_fn is None:
            return checkpoint(self.block, x, use_reentrant=False)
        return checkpoint(self.block, x, use_reentrant=False, context_fn=self.context_fn)


class _WallClockEvent:
    """torch.cuda.Event's timing interface on the host clock (for RuntimeEstimator on CPU)."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.seconds = 0.0

    def record(self, stream: Any = None) -> None:
        self.seconds = clock()()

    def elapsed_time(self, end: "_WallClockEvent") -> float:
        return (end.seconds - self.seconds) * 1e3


@contextlib.contextmanager
def _host_timed_estimator(device: str):
    """torch's RuntimeEstimator benchmarks each op between two torch.cuda.Events and its
    roofline mode asserts CUDA, so on a CPU-only torch neither runs ("Tried to instantiate
    dummy base class Event"). On CPU its benchmark mode is run with the events timed by the
    host clock (ops on CPU are synchronous); on CUDA nothing is changed."""
    if device == "cuda":
        yield
        return
    from unittest import mock

    with (
        mock.patch.object(torch.cuda, "Event", _WallClockEvent),
        mock.patch.object(torch.cuda, "current_stream", lambda *a, **k: None),
        mock.patch.object(torch.cuda, "synchronize", lambda *a, **k: None),
    ):
        yield


def sac_milp_graph(
    make_fake: Callable[[], torch.nn.Module],
    loss_of: Callable[[torch.nn.Module, Any], torch.Tensor],
    inputs: Any,
    device: str,
) -> dict[str, Any]:
    """torch's own SAC planner's inputs, as its tests make them: MemTracker, RuntimeEstimator
    and SACEstimator over one training step of a fake model (`make_fake()`, built under
    FakeTensorMode; its loss `loss_of(model, fake inputs)`), with operator benchmarks, then
    ``aggregate_stats`` and ``parse_module_info`` into a module graph. Modules that take no
    part in backward (a Hugging Face model's rotary embedding, which has no parameters) have
    no backward snapshot in MemTracker, which ``aggregate_stats`` requires: they are left out
    of the graph (they hold nothing the MILP could discard)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.ilp_utils import (
        aggregate_stats,
        get_peak_memory_runtime_baseline,
        parse_module_info,
    )
    from torch.distributed._tools.mem_tracker import MemTracker, _ModState
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator
    from torch.distributed._tools.sac_estimator import SACEstimator

    mode = "operator-level-benchmark"
    start = time.perf_counter()
    fake_mode = FakeTensorMode()
    fake_inputs = tree_map_only(torch.Tensor, fake_mode.from_tensor, inputs)
    with fake_mode, _host_timed_estimator(device):
        fake = make_fake()

        def step() -> None:
            loss_of(fake, fake_inputs).backward()
            fake.zero_grad(set_to_none=True)

        memory = MemTracker()
        memory.track_external(fake)
        with memory:
            step()
        for module in list(memory.memory_tracking.keys()):
            if _ModState.PRE_BW not in memory.memory_tracking[module].snapshots:
                del memory.memory_tracking[module]
        runtime = RuntimeEstimator()
        with runtime(estimate_mode_type=mode):
            step()
        estimator = SACEstimator()
        with estimator(estimate_mode_type=mode):
            loss = loss_of(fake, fake_inputs)
        loss.backward()
        info = aggregate_stats(fake, memory, runtime, estimator, torch.device(device))
    kept = {stats["fqn"] for stats in info["mod_stats"]}
    for order, fqns in info["mod_order"].items():
        info["mod_order"][order] = [fqn for fqn in fqns if fqn in kept]
    graph = parse_module_info(info)
    baseline, _ = get_peak_memory_runtime_baseline(graph)
    return {
        "graph": graph,
        "estimator": estimator,
        "baseline_bytes": baseline,
        "root": graph.nodes[0]["fqn"],
        "estimate_seconds": time.perf_counter() - start,
    }


def sac_milp_plan(found: dict[str, Any], units: list[str], target_bytes: float) -> dict[str, Any]:
    """``sac_milp`` (PuLP/CBC) over `found` (sac_milp_graph) for a modelled peak of
    `target_bytes` with the AC units `units` (module fqns): a discard ratio per unit it
    checkpoints, each turned by ``get_optimal_checkpointing_policy_per_module`` into which of
    the unit's ops SAC saves (policies: fqn -> (op names, saved flags))."""
    from torch.distributed._tools.sac_ilp import (
        get_optimal_checkpointing_policy_per_module,
        sac_milp,
    )

    start = time.perf_counter()
    ratios, recompute_ms, peak = sac_milp(
        found["graph"], memory_budget=target_bytes / 2**30, world_size=1, ac_units=units
    )
    solve_seconds = time.perf_counter() - start
    start = time.perf_counter()
    policies = {}
    for fqn, ratio in ratios.items():
        stats = found["estimator"].sac_mod_stats[fqn]
        # sac_milp's ratio is the share of the unit's SAC memory to discard; torch's per-module
        # MILP takes the share to keep.
        saved = get_optimal_checkpointing_policy_per_module(stats, max(0.0, 1 - ratio))
        policies[fqn] = (tuple(stats.func_names), tuple(saved))
    return {
        "milp_budget_bytes": target_bytes,
        "feasible": peak >= 0,
        "discard_ratios": ratios,
        "predicted_recompute_ms": recompute_ms,
        "predicted_peak_bytes": peak,
        "solve_seconds": solve_seconds,
        "policy_seconds": time.perf_counter() - start,  # the per-unit MILPs
        "policies": policies,
    }


def sac_milp_plans(config, device, dtype, tokens, budgets, everything) -> dict[str, Any]:
    """sac_milp_graph and sac_milp_plan on the Llama-style model, at each budget.

    Budgets: sac_milp bounds its modelled peak (parameters, gradients, activations, activation
    gradients) in GiB; a budget here is the blocks' saved bytes, so the MILP is asked for the
    same reduction below its own no-checkpoint peak: its baseline peak - (everything - budget).
    AC units are restricted to the blocks (as every other method here acts on blocks; left
    free, the MILP may also pick the whole model as one unit)."""

    def make_fake() -> torch.nn.Module:
        torch.manual_seed(0)
        default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(dtype)  # Module.to() cannot swap fake parameters
        try:
            with torch.device(device):
                fake, _, _ = models.make_llama(**config)
        finally:
            torch.set_default_dtype(default_dtype)
        return fake

    found = sac_milp_graph(make_fake, lambda model, t: models.loss(model(t)), tokens, device)
    root = found["root"]
    units = [f"{root}.layers.{i}" for i in range(config["depth"])]
    plans: dict[int, dict[str, Any]] = {}
    for budget in budgets:
        plan = sac_milp_plan(found, units, found["baseline_bytes"] - (everything - budget))
        plan["policies"] = {
            int(fqn.rsplit(".", 1)[1]): policy for fqn, policy in plan["policies"].items()
        }
        plans[budget] = plan
    return {
        "estimate_seconds": found["estimate_seconds"],
        "baseline_bytes": found["baseline_bytes"],
        "plans": plans,
    }


MILP_DIVERGED: dict[str, str] = {}  # label -> the first op that differed (stated in the report)
MILP_APPLIED: set[str] = set()  # labels whose policy ran


def sac_milp_contexts(names: tuple[str, ...], saved: tuple[int, ...], label: str):
    """A block's policy from torch's per-module MILP: the i-th op SACEstimator recorded (its
    OPS_TO_ALWAYS_SKIP left out) is saved when saved[i] is 1. From an op that differs from the
    recorded one on, everything is re-computed (always correct), and the report says so."""
    from torch.distributed._tools.sac_estimator import OPS_TO_ALWAYS_SKIP

    def contexts():
        state = {"position": 0, "diverged": False}
        MILP_APPLIED.add(label)

        def policy(ctx, func, *args, **kwargs):
            if func in OPS_TO_ALWAYS_SKIP:
                return CheckpointPolicy.PREFER_RECOMPUTE
            index = state["position"]
            state["position"] += 1
            if index >= len(names) or func._overloadpacket.__name__ != names[index]:
                if not state["diverged"]:
                    MILP_DIVERGED.setdefault(
                        label,
                        f"op {index} is {func}, SACEstimator recorded "
                        f"{names[index] if index < len(names) else 'none'}",
                    )
                state["diverged"] = True
            if state["diverged"] or not saved[index]:
                return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE

        return create_selective_checkpoint_contexts(policy)

    return contexts


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class Method:
    def __init__(self, name: str, setup: Callable[[], Callable[[], None]]) -> None:
        self.name, self.setup = name, setup


def run_step(model, tokens) -> None:
    models.loss(model(tokens)).backward()


def peak_of(step: Callable[[], None], model, device: str) -> int:
    model.zero_grad(set_to_none=False)
    if device == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        sync(device)
        return torch.cuda.max_memory_allocated() - base
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(model)
    with tracker:
        step()
    snapshot = tracker.get_tracker_snapshot("peak")
    device_snapshot = next(iter(snapshot.values()))
    return sum(v for k, v in device_snapshot.items() if str(k).split(".")[-1] in ("ACT", "TEMP"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budgets", type=int, default=4)
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench/results/eager_ops")
    parser.add_argument(
        "--config",
        default=None,
        help="model size as key=value,... over the device's default (e.g. depth=2,seq=64)",
    )
    parser.add_argument("--no-sac-milp", action="store_true", help="leave torch's sac_milp out")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch's intra-op threads on CPU (default 1: steps are timed by the thread's CPU "
        "time, which a shared machine's load does not inflate)",
    )
    args = parser.parse_args()
    device = args.device
    if device == "cpu":
        torch.set_num_threads(args.threads or 1)
    now = clock()
    args.load_before = f"{os.getloadavg()[0]:.2f}"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    config = dict(CONFIGS[device])
    if args.config:
        for item in args.config.split(","):
            key, value = item.split("=")
            config[key] = int(value)
    torch.manual_seed(0)
    model, blocks, tokens = models.make_llama(**config)
    model.to(device=device, dtype=dtype)
    tokens = tokens.to(device)
    layers = model.layers
    originals = list(layers)

    def reset_layers(new=None):
        for i in range(len(originals)):
            layers[i] = originals[i] if new is None else new[i]

    run_step(model, tokens)
    measured = rt.measure(model, tokens, verbose=False)
    least, everything = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
    print(measured.table())

    def plain_setup():
        reset_layers()
        return lambda: run_step(model, tokens)

    def sequential_setup(segments):
        def setup():
            reset_layers()

            def forward(tokens_):
                x = model.embed(tokens_)
                x = checkpoint_sequential(list(originals), segments, x, use_reentrant=False)
                return model.head(model.norm(x))

            return lambda: models.loss(forward(tokens)).backward()

        return setup

    def wrapped_setup(context_fn):
        def setup():
            reset_layers([Wrapped(b, context_fn) for b in originals])
            return lambda: run_step(model, tokens)

        return setup

    handles: dict[str, Any] = {}

    def remat_setup(budget, granularity):
        def setup():
            reset_layers()
            key = (budget, granularity)
            if key not in handles:
                handles[key] = rt.auto_checkpoint(
                    model, activation_budget=budget, granularity=granularity
                )
                run_step(model, tokens)  # measures and plans
                handles[key].remove()
            handle = handles[key]
            handle.reinstall()
            return lambda: run_step(model, tokens)

        return setup

    budgets = sorted(
        {least + (everything - least) * k // (args.budgets - 1) for k in range(args.budgets)}
        | ({everything // 2} if everything // 2 >= least else set())  # small --config sizes
    )
    methods = [Method("no checkpointing", plain_setup)]
    methods += [
        Method(f"checkpoint_sequential {s}", sequential_setup(s))
        for s in range(2, len(originals) + 1)
        if len(originals) % s == 0
    ]
    methods += [
        Method("full AC per block", wrapped_setup(None)),
        Method("torchtitan op policy", wrapped_setup(titan_policy_contexts)),
    ]
    for budget in budgets:
        methods += [
            Method(f"remat op {format_bytes(budget)}", remat_setup(budget, "op")),
            Method(f"remat block {format_bytes(budget)}", remat_setup(budget, "block")),
        ]
    milp: dict[str, Any] = {"skipped": "--no-sac-milp"} if args.no_sac_milp else {}
    if not args.no_sac_milp:
        try:
            milp = sac_milp_plans(config, device, dtype, tokens, budgets, everything)
        except ImportError as error:  # pulp or pwlf missing
            milp = {"skipped": f"{type(error).__name__}: {error}"}
        for budget, found in milp.get("plans", {}).items():
            if not found["feasible"]:
                continue
            contexts = {
                i: sac_milp_contexts(names, saved, f"sac_milp layer {i}")
                for i, (names, saved) in found["policies"].items()
            }

            def milp_setup(contexts=contexts):
                reset_layers(
                    [
                        Wrapped(b, contexts[i]) if i in contexts else b
                        for i, b in enumerate(originals)
                    ]
                )
                return lambda: run_step(model, tokens)

            methods.append(Method(f"sac_milp {format_bytes(budget)}", milp_setup))

    def restore() -> None:
        """The model as built: every remat handle off, the original blocks back in place."""
        for handle in handles.values():
            handle.remove()
        reset_layers()

    results: dict[str, dict] = {}
    for method in methods:
        step = method.setup()
        step()  # warm-up (and, for remat, the plan)
        results[method.name] = {"peak": peak_of(step, model, device), "times": []}
        restore()
    plain_method, others = methods[0], methods[1:]

    def timed(method) -> float:
        step = method.setup()
        model.zero_grad(set_to_none=False)
        sync(device)
        start = now()
        step()
        sync(device)
        seconds = now() - start
        restore()
        return seconds

    # Paired rounds: plain, m1, plain, m2, ..., plain. Each method's step is divided by the mean
    # of the plain steps on either side of it, so a machine that drifts over a round (frequency,
    # load, other tenants) moves both sides of the ratio alike.
    for r in results.values():
        r["ratios"] = []
    for _ in range(args.repeats):
        random.shuffle(others)
        before = timed(plain_method)
        results[plain_method.name]["times"].append(before)
        for method in others:
            seconds = timed(method)
            after = timed(plain_method)
            results[method.name]["times"].append(seconds)
            results[method.name]["ratios"].append(seconds / ((before + after) / 2))
            results[plain_method.name]["times"].append(after)
            before = after
    for r in results.values():
        r["seconds"] = statistics.median(r["times"])
        r["over"] = statistics.median(r["ratios"]) - 1 if r["ratios"] else 0.0
    plain = results["no checkpointing"]
    outside = max(0, plain["peak"] - everything)
    report = write_report(
        args,
        device,
        dtype,
        config,
        results,
        budgets,
        plain,
        outside,
        least,
        everything,
        handles,
        milp,
    )
    print(report)


def write_report(
    args, device, dtype, config, results, budgets, plain, outside, least, everything, handles, milp
) -> str:
    lines = [
        f"# Op-level checkpointing, Llama-style decoder ({device})",
        "",
        f"torch {torch.__version__}, {torch.cuda.get_device_name() if device == 'cuda' else platform.processor() or 'cpu'}, "
        f"{dtype}, config {config}; `{' '.join(['python bench/eager_ops.py', *sys.argv[1:]])}`",
        "",
        f"Step times: {torch.get_num_threads()} intra-op thread(s), timed by "
        + (
            "the stepping thread's CPU time (a shared machine's load is not counted)"
            if clock() is time.thread_time
            else "the wall clock"
        )
        + f"; machine load average before the run {args.load_before}, after "
        f"{os.getloadavg()[0]:.2f}.",
        "",
        f"Blocks' saved bytes: no checkpoint {format_bytes(everything)}, least remat accepts "
        f"{format_bytes(least)}. Plain step {plain['seconds'] * 1e3:.1f} ms, peak "
        f"{format_bytes(plain['peak'])} ({format_bytes(outside)} beyond the blocks' saved bytes: "
        "a method fits a budget when its peak is at most the budget plus that).",
        "",
        "## Every method",
        "",
        "Over plain is the median, over the rounds, of the method's step divided by the mean of the "
        "plain steps run just before and just after it (targets are judged on it); its quartile "
        "spread says how much the pairs disagree. Step is the median of the method's own steps, "
        "for scale.",
        "",
        "| method | peak | over plain (paired) | paired quartile spread | step | fastest step |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in sorted(results.items(), key=lambda kv: kv[1]["peak"]):
        spread = ""
        if len(r["ratios"]) > 1:
            quartiles = statistics.quantiles(r["ratios"], n=4)
            spread = f"{(quartiles[2] - quartiles[0]) * 100:.1f} pts"
        lines.append(
            f"| {name} | {format_bytes(r['peak'])} | {r['over'] * 100:+.1f}% | {spread} | "
            f"{r['seconds'] * 1e3:.1f} ms | {min(r['times']) * 1e3:.1f} ms |"
        )
    lines += [
        "",
        "## At each budget: remat against the fastest other method that fits",
        "",
        "| budget | remat op+region | remat region-only | fastest other that fits | remat op / other (paired steps) | target |",
        "| ---: | ---: | ---: | --- | ---: | --- |",
    ]
    summary = []
    for budget in budgets:
        op = results[f"remat op {format_bytes(budget)}"]
        block = results[f"remat block {format_bytes(budget)}"]
        others = [
            (r["over"], name)
            for name, r in results.items()
            if not name.startswith("remat") and r["peak"] <= budget + outside
        ]
        best = min(others) if others else None
        ratio = (1 + op["over"]) / (1 + best[0]) if best else float("nan")
        met = best is None or op["over"] <= best[0]
        summary.append({"budget": budget, "op": op, "block": block, "best": best, "met": met})
        lines.append(
            f"| {format_bytes(budget)} | {op['over'] * 100:+.1f}%, {format_bytes(op['peak'])} | "
            f"{block['over'] * 100:+.1f}%, {format_bytes(block['peak'])} | "
            + (f"{best[1]}: {best[0] * 100:+.1f}%" if best else "none fits")
            + f" | {ratio:.3f} | {'met' if met else 'missed'} |"
        )
    half = min(budgets, key=lambda b: abs(b - everything // 2))
    op_over = results[f"remat op {format_bytes(half)}"]["over"]
    block_over = results[f"remat block {format_bytes(half)}"]["over"]
    lines += [
        "",
        f"At half the no-checkpoint saved bytes ({format_bytes(half)}): remat op+region "
        f"{op_over * 100:+.1f}% over plain, region-only {block_over * 100:+.1f}%; target "
        f"(op overhead <= half of region-only's): "
        f"{'met' if op_over <= block_over / 2 else 'missed'}.",
        "",
    ]
    lines += milp_report(milp, budgets, results, outside, device)
    lines += ["## remat's plans", ""]
    for (budget, granularity), handle in sorted(handles.items()):
        if granularity == "op":
            lines += [f"### {format_bytes(budget)}", "", "```", str(handle.plan), "```", ""]
    text = "\n".join(lines)
    milp_json = {k: v for k, v in milp.items() if k != "plans"}
    milp_json["plans"] = {
        str(b): {k: v for k, v in p.items() if k != "policies"}
        | {"saved_ops": {i: sum(saved) for i, (_, saved) in p["policies"].items()}}
        for b, p in milp.get("plans", {}).items()
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"README_{device}.md").write_text(text)
    (args.out / f"results_{device}.json").write_text(
        json.dumps(
            {"methods": results, "sac_milp": milp_json, "config": config, "repeats": args.repeats},
            indent=1,
            default=str,
        )
    )
    return text


def milp_report(milp, budgets, results, outside, device) -> list[str]:
    lines = ["## torch's sac_milp", ""]
    if "skipped" in milp:
        return lines + [f"Not run: {milp['skipped']}.", ""]
    lines += [
        f"SACEstimator, MemTracker and RuntimeEstimator (operator benchmarks"
        f"{', timed by the host clock: see _host_timed_estimator' if device == 'cpu' else ''})"
        f" over one fake step took {milp['estimate_seconds']:.1f} s; sac_milp's own "
        f"no-checkpoint peak (parameters, gradients, activations) is "
        f"{format_bytes(milp['baseline_bytes'])}, and at each budget it is asked for that minus "
        "(the blocks' no-checkpoint saved bytes - the budget). Discard ratios are per block "
        "(blocks not listed run plainly); saved ops are what torch's per-module MILP keeps.",
        "",
        "| budget | MILP budget | sac_milp solve | per-block MILPs | blocks: discard ratio (ops saved) | predicted peak | measured peak | over plain (paired) | fits |",
        "| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- |",
    ]
    for budget in budgets:
        p = milp["plans"][budget]
        name = f"sac_milp {format_bytes(budget)}"
        ratios = (
            ", ".join(
                f"{fqn.rsplit('.', 1)[1]}: {r:.2f} ({sum(p['policies'][int(fqn.rsplit('.', 1)[1])][1])} ops)"
                for fqn, r in sorted(
                    p["discard_ratios"].items(), key=lambda kv: int(kv[0].rsplit(".", 1)[1])
                )
            )
            or "none"
        )
        if not p["feasible"]:
            lines.append(
                f"| {format_bytes(budget)} | {format_bytes(p['milp_budget_bytes'])} | "
                f"{p['solve_seconds'] * 1e3:.0f} ms | | infeasible | | | | |"
            )
            continue
        r = results[name]
        lines.append(
            f"| {format_bytes(budget)} | {format_bytes(p['milp_budget_bytes'])} | "
            f"{p['solve_seconds'] * 1e3:.0f} ms | {p['policy_seconds'] * 1e3:.0f} ms | {ratios} | "
            f"{format_bytes(p['predicted_peak_bytes'])} | {format_bytes(r['peak'])} | "
            f"{r['over'] * 100:+.1f}% | {'yes' if r['peak'] <= budget + outside else 'no'} |"
        )
    if MILP_DIVERGED:
        lines += [
            "",
            "Policies that met other ops than SACEstimator recorded (re-computed from there):",
        ]
        lines += [f"- {label}: {what}" for label, what in sorted(MILP_DIVERGED.items())]
    elif MILP_APPLIED:
        lines += [
            "",
            f"Each of the {len(MILP_APPLIED)} blocks run with a sac_milp policy ran the ops "
            "SACEstimator recorded, in order: every policy applied as planned.",
        ]
    return lines + [""]


if __name__ == "__main__":
    main()
