"""Eager checkpointing to a budget: remat against torch.utils.checkpoint.checkpoint_sequential.

    python bench/eager.py            # all three models, about 5 minutes on 2 cores
    python bench/eager.py --quick    # smaller models and fewer repeats, under a minute
    python bench/eager.py --device cuda

For each model (examples/models.py) and budgets from no checkpointing down to the least any
plan reaches, it measures, for remat's plan and for every segment count of torch's
checkpoint_sequential (non-reentrant, as remat runs), the peak saved-for-backward bytes of the
checkpointed chain (remat.torch.SavedTensorMeter; on CUDA also torch.cuda.max_memory_allocated
over the whole step) and the median training-step time (forward, loss, backward), all configs
interleaved repeat by repeat so drift hits them alike. torch's entry at a budget is its fastest
segment count whose measured peak fits that budget. Writes bench/results/eager/README.md,
results.json and curves.png.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import random
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

import models  # noqa: E402
import remat.torch as rt  # noqa: E402
from remat import eager  # noqa: E402

OUT = ROOT / "bench" / "results" / "eager"

FULL = {
    "mlp": dict(depth=16, width=256, batch=512),
    "gpt": dict(depth=8, width=192, heads=6, seq=128, batch=8, dropout=0.1),
    "resnet": dict(per_stage=4, batch=32, size=32),
    "llama": dict(depth=8, width=192, heads=6, seq=128, batch=8),
}
QUICK = {
    "mlp": dict(depth=8, width=128, batch=128),
    "gpt": dict(depth=4, width=64, heads=4, seq=64, batch=4, dropout=0.1),
    "resnet": dict(per_stage=2, batch=8, size=16),
    "llama": dict(depth=4, width=64, heads=4, seq=64, batch=4),
}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


class Bench:
    def __init__(self, name: str, config: dict, device: str) -> None:
        torch.manual_seed(0)
        self.model, blocks, self.x = models.MODELS[name](**config)
        self.model.to(device)
        self.x = self.x.to(device)
        self.blocks = list(blocks)
        self.device = device

    def chain_input(self) -> torch.Tensor:
        """What the chain receives in a step, cut from the graph (requiring grad when the
        prologue has parameters, as in training)."""
        with torch.no_grad():
            h = self.model.prologue(self.x)
        return h.requires_grad_(any(True for _ in self.model.parameters()) and h is not self.x)

    def step(self, run_chain) -> None:
        """One training step with the chain run by `run_chain(blocks, h)`."""
        self.model.zero_grad(set_to_none=True)
        out = run_chain(self.blocks, self.model.prologue(self.x))
        models.loss(self.model.epilogue(out)).backward()

    def measure_peak(self, run_chain) -> dict:
        """Peak saved bytes of the chain alone (the epilogue's saves are hidden from the meter),
        and on CUDA the peak allocated bytes of the whole step above what was allocated before."""
        self.model.zero_grad(set_to_none=True)
        result = {}
        if self.device == "cuda":
            sync(self.device)
            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
        h = self.model.prologue(self.x)
        start = h.detach().requires_grad_(h.requires_grad)
        with rt.SavedTensorMeter(self.model) as meter:
            out = run_chain(self.blocks, start)
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                loss = models.loss(self.model.epilogue(out))
            loss.backward()
        if h.requires_grad:
            h.backward(start.grad)
        result["saved_peak"] = meter.peak_bytes
        if self.device == "cuda":
            sync(self.device)
            result["cuda_peak_allocated"] = torch.cuda.max_memory_allocated() - before
        return result


def plain(blocks, h):
    for block in blocks:
        h = block(h)
    return h


def torch_runner(segments: int):
    def run(blocks, h):
        return torch.utils.checkpoint.checkpoint_sequential(
            blocks, segments, h, use_reentrant=False
        )

    return run


class RematRunner:
    """Runs the chain through a plan; keeps the re-run seconds each step measured."""

    def __init__(self, plan: eager.Plan) -> None:
        self.plan = plan
        self.execution: eager.Execution | None = None

    def __call__(self, blocks, h):
        self.execution = eager.Execution(blocks, self.plan.regions)
        return self.execution(h)


def bench_model(name: str, config: dict, device: str, budgets: int, repeats: int) -> dict:
    bench = Bench(name, config, device)
    n = len(bench.blocks)
    profile = rt.profile_layers(bench.blocks, bench.chain_input(), exclude=[bench.model], repeats=5)
    top = eager.plan_profile(profile, 2**60)
    least, everything = top.minimum_budget_bytes, top.no_checkpoint_bytes
    targets = [round(everything - k * (everything - least) / (budgets - 1)) for k in range(budgets)]
    # As checkpoint_sequential and auto_checkpoint plan: the planner's plan, tuned against the
    # uniform segmentations that fit by timing the chain (see remat.eager.plan).
    plans = [
        eager.tune_plan(bench.blocks, bench.chain_input(), eager.plan_profile(profile, b))
        for b in targets
    ]

    configs = {"none": plain}
    configs.update({f"torch:{s}": torch_runner(s) for s in range(2, n + 1)})
    configs.update({f"remat:{i}": RematRunner(p) for i, p in enumerate(plans)})
    peaks = {key: bench.measure_peak(run) for key, run in configs.items()}
    times: dict[str, list[float]] = {key: [] for key in configs}
    recompute: dict[str, list[float]] = {key: [] for key in configs if key.startswith("remat")}
    for run in configs.values():  # warm-up
        bench.step(run)
    order = list(configs.items())
    shuffle = random.Random(0)
    for _ in range(repeats):
        shuffle.shuffle(order)  # no config always runs first or after the same neighbour
        for key, run in order:
            sync(device)
            start = time.perf_counter()
            bench.step(run)
            sync(device)
            times[key].append(time.perf_counter() - start)
            if isinstance(run, RematRunner):
                recompute[key].append(run.execution.recompute_seconds)
    # torch's segment count is chosen on the even repeats and reported on the odd ones, so
    # that picking the least of many noisy medians does not flatter it.
    median = {key: statistics.median(v[1::2]) for key, v in times.items()}
    chosen_by = {key: statistics.median(v[0::2]) for key, v in times.items()}

    rows = []
    for i, (budget, plan) in enumerate(zip(targets, plans)):
        key = f"remat:{i}"
        fitting = [k for k in configs if k.startswith("torch") and peaks[k]["saved_peak"] <= budget]
        if peaks["none"]["saved_peak"] <= budget:
            fitting.append("none")
        best = min(fitting, key=lambda k: chosen_by[k]) if fitting else None
        rows.append(
            {
                "budget": budget,
                "remat_regions": [list(r) for r in plan.regions],
                "remat_choice": plan.choice,
                "remat_tuning": plan.timings,
                "remat_predicted_peak": plan.predicted_peak_bytes,
                "remat_predicted_recompute_s": plan.predicted_recompute_seconds,
                "remat_measured_recompute_s": statistics.median(recompute[key]),
                "remat_peak": peaks[key],
                "remat_step_s": median[key],
                "torch_choice": best,
                "torch_segments": (
                    None if best is None else (1 if best == "none" else int(best.split(":")[1]))
                ),
                "torch_peak": None if best is None else peaks[best],
                "torch_step_s": None if best is None else median[best],
            }
        )
    return {
        "config": config,
        "layers": n,
        "no_checkpoint": {"peak": peaks["none"], "step_s": median["none"]},
        "least_budget": least,
        "torch_all": {
            k: {"peak": peaks[k], "step_s": median[k]} for k in configs if k.startswith("torch")
        },
        "forward_s": profile.forward_seconds,
        "rows": rows,
    }


COLUMNS = [
    "budget MiB",
    "remat peak MiB (predicted)",
    "remat step ms",
    "remat overhead",
    "re-runs ms (predicted)",
    "chose",
    "torch segments",
    "torch peak MiB",
    "torch step ms",
    "torch / remat",
]


def mib(b: float) -> str:
    return f"{b / 2**20:.2f}"


def report(results: dict) -> str:
    meta = results["meta"]
    lines = [
        "# Eager checkpointing to a budget: remat vs torch.utils.checkpoint.checkpoint_sequential",
        "",
        f"Regenerate: `{meta['command']}` ({meta['machine']}, torch {meta['torch']}, "
        f"{meta['threads']} threads, device {meta['device']}; step times are medians of "
        f"{meta['repeats'] // 2} steps, every config once per round in an order shuffled each "
        "round; torch's segment count is chosen on another set of rounds of the same size).",
        "",
        "Memory is the peak of saved-for-backward bytes of the checkpointed chain, measured with "
        "`remat.torch.SavedTensorMeter` (storages counted once; parameters excluded). torch's "
        "column is its fastest segment count whose measured peak fits the budget (1 = no "
        "checkpointing). remat runs what `checkpoint_sequential`/`auto_checkpoint` run: the "
        "planner's plan, tuned against the uniform segmentations that fit (the `chose` column). "
        "Re-runs: the time remat's regions spent re-running in backward, measured around each "
        "outermost re-run, next to the planner's prediction (layer forward times plus a "
        "per-region overhead). Overhead is the step time over the step without checkpointing.",
        "",
    ]
    for name, r in results["models"].items():
        none = r["no_checkpoint"]
        lines += [
            f"## {name}: {r['layers']} blocks, `{json.dumps(r['config'])}`",
            "",
            f"No checkpointing: {mib(none['peak']['saved_peak'])} MiB saved, step "
            f"{none['step_s'] * 1e3:.1f} ms. The least budget any plan reaches: "
            f"{mib(r['least_budget'])} MiB.",
            "",
            "| " + " | ".join(COLUMNS) + " |",
            "| ---: | ---: | ---: | ---: | ---: | :--- | ---: | ---: | ---: | ---: |",
        ]
        for row in r["rows"]:
            overhead = row["remat_step_s"] / none["step_s"] - 1
            if row["torch_step_s"] is None:
                torch_cols = "none fits | — | — | —"
            else:
                torch_cols = (
                    f"{row['torch_segments']} | {mib(row['torch_peak']['saved_peak'])} | "
                    f"{row['torch_step_s'] * 1e3:.1f} | {row['torch_step_s'] / row['remat_step_s']:.2f}x"
                )
            lines.append(
                f"| {mib(row['budget'])} | {mib(row['remat_peak']['saved_peak'])} "
                f"({mib(row['remat_predicted_peak'])}) | {row['remat_step_s'] * 1e3:.1f} | "
                f"{overhead:+.0%} | {row['remat_measured_recompute_s'] * 1e3:.1f} "
                f"({row['remat_predicted_recompute_s'] * 1e3:.1f}) | {row['remat_choice']} | {torch_cols} |"
            )
        ratios = [
            row["torch_step_s"] / row["remat_step_s"] for row in r["rows"] if row["torch_step_s"]
        ]
        torch_least = min(v["peak"]["saved_peak"] for v in r["torch_all"].values())
        lines += [
            "",
            f"Least budget met: remat {mib(r['least_budget'])} MiB, torch "
            f"{mib(torch_least)} MiB (its least over all segment counts). torch / remat over the budgets "
            f"both meet: min {min(ratios):.2f}x, median {statistics.median(ratios):.2f}x, max "
            f"{max(ratios):.2f}x. The first row runs the same computation in both columns (no "
            "checkpoint), so its ratio reads the measurement noise.",
        ]
        if "cuda_peak_allocated" in none["peak"]:
            lines += [
                "",
                "CUDA peak allocated over the whole step (MiB): no checkpoint "
                f"{mib(none['peak']['cuda_peak_allocated'])}; remat at each budget: "
                + ", ".join(mib(row["remat_peak"]["cuda_peak_allocated"]) for row in r["rows"]),
            ]
        lines.append("")
    lines += ["![step time against budget](curves.png)", ""]
    return "\n".join(lines)


def plot(results: dict, path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results["models"])
    fig, axes = plt.subplots(2, len(names), figsize=(5 * len(names), 7), squeeze=False)
    for column, name in enumerate(names):
        r = results["models"][name]
        budgets = [row["budget"] / 2**20 for row in r["rows"]]
        ax = axes[0][column]
        ax.plot(budgets, [row["remat_step_s"] * 1e3 for row in r["rows"]], "o-", label="remat")
        fits = [
            (b, row["torch_step_s"] * 1e3)
            for b, row in zip(budgets, r["rows"])
            if row["torch_step_s"]
        ]
        ax.plot(
            [b for b, _ in fits], [t for _, t in fits], "s--", label="torch checkpoint_sequential"
        )
        ax.axhline(r["no_checkpoint"]["step_s"] * 1e3, color="gray", lw=0.8, label="no checkpoint")
        ax.set_title(name)
        ax.set_xlabel("budget (MiB of saved activations)")
        ax.set_ylabel("step time (ms)")
        ax.invert_xaxis()
        ax.legend(fontsize=8)
        ax = axes[1][column]
        ax.plot(budgets, budgets, color="gray", lw=0.8, label="budget")
        ax.plot(
            budgets,
            [row["remat_peak"]["saved_peak"] / 2**20 for row in r["rows"]],
            "o-",
            label="remat measured",
        )
        ax.plot(
            [b for b, row in zip(budgets, r["rows"]) if row["torch_peak"]],
            [row["torch_peak"]["saved_peak"] / 2**20 for row in r["rows"] if row["torch_peak"]],
            "s--",
            label="torch measured",
        )
        ax.set_xlabel("budget (MiB)")
        ax.set_ylabel("peak saved (MiB)")
        ax.invert_xaxis()
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--budgets", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--models", nargs="*", default=list(FULL))
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite README.md and curves.png from results.json",
    )
    args = parser.parse_args()
    if args.report_only:
        results = json.loads((args.out / "results.json").read_text())
        (args.out / "README.md").write_text(report(results))
        plot(results, args.out / "curves.png")
        return
    configs = QUICK if args.quick else FULL
    repeats = args.repeats or (4 if args.quick else 16)
    command = (
        "python bench/eager.py"
        + (" --quick" if args.quick else "")
        + (f" --device {args.device}" if args.device != "cpu" else "")
        + (f" --repeats {args.repeats}" if args.repeats else "")
    )
    results = {
        "meta": {
            "command": command,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs"
            + (f", {torch.cuda.get_device_name()}" if args.device == "cuda" else ""),
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "device": args.device,
            "repeats": repeats,
        },
        "models": {},
    }
    for name in args.models:
        started = time.perf_counter()
        results["models"][name] = bench_model(
            name, configs[name], args.device, args.budgets, repeats
        )
        print(f"{name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    (args.out / "README.md").write_text(report(results))
    plot(results, args.out / "curves.png")
    print(report(results))


if __name__ == "__main__":
    main()
