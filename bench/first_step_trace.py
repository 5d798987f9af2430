"""auto_checkpoint's first step, measured (first_step="measure") against traced on fake tensors
(first_step="trace"), on the zoo's models with AdamW at a memory_budget halfway between
measure()'s least and no-checkpoint step peaks.

Per model and mode, interleaved over rounds (fresh model and handle each): the first step's
time, of it the trace (planning from fakes), the first step's measured peak (StepMemoryMeter on
the CPU, max_memory_allocated on CUDA), later steps' median time and peak, whether any step
went over the budget, and remat's warnings.

    python bench/first_step_trace.py                 # writes bench/results/first_step/
    python bench/first_step_trace.py --device cuda --out DIR
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import platform
import re
import statistics
import sys
import time
import warnings

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
import remat  # noqa: E402
import remat.torch as rt  # noqa: E402
from remat.units import format_bytes  # noqa: E402
from zoo import (
    adopt,  # noqa: E402
    torchvision_cpu,  # noqa: E402, F401  (before transformers)
)
from zoo.models import ZOO  # noqa: E402

MODELS = ["llama", "qwen2", "gpt2", "t5", "vit", "convnext"]


def _on(value, device):
    return value.to(device) if isinstance(value, torch.Tensor) else value


def _budgets(zoo, model, args, kwargs) -> tuple[int, int]:
    """measure()'s least step peak, and the budget halfway to its no-checkpoint one."""
    probe = copy.deepcopy(model)
    measured = rt.measure(
        probe,
        *args,
        blocks=adopt.blocks_of(zoo, probe),
        loss_fn=zoo.loss,
        optimizer=torch.optim.AdamW(probe.parameters()),
        **kwargs,
    )
    least = measured.least_budget_bytes
    return least, (least + measured.no_checkpoint_step_bytes) // 2


def _traced_least(zoo, model, args, kwargs) -> int:
    """The least budget first_step="trace" accepts: the one its refusal of 1 byte names."""
    trained = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-3)
    handle = adopt.enable_step(zoo, trained, 1, optimizer=optimizer, first_step="trace")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trained(*args, **kwargs)
    except remat.InputError as error:
        found = re.search(r"least peak of this training step, (\d+) bytes", str(error))
        assert found is not None, str(error)
        return int(found.group(1))
    finally:
        handle.remove()
    raise AssertionError("a 1-byte budget was accepted")


def _run(zoo, model, args, kwargs, budget, mode, device, steps) -> dict:
    trained = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-3)
    traced = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handle = adopt.enable_step(zoo, trained, budget, optimizer=optimizer, first_step=mode)
        plan_from_trace = handle._plan_from_trace

        def timed(*a, **k):
            started = time.perf_counter()
            try:
                return plan_from_trace(*a, **k)
            finally:
                traced.append(time.perf_counter() - started)

        handle._plan_from_trace = timed
        times, peaks = [], []
        for _ in range(steps):
            with rt.StepMemoryMeter(trained, optimizer, (args, kwargs)) as meter:
                if device == "cuda":
                    torch.cuda.synchronize()
                started = time.perf_counter()
                zoo.loss(trained(*args, **kwargs)).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                if device == "cuda":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - started)
            peaks.append(meter.peak_bytes)
        handle.remove()
    said = [str(w.message) for w in caught if "remat" in str(w.message)]
    return {"times": times, "peaks": peaks, "trace": sum(traced), "said": said}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "first_step"))
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    rows = []
    for name in args.models.split(","):
        zoo = ZOO[name]
        torch.manual_seed(0)
        model = zoo.build(zoo.attention[0]).to(args.device)
        batch_args, batch_kwargs = zoo.batch()
        batch_args = tuple(_on(a, args.device) for a in batch_args)
        batch_kwargs = {k: _on(v, args.device) for k, v in batch_kwargs.items()}
        least, budget = _budgets(zoo, model, batch_args, batch_kwargs)
        traced_least = _traced_least(zoo, model, batch_args, batch_kwargs)
        at_least = _run(zoo, model, batch_args, batch_kwargs, traced_least, "trace", args.device, 3)
        runs: dict[str, list[dict]] = {"measure": [], "trace": []}
        for _ in range(args.rounds):
            for mode in runs:
                found = _run(
                    zoo, model, batch_args, batch_kwargs, budget, mode, args.device, args.steps
                )
                runs[mode].append(found)
        row = {
            "model": name,
            "budget": budget,
            "least": least,
            "traced_least": traced_least,
            "over_at_least": sum(p > traced_least for p in at_least["peaks"]),
        }
        for mode, found in runs.items():
            row[mode] = {
                "first_s": statistics.median(r["times"][0] for r in found),
                "trace_s": statistics.median(r["trace"] for r in found),
                "later_s": statistics.median(t for r in found for t in r["times"][2:]),
                "first_peak": max(r["peaks"][0] for r in found),
                "later_peak": max(p for r in found for p in r["peaks"][1:]),
                "over": sum(p > budget for r in found for p in r["peaks"]),
                "said": sorted({s for r in found for s in r["said"]}),
            }
        rows.append(row)
        m, t = row["measure"], row["trace"]
        print(
            f"{name}: first step {1e3 * m['first_s']:.0f} -> {1e3 * t['first_s']:.0f} ms "
            f"(trace {1e3 * t['trace_s']:.0f} ms), first peak {format_bytes(m['first_peak'])} "
            f"-> {format_bytes(t['first_peak'])}, budget {format_bytes(budget)}",
            flush=True,
        )
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# auto_checkpoint's first step: measured against traced ({args.device})",
        "",
        f"Command: `python bench/first_step_trace.py {' '.join(sys.argv[1:])}`. torch "
        f"{torch.__version__}, {platform.processor() or platform.machine()}; the zoo's models "
        f"with AdamW at memory_budget halfway between measure()'s least and no-checkpoint step "
        f"peaks; {args.rounds} interleaved rounds of {args.steps} steps, medians. Date "
        f"{time.strftime('%Y-%m-%d')}.",
        "",
        "| model | budget | first step: measure | trace (of it: tracing) | ratio | first-step "
        "peak: measure | trace | later step: measure | trace | steps over | said |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for row in rows:
        m, t = row["measure"], row["trace"]
        lines.append(
            f"| {row['model']} | {format_bytes(row['budget'])} | {1e3 * m['first_s']:.0f} ms | "
            f"{1e3 * t['first_s']:.0f} ms ({1e3 * t['trace_s']:.0f} ms) | "
            f"{t['first_s'] / m['first_s']:.2f} | {format_bytes(m['first_peak'])} | "
            f"{format_bytes(t['first_peak'])} | {1e3 * m['later_s']:.1f} ms | "
            f"{1e3 * t['later_s']:.1f} ms | {m['over']} / {t['over']} | "
            f"{'; '.join(m['said'] + t['said']) or '-'} |"
        )
    lines += [
        "",
        "The least budget each accepts: measure()'s `least_budget_bytes`, and the one "
        'first_step="trace" names when it refuses 1 byte; then 3 traced steps at the latter.',
        "",
        "| model | least: measure | least: trace | ratio | steps over it |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['model']} | {row['least']} | {row['traced_least']} | "
            f"{row['traced_least'] / row['least']:.4f} | {row['over_at_least']} / 3 |"
        )
    (out / f"trace_{args.device}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
