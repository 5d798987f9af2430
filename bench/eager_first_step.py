"""What auto_checkpoint's first step costs, and what per-block plans cost against nested ones.

For each model: a plain training step, then auto_checkpoint at a few budgets between the least
and the no-checkpoint one, reporting the first step (measuring and planning) and later steps:
time (median of later steps) and, on CUDA, torch.cuda.max_memory_allocated over the step
above what was allocated before it. The budget counts the blocks' saved bytes; a step's peak
also holds parameters' gradients, the embedding, the head and the loss, so the check is
"first-step peak <= budget + the plain step's peak - the plain blocks' saved bytes".

Also: for each model and budget, the predicted recompute of the per-block plan (every block
a region or none, what auto_checkpoint runs on a model whose own code calls its blocks) against
the nested plan the same profile allows when the blocks form a chain.

    python bench/eager_first_step.py                      # CPU sizes, writes bench/results/eager_first_step/
    python bench/eager_first_step.py --device cuda --out DIR   # the GPU sizes
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import platform
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
import remat  # noqa: E402
import remat.eager  # noqa: E402
import remat.torch as rt  # noqa: E402
from remat.units import format_bytes  # noqa: E402

CPU = {
    "gpt": dict(depth=6, width=128, heads=4, seq=64, batch=8),
    "llama": dict(depth=6, width=128, heads=4, seq=64, batch=8),
    "mlp": dict(depth=12, width=256, batch=256),
    "resnet": dict(per_stage=2, batch=16, size=32),
}
CUDA = {
    "llama": dict(depth=16, width=2048, heads=16, seq=2048, batch=4, vocab=32000),
    "gpt": dict(depth=12, width=1024, heads=16, seq=1024, batch=8, vocab=32000),
}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def step(model, x, device: str) -> tuple[float, int]:
    """Seconds and (CUDA) peak bytes allocated above the start of one training step."""
    sync(device)
    base = 0
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    models.loss(model(x)).backward()
    sync(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() - base if device == "cuda" else 0
    model.zero_grad(set_to_none=False)
    return seconds, peak


def run_model(name: str, config: dict, device: str, dtype: torch.dtype, steps: int) -> dict:
    torch.manual_seed(0)
    model, _, x = models.MODELS[name](**config)
    model.to(device=device, dtype=dtype)
    x = x.to(device)
    if x.is_floating_point():
        x = x.to(dtype)
    for _ in range(2):  # warm-up: gradients allocated, kernels chosen
        step(model, x, device)
    plain = [step(model, x, device) for _ in range(steps)]
    plain_seconds = statistics.median(s for s, _ in plain)
    plain_peak = max(p for _, p in plain)
    measured = rt.measure(model, x, verbose=False)
    least, everything = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
    rows = []
    for fraction in (1.0, 0.5, 0.25, 0.0):
        budget = least + int(fraction * (everything - least))
        handle = rt.auto_checkpoint(model, activation_budget=budget)
        first = step(model, x, device)
        later = [step(model, x, device) for _ in range(steps)]
        handle.remove()
        plan = handle.plan
        nested = remat.eager.plan_profile(
            dataclasses.replace(plan.profile, max_region_layers=0), budget
        )
        try:
            per_block = remat.eager.plan_profile(
                dataclasses.replace(plan.profile, max_region_layers=1), budget
            ).predicted_recompute_seconds
        except remat.InputError:  # below the least per-block budget
            per_block = None
        rows.append(
            {
                "budget": budget,
                "mode": "chain" if handle.blocks.chain is not None else "per block",
                "regions": len(plan.regions),
                "predicted_peak": plan.predicted_peak_bytes,
                "first_seconds": first[0],
                "first_peak": first[1],
                "later_seconds": statistics.median(s for s, _ in later),
                "later_peak": max(p for _, p in later),
                "first_over_later": first[0] / statistics.median(s for s, _ in later),
                "per_block_recompute": per_block,
                "nested_recompute": nested.predicted_recompute_seconds,
                "first_peak_within": (
                    first[1] <= budget + plain_peak - everything if device == "cuda" else None
                ),
            }
        )
    return {
        "model": name,
        "config": config,
        "blocks": handle.blocks.describe(),
        "plain_seconds": plain_seconds,
        "plain_peak": plain_peak,
        "least_budget": least,
        "no_checkpoint_budget": everything,
        "forward_seconds": measured.profile.forward_seconds,
        "rows": rows,
    }


def report(results: list[dict], device: str, header: str) -> str:
    lines = [f"# auto_checkpoint: first step and per-block cost ({device})", "", header, ""]
    for r in results:
        lines += [
            f"## {r['model']}: {r['blocks']}",
            "",
            f"plain step {r['plain_seconds'] * 1e3:.1f} ms"
            + (f", peak {format_bytes(r['plain_peak'])}" if device == "cuda" else "")
            + f"; blocks' saved bytes: no checkpoint {format_bytes(r['no_checkpoint_budget'])}, "
            f"least {format_bytes(r['least_budget'])}",
            "",
            "| budget | mode | regions | first step | later steps | first / later |"
            + (" first peak | later peak | first within |" if device == "cuda" else "")
            + " per-block recompute | nested recompute |",
            "| ---: | --- | ---: | ---: | ---: | ---: |"
            + (" ---: | ---: | --- |" if device == "cuda" else "")
            + " ---: | ---: |",
        ]
        for row in r["rows"]:
            cuda = (
                f" {format_bytes(row['first_peak'])} | {format_bytes(row['later_peak'])} | "
                f"{row['first_peak_within']} |"
                if device == "cuda"
                else ""
            )
            lines.append(
                f"| {format_bytes(row['budget'])} | {row['mode']} | {row['regions']} | "
                f"{row['first_seconds'] * 1e3:.1f} ms | {row['later_seconds'] * 1e3:.1f} ms | "
                f"{row['first_over_later']:.2f}x |{cuda} "
                + (
                    f"{row['per_block_recompute'] * 1e3:.2f} ms | "
                    if row["per_block_recompute"] is not None
                    else "below its least | "
                )
                + f"{row['nested_recompute'] * 1e3:.2f} ms |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--models", default="")
    parser.add_argument(
        "--out", default=str(ROOT / "bench" / "results" / "eager_first_step"), type=pathlib.Path
    )
    args = parser.parse_args()
    configs = CUDA if args.device == "cuda" else CPU
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    names = args.models.split(",") if args.models else list(configs)
    results = []
    for name in names:
        results.append(run_model(name, configs[name], args.device, dtype, args.steps))
        print(json.dumps(results[-1]["rows"][-1]), flush=True)
    machine = (
        torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or "cpu"
    )
    header = (
        f"torch {torch.__version__} on {machine}, {torch.get_num_threads()} threads, "
        f"{dtype}; `python bench/eager_first_step.py --device {args.device}`"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"results_{args.device}.json").write_text(json.dumps(results, indent=1))
    (args.out / f"README_{args.device}.md").write_text(report(results, args.device, header))
    print(report(results, args.device, header))


if __name__ == "__main__":
    main()
