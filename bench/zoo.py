"""remat against what Hugging Face users run, on the model zoo's decoders, interleaved in one
process: plain training, HF's own gradient checkpointing (and its offload to the host, on CUDA),
torch's checkpoint_wrapper on every block, torchtitan's per-op policy on every block, torch's
sac_milp (needs `pip install pulp pwlf`; asked for HF checkpointing's saved bytes, see
sac_milp_model), and remat at the memory each of them needs.

"Equal memory" is the training step's measured peak: every byte the step holds (parameters,
gradients, AdamW's state, activations, temporaries), by remat.torch.StepMemoryMeter (equal to
torch's MemTracker total on the CPU; max_memory_allocated on CUDA), once AdamW's state exists.
remat@X is remat.integrations.transformers.enable(memory_budget=X's step peak): no search, the
budget as a user gives it. Its own steps' peaks are measured too. The blocks' saved bytes (and
their outputs wherever saved; tests/python/zoo/meter.py) are reported beside. Step times are
medians over rounds in which every configuration runs once in a shuffled order, timed by the
thread's CPU time with one thread on CPU, by the wall clock on CUDA.

    python bench/zoo.py                        # CPU, the sizes of the issue (hidden 256, seq 128)
    python bench/zoo.py --device cuda --hidden 2048 --layers 16 --seq 2048 --dtype bfloat16

Writes bench/results/zoo/README_<device>.md and results_<device>.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import platform
import random
import statistics
import sys
import time
from typing import Any, Callable

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The zoo package of the tests, ahead of this script's folder (where `zoo` is this file).
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.append(str(ROOT / "bench"))

sys.modules.pop("zoo", None)
import remat  # noqa: E402
import remat.integrations.transformers as hf  # noqa: E402
import remat.torch as rt  # noqa: E402
from remat.eager._runtime import clock  # noqa: E402
from zoo import torchvision_cpu  # noqa: E402,F401  (before transformers)
from zoo.meter import BlockMeter  # noqa: E402

BASELINES = (
    "plain",
    "hf_gradient_checkpointing",
    "hf_offload",
    "checkpoint_wrapper",
    "torchtitan_per_op",
    "torch_sac_milp",
)
DECODERS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
}


def build(name: str, args: argparse.Namespace) -> torch.nn.Module:
    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    return construct(name, args).to(args.device, dtype).train()


def construct(name: str, args: argparse.Namespace) -> torch.nn.Module:
    """The model of `name` at the sizes of `args`, in torch's default dtype and device."""
    import transformers

    config_class, model_class = DECODERS[name]
    if name == "gpt2":
        cfg = transformers.GPT2Config(
            vocab_size=args.vocab,
            n_positions=args.seq,
            n_embd=args.hidden,
            n_layer=args.layers,
            n_head=args.heads,
            bos_token_id=0,
            eos_token_id=0,
        )
    else:
        extra = {"num_local_experts": 4, "num_experts_per_tok": 2} if name == "mixtral" else {}
        cfg = getattr(transformers, config_class)(
            vocab_size=args.vocab,
            hidden_size=args.hidden,
            intermediate_size=2 * args.hidden,
            num_hidden_layers=args.layers,
            num_attention_heads=args.heads,
            num_key_value_heads=max(1, args.heads // 2),
            max_position_embeddings=args.seq,
            **extra,
        )
    cfg._attn_implementation = "sdpa"
    cfg.use_cache = False  # as HF users train (HF's checkpointing turns it off too)
    return getattr(transformers, model_class)(cfg).train()


def step_of(model: torch.nn.Module, ids: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        model(ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)

    return step


class TrainStep:
    """One AdamW training step of `model` on `ids` (the loss inside the model), as HF's Trainer
    runs it: the output let go before the backward, gradients set to None after the step."""

    def __init__(self, model: torch.nn.Module, ids: torch.Tensor) -> None:
        self.model, self.ids = model, ids
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def __call__(self) -> None:
        loss = self.model(self.ids, labels=self.ids).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def peak(self) -> int:
        """This step's measured peak (every byte on the device)."""
        with rt.StepMemoryMeter(self.model, self.optimizer, self.ids) as meter:
            self()
        return meter.peak_bytes


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def saved_peak(step: Callable[[], None], model: torch.nn.Module) -> int:
    with BlockMeter(model, hf.find_layers(model)) as meter:
        step()
    return meter.peak_bytes


def baselines(base: torch.nn.Module) -> dict[str, torch.nn.Module]:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    from eager_ops import titan_policy_contexts

    out = {"plain": copy.deepcopy(base)}
    model = copy.deepcopy(base)
    enable = getattr(model, "activation_checkpointing_enable", None)
    kwargs = {"use_reentrant": False}
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    out["hf_gradient_checkpointing"] = model
    for name, context in (
        ("checkpoint_wrapper", None),
        ("torchtitan_per_op", titan_policy_contexts),
    ):
        model = copy.deepcopy(base)
        layers = set(map(id, hf.find_layers(model)))
        options = {} if context is None else {"context_fn": context}
        apply_activation_checkpointing(
            model,
            checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(
                m, checkpoint_impl=CheckpointImpl.NO_REENTRANT, **options
            ),
            check_fn=lambda m: id(m) in layers,
        )
        out[name] = model
    return out


def hf_offload(base: torch.nn.Module) -> torch.nn.Module:
    """HF's checkpointing with the saved inputs held in pinned host memory (transformers >= 5.17;
    CUDA only: on the CPU there is no device memory to free)."""
    model = copy.deepcopy(base)
    model.activation_checkpointing_enable(
        activation_checkpointing_kwargs={"use_reentrant": False}, offload=True
    )
    return model


def sac_milp_model(
    name: str,
    base: torch.nn.Module,
    ids: torch.Tensor,
    everything: int,
    saved: int,
    args: argparse.Namespace,
) -> tuple[torch.nn.Module | None, dict[str, Any]]:
    """torch's sac_milp (bench/eager_ops.py: its estimators on a fake copy of the model, its
    MILP over the blocks as AC units, torch's per-module MILP for each block's ops) asked for
    the blocks' saved bytes `saved` (HF checkpointing's): its modelled no-checkpoint peak less
    (`everything` - `saved`). Where that is infeasible, the target is raised toward the
    no-checkpoint peak in eighths until it is not. The model with the plan applied (each chosen
    block under checkpoint_wrapper with its SAC policy), or None with why."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    from eager_ops import sac_milp_contexts, sac_milp_graph, sac_milp_plan

    def make_fake() -> torch.nn.Module:
        torch.manual_seed(0)
        default = torch.get_default_dtype()
        torch.set_default_dtype(getattr(torch, args.dtype))  # .to() cannot swap fake parameters
        try:
            with torch.device(args.device):
                return construct(name, args)
        finally:
            torch.set_default_dtype(default)

    try:
        found = sac_milp_graph(make_fake, lambda m, t: m(t, labels=t).loss, ids, args.device)
    except ImportError as error:  # pulp or pwlf missing
        return None, {"error": f"needs pip install pulp pwlf ({error})"}
    except Exception as error:  # torch's estimators on this model, under FakeTensorMode
        first = str(error).strip().splitlines()[0][:160]
        return None, {
            "error": f"its estimators failed on a fake copy: {type(error).__name__}: {first}"
        }
    names = {id(m): n for n, m in base.named_modules()}
    units = [f"{found['root']}.{names[id(layer)]}" for layer in hf.find_layers(base)]
    baseline = found["baseline_bytes"]
    start = baseline - (everything - saved)
    for step in range(9):
        plan = sac_milp_plan(found, units, start + (baseline - start) * step / 8)
        if plan["feasible"]:
            break
    info = {k: v for k, v in plan.items() if k != "policies"}
    info.update(estimate_seconds=found["estimate_seconds"], baseline_bytes=baseline)
    if not plan["feasible"] or not plan["policies"]:
        return None, dict(info, error="sac_milp found no plan that checkpoints a block")
    model = copy.deepcopy(base)
    contexts = {}
    by_name = {n: m for n, m in model.named_modules()}
    for unit, (ops, kept) in plan["policies"].items():
        layer = by_name[unit[len(found["root"]) + 1 :]]
        contexts[id(layer)] = sac_milp_contexts(ops, kept, f"sac_milp {unit}")
    apply_activation_checkpointing(
        model,
        checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(
            m, checkpoint_impl=CheckpointImpl.NO_REENTRANT, context_fn=contexts[id(m)]
        ),
        check_fn=lambda m: id(m) in contexts,
    )
    return model, info


def measure(base: torch.nn.Module, ids: torch.Tensor) -> Any:
    """remat's measurement of a copy of `base` on `ids`: its least and no-checkpoint budgets."""
    copied = copy.deepcopy(base)
    return rt.measure(
        copied,
        ids,
        labels=ids,
        loss_fn=lambda o: o.loss,
        blocks=hf.find_layers(copied),
        verbose=False,
    )


def remat_at(
    base: torch.nn.Module, ids: torch.Tensor, budget: int, device: str, granularity: str = "op"
) -> dict[str, Any]:
    """remat on a fresh copy at memory_budget=`budget`: its first step timed, every step of its
    own measuring and checking metered (none may pass the budget), then its step peak."""
    model = copy.deepcopy(base)
    try:
        handle = hf.enable(model, memory_budget=budget, granularity=granularity)
    except remat.InputError as error:
        return {"error": str(error)}
    step = TrainStep(model, ids)
    sync(device)
    now = clock()
    start = now()
    try:
        with rt.StepMemoryMeter(model, step.optimizer, ids) as meter:
            step()  # measures and plans
    except remat.InputError as error:  # below the least step peak
        return {"error": str(error).split(". ")[0]}
    sync(device)
    first = now() - start
    peaks = [meter.peak_bytes] + [step.peak() for _ in range(3)]  # its plan's checked steps
    return {
        "model": model,
        "step": step,
        "budget": budget,
        "first": first,
        "plan": handle.plan,
        "saved": saved_peak(step, model),
        "high_water": step.peak(),
        "peaks": peaks,
        "warnings": handle.warnings,
    }


def run_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    base = build(name, args)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g).to(args.device)
    models = baselines(base)
    if args.device == "cuda":
        models["hf_offload"] = hf_offload(base)
    configs: dict[str, dict[str, Any]] = {}

    def add(label: str, model: torch.nn.Module) -> None:
        step = TrainStep(model, ids)
        step()  # warm-up: AdamW's state exists from here on
        configs[label] = {"model": model, "step": step, "saved": saved_peak(step, model)}

    for label, model in models.items():
        add(label, model)
    everything, hf_saved = configs["plain"]["saved"], configs["hf_gradient_checkpointing"]["saved"]
    milp, milp_info = sac_milp_model(name, base, ids, everything, hf_saved, args)
    if milp is not None:
        models["torch_sac_milp"] = milp
        add("torch_sac_milp", milp)
    for config in configs.values():
        config["high_water"] = config["step"].peak()
    for label in list(models):
        target = configs[label]["high_water"]
        configs[f"remat@{label}"] = dict(remat_at(base, ids, target, args.device), target=target)
        if label == "hf_gradient_checkpointing":  # what the op-level options add
            block = remat_at(base, ids, target, args.device, granularity="block")
            configs["remat_block_only@hf"] = dict(block, target=target)
    for config in configs.values():
        config["times"] = []
    runnable = [k for k, v in configs.items() if "step" in v]
    now = clock()
    for _ in range(args.rounds):
        random.shuffle(runnable)
        for label in runnable:
            sync(args.device)
            start = now()
            configs[label]["step"]()
            sync(args.device)
            configs[label]["times"].append(now() - start)
    result = {}
    for label, config in configs.items():
        if "error" in config:
            result[label] = {"error": config["error"]}
            continue
        entry = {
            "median_s": statistics.median(config["times"]),
            "saved_bytes": config["saved"],
            "high_water_bytes": config["high_water"],
        }
        if "plan" in config:
            plan = config["plan"]
            entry.update(
                budget_bytes=config["budget"],
                first_steps_peak_bytes=config["peaks"],
                predicted_step_bytes=plan.step.predicted_peak_bytes if plan.step else None,
                predicted_bytes=plan.predicted_peak_bytes,
                regions=len(plan.regions),
                selective=sum(1 for o in plan.options if o),
                first_step_s=config["first"],
                warnings=config["warnings"],
            )
        result[label] = entry
    result["sac_milp_info"] = {k: v for k, v in milp_info.items() if k != "discard_ratios"}
    result["sac_milp_info"]["blocks"] = sorted(milp_info.get("discard_ratios", {}))
    return result


def report(results: dict[str, Any], args: argparse.Namespace) -> str:
    lines = [
        f"# remat on Hugging Face decoders against their own checkpointing ({args.device})",
        "",
        f"Command: `python bench/zoo.py {' '.join(sys.argv[1:])}`. Machine: {platform.machine()}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); hidden {args.hidden}, "
        f"{args.layers} layers, batch {args.batch} x seq {args.seq}, {args.dtype}; median of "
        f"{args.rounds} interleaved rounds. Date {time.strftime('%Y-%m-%d')}.",
        "",
        "step peak: every byte the step holds at its peak, AdamW's state included (remat's "
        "StepMemoryMeter; max_memory_allocated on CUDA). saved: the blocks' saved bytes and their "
        "outputs at the step's peak. remat@X runs at memory_budget = X's step peak; ratio = "
        "remat@X's step / X's step; over: remat@X's steps (its first, measuring, and the three "
        "after, checked) whose peak passed the budget; first/later = remat@X's first step "
        "(measuring, planning) / its later median.",
        "",
    ]
    met, over = 0, 0
    for model, rows in results.items():
        lines += [
            f"## {model}",
            "",
            "| method | step ms | saved MiB | step peak MiB | "
            "remat@ step ms | ratio | remat@ saved | remat@ step peak | over | regions/selective "
            "| first/later |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for label in BASELINES:
            if label not in rows:
                continue
            base, ours = rows[label], rows.get(f"remat@{label}", {})
            cells = [
                label,
                f"{base['median_s'] * 1e3:.1f}",
                f"{base['saved_bytes'] / 2**20:.2f}",
                f"{base['high_water_bytes'] / 2**20:.2f}",
            ]
            if "error" in ours:
                cells += ["refused: " + ours["error"][:90], "", "", "", "", "", ""]
            else:
                ratio = ours["median_s"] / base["median_s"]
                if label == "hf_gradient_checkpointing" and ratio <= 1.0:
                    met += 1
                passed = sum(
                    peak > ours["budget_bytes"]
                    for peak in [*ours["first_steps_peak_bytes"], ours["high_water_bytes"]]
                )
                over += passed
                cells += [
                    f"{ours['median_s'] * 1e3:.1f}",
                    f"{ratio:.3f}",
                    f"{ours['saved_bytes'] / 2**20:.2f}",
                    f"{ours['high_water_bytes'] / 2**20:.2f}",
                    str(passed),
                    f"{ours['regions']}/{ours['selective']}",
                    f"{ours['first_step_s'] / ours['median_s']:.2f}",
                ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        milp = rows["sac_milp_info"]
        if "error" in milp:
            lines += [f"torch_sac_milp: {milp['error']}.", ""]
        else:
            lines += [
                f"torch_sac_milp: modelled peak budget {milp['milp_budget_bytes'] / 2**20:.2f} "
                f"MiB (its no-checkpoint peak {milp['baseline_bytes'] / 2**20:.2f} MiB), "
                f"checkpointing {len(milp['blocks'])} blocks; estimators "
                f"{milp['estimate_seconds']:.1f} s, MILP {milp['solve_seconds']:.2f} s.",
                "",
            ]
        ours, block = (
            rows.get("remat@hf_gradient_checkpointing", {}),
            rows.get("remat_block_only@hf"),
        )
        if block and "median_s" in ours:
            lines += [
                f"Op-level options at HF's peak: remat with them {ours['median_s'] * 1e3:.1f} ms "
                f"({ours['selective']} selective blocks), whole-block regions only "
                f"{block['median_s'] * 1e3:.1f} ms ({block['regions']} regions), same budget; "
                f"ratio {ours['median_s'] / block['median_s']:.3f}.",
                "",
            ]
    from eager_ops import MILP_DIVERGED

    if MILP_DIVERGED:
        lines += [
            "torch_sac_milp's policies met ops other than SACEstimator recorded (from there on "
            "they re-compute): " + "; ".join(f"{k}: {v}" for k, v in MILP_DIVERGED.items()),
            "",
        ]
    lines += [
        f"Target (at HF checkpointing's step peak, remat's step <= HF's on every decoder): "
        f"{'met' if met == len(results) else 'missed'} ({met} of {len(results)}).",
        "",
        f"Target (no remat step over its budget, the first included): "
        f"{'met' if over == 0 else 'missed'} ({over} over).",
    ]
    return "\n".join(lines) + "\n"


# Fresh handles per model and granularity: a first step is one sample, and on a shared VM one
# sample's ratio to a later step moved by up to 0.4 between runs of the same code.
FIRST_STEP_TRIALS = 7


def first_steps(device: str, trials: int = FIRST_STEP_TRIALS, repeats: int = 5) -> dict[str, Any]:
    """Every model of the test zoo (its small configs), at the budget halfway between its least
    and its no-checkpoint one, op-level plans on and whole-block plans only: the first step
    (measuring and planning; the median over `trials` fresh handles, so one-time costs of the
    process do not count) against the median of `repeats` later steps, and plain training's."""
    from zoo import adopt
    from zoo.models import ZOO
    from zoo.training import pair

    out: dict[str, Any] = {}
    now = clock()
    for name, zoo in ZOO.items():
        args, kwargs = zoo.batch()

        def step(m: torch.nn.Module) -> float:
            sync(device)
            start = now()
            zoo.loss(m(*args, **kwargs)).backward()
            m.zero_grad(set_to_none=True)
            sync(device)
            return now() - start

        out[name] = {}
        for granularity in ("op", "block"):
            firsts, laters, plains = [], [], []
            for _ in range(trials):
                model, plain = pair(zoo, zoo.attention[0])
                model, plain = model.to(device), plain.to(device)
                measured = adopt.measure(zoo, copy.deepcopy(model))
                budget = (
                    measured.least_activation_budget_bytes + measured.no_checkpoint_bytes
                ) // 2
                adopt.enable(zoo, model, budget, granularity=granularity)
                step(plain)  # warm-up
                firsts.append(step(model))
                laters.append(statistics.median(step(model) for _ in range(repeats)))
                plains.append(statistics.median(step(plain) for _ in range(repeats)))
            out[name][granularity] = {
                "first_s": statistics.median(firsts),
                "later_s": statistics.median(laters),
                "plain_s": statistics.median(plains),
            }
        f = out[name]["op"]
        print(f"zoo bench: first step of {name}: {f['first_s'] / f['later_s']:.2f}x", flush=True)
    return out


def first_step_report(found: dict[str, Any]) -> list[str]:
    lines = [
        "## First step on every zoo model",
        "",
        "The test zoo's configs (tests/python/zoo/models.py: hidden 64-128, 2-4 blocks, sequences "
        "of 32), budget halfway between the least and no checkpointing; first step = median over "
        f"{FIRST_STEP_TRIALS} fresh handles. Target: first step <= 3x a later step.",
        "",
        "| model | first ms | later ms | plain ms | first / later | block only: first / later |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, by in found.items():
        f, b = by["op"], by["block"]
        lines.append(
            f"| {name} | {f['first_s'] * 1e3:.1f} | {f['later_s'] * 1e3:.1f} | "
            f"{f['plain_s'] * 1e3:.1f} | {f['first_s'] / f['later_s']:.2f} | "
            f"{b['first_s'] / b['later_s']:.2f} |"
        )
    worst = max(by["op"]["first_s"] / by["op"]["later_s"] for by in found.values())
    lines += ["", f"Target: {'met' if worst <= 3 else 'missed'} (worst {worst:.2f}x).", ""]
    return lines


def size_arguments(parser: argparse.ArgumentParser) -> None:
    """The decoders' sizes besides their width (see build)."""
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--dtype", default="float32")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", default=",".join(DECODERS))
    parser.add_argument("--hidden", type=int, default=256)
    size_arguments(parser)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "zoo"))
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    random.seed(0)
    results = {}
    for name in args.models.split(","):
        print(f"zoo bench: {name}", flush=True)
        results[name] = run_model(name, args)
    firsts = first_steps(args.device)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    saved = {"decoders": results, "first_steps": firsts}
    (out / f"results_{args.device}.json").write_text(json.dumps(saved, indent=1, default=str))
    text = report(results, args) + "\n" + "\n".join(first_step_report(firsts))
    (out / f"README_{args.device}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
