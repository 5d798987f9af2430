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
- no checkpointing.

Peak: on CUDA ``torch.cuda.max_memory_allocated`` over the step above what was allocated before
it; on CPU torch's ``MemTracker`` (activations and temporaries at the step's peak). A method
fits a budget when its peak is at most the budget plus what the plain step holds outside the
blocks' saved bytes (embedding, head, loss, backward's working set). Step time: median over
repeats, all methods interleaved in a shuffled order each round.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import random
import statistics
import sys
import time
from typing import Any, Callable

import torch
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
    args = parser.parse_args()
    device = args.device
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    config = CONFIGS[device]
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
    least, everything = measured.least_budget_bytes, measured.no_checkpoint_bytes
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
                    model, memory_budget=budget, granularity=granularity
                )
                run_step(model, tokens)  # measures and plans
                handles[key].remove()
            handle = handles[key]
            handle.reinstall()
            return lambda: run_step(model, tokens)

        return setup

    budgets = sorted(
        {least + (everything - least) * k // (args.budgets - 1) for k in range(args.budgets)}
        | {everything // 2}
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
    results: dict[str, dict] = {}
    for method in methods:
        step = method.setup()
        step()  # warm-up (and, for remat, the plan)
        results[method.name] = {"peak": peak_of(step, model, device), "times": []}
        for handle in handles.values():
            handle.remove()
        reset_layers()
    order = list(methods)
    for _ in range(args.repeats):
        random.shuffle(order)
        for method in order:
            step = method.setup()
            model.zero_grad(set_to_none=False)
            sync(device)
            start = time.perf_counter()
            step()
            sync(device)
            results[method.name]["times"].append(time.perf_counter() - start)
            for handle in handles.values():
                handle.remove()
            reset_layers()
    for r in results.values():
        r["seconds"] = statistics.median(r["times"])
    plain = results["no checkpointing"]
    outside = max(0, plain["peak"] - everything)
    report = write_report(args, device, dtype, config, results, budgets, plain, outside, least,
                          everything, handles)
    print(report)


def write_report(args, device, dtype, config, results, budgets, plain, outside, least,
                 everything, handles) -> str:
    lines = [
        f"# Op-level checkpointing, Llama-style decoder ({device})",
        "",
        f"torch {torch.__version__}, {torch.cuda.get_device_name() if device == 'cuda' else platform.processor() or 'cpu'}, "
        f"{dtype}, config {config}; `python bench/eager_ops.py --device {device}`",
        "",
        f"Blocks' saved bytes: no checkpoint {format_bytes(everything)}, least remat accepts "
        f"{format_bytes(least)}. Plain step {plain['seconds'] * 1e3:.1f} ms, peak "
        f"{format_bytes(plain['peak'])} ({format_bytes(outside)} beyond the blocks' saved bytes: "
        "a method fits a budget when its peak is at most the budget plus that).",
        "",
        "## Every method",
        "",
        "| method | peak | step | over plain |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, r in sorted(results.items(), key=lambda kv: kv[1]["peak"]):
        lines.append(
            f"| {name} | {format_bytes(r['peak'])} | {r['seconds'] * 1e3:.1f} ms | "
            f"{(r['seconds'] / plain['seconds'] - 1) * 100:+.1f}% |"
        )
    lines += [
        "",
        "## At each budget: remat against the fastest other method that fits",
        "",
        "| budget | remat op+region | remat region-only | fastest other that fits | remat op / other | target |",
        "| ---: | ---: | ---: | --- | ---: | --- |",
    ]
    summary = []
    for budget in budgets:
        op = results[f"remat op {format_bytes(budget)}"]
        block = results[f"remat block {format_bytes(budget)}"]
        others = [
            (r["seconds"], name)
            for name, r in results.items()
            if not name.startswith("remat") and r["peak"] <= budget + outside
        ]
        best = min(others) if others else None
        ratio = op["seconds"] / best[0] if best else float("nan")
        met = best is None or op["seconds"] <= best[0]
        summary.append({"budget": budget, "op": op, "block": block, "best": best, "met": met})
        lines.append(
            f"| {format_bytes(budget)} | {op['seconds'] * 1e3:.1f} ms, {format_bytes(op['peak'])} | "
            f"{block['seconds'] * 1e3:.1f} ms, {format_bytes(block['peak'])} | "
            + (f"{best[1]}: {best[0] * 1e3:.1f} ms" if best else "none fits")
            + f" | {ratio:.3f} | {'met' if met else 'missed'} |"
        )
    half = min(budgets, key=lambda b: abs(b - everything // 2))
    op_over = results[f"remat op {format_bytes(half)}"]["seconds"] / plain["seconds"] - 1
    block_over = results[f"remat block {format_bytes(half)}"]["seconds"] / plain["seconds"] - 1
    lines += [
        "",
        f"At half the no-checkpoint saved bytes ({format_bytes(half)}): remat op+region "
        f"{op_over * 100:+.1f}% over plain, region-only {block_over * 100:+.1f}%; target "
        f"(op overhead <= half of region-only's): "
        f"{'met' if op_over <= block_over / 2 else 'missed'}.",
        "",
        "## remat's plans",
        "",
    ]
    for (budget, granularity), handle in sorted(handles.items()):
        if granularity == "op":
            lines += [f"### {format_bytes(budget)}", "", "```", str(handle.plan), "```", ""]
    text = "\n".join(lines)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"README_{device}.md").write_text(text)
    (args.out / f"results_{device}.json").write_text(
        json.dumps({name: {k: v for k, v in r.items()} for name, r in results.items()}, indent=1)
    )
    return text


if __name__ == "__main__":
    main()
