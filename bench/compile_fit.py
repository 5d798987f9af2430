"""remat.torch.fit on inductor: budgets that use() alone misses as measured, met by retrying.

For the Llama-style model (examples/models.py, compiled with its loss), budgets spread from the
least to past the highest peak of its aot_eager curve (remat.torch.tradeoff): each is given to
use() alone under inductor (predicted and measured peak, within or over) and to fit() (its
attempts: target, predicted, measured, seconds; the target found, or that none was met).

    python bench/compile_fit.py                    # CPU, the sizes of bench/compile_budget.py

Writes bench/results/compile_budget/fit_<device>.md.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch
import torch._functorch.config as functorch_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
import remat.torch as rt  # noqa: E402
from remat.compiled import measured_peak  # noqa: E402
from remat.step_memory import held_at_start  # noqa: E402
from remat.units import format_bytes  # noqa: E402

SIZES = {
    "cpu": dict(depth=4, width=128, heads=4, seq=64, batch=4, vocab=512),
    "cuda": dict(depth=4, width=2048, heads=16, seq=2048, batch=4, vocab=32000),
}


def use_alone(model, x, budget: int, device: str) -> tuple[int, int]:
    """(predicted, measured) peak of one inductor compile under use(memory_budget=budget)."""
    torch._dynamo.reset()
    # use() takes the whole step's peak; `budget` is beyond the step's start.
    within = rt.use(memory_budget=held_at_start(x.device, model, x) + budget)
    with functorch_config.patch(enable_autograd_cache=False), within as s:
        compiled = torch.compile(lambda t: models.loss(model(t)), backend="inductor")
        compiled(x).backward()
        model.zero_grad(set_to_none=True)
        measured = measured_peak(lambda: compiled(x).backward(), device)
        model.zero_grad(set_to_none=True)
    return s.choices[0].chosen.peak.peak, measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--points", default="0.75,1.0,1.1,1.2")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "compile_budget"))
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    torch.manual_seed(0)
    model, _, x = models.MODELS["llama"](**SIZES[args.device])
    model, x = model.to(args.device), x.to(args.device)
    curve = rt.tradeoff(model, x, backend="aot_eager", measure=0, loss=models.loss, verbose=False)
    least = min(p.predicted_peak for p in curve.points)
    high = max(p.predicted_peak for p in curve.curve)
    lines = [
        f"# remat.torch.fit on inductor ({args.device})",
        "",
        f"Command: `python bench/compile_fit.py {' '.join(sys.argv[1:])}`. torch "
        f"{torch.__version__}; Llama-style model {SIZES[args.device]}; its aot_eager curve runs "
        f"from {format_bytes(least)} to {format_bytes(high)}. Budget = least + point x (high - "
        f"least). Peaks are beyond what the step begins holding. Date {time.strftime('%Y-%m-%d')}.",
        "",
        "| budget | use() alone: predicted | measured | within | fit(): attempts (target, "
        "predicted, measured, s) | fit(): result |",
        "| ---: | ---: | ---: | --- | --- | --- |",
    ]
    for point in map(float, args.points.split(",")):
        budget = int(least + (high - least) * point)
        predicted, measured = use_alone(model, x, budget, args.device)
        try:
            # fit()'s budget is the whole step's: what the step begins holding, then this.
            found = rt.fit(
                model, x, memory_budget=curve.start_bytes + budget, loss=models.loss, verbose=False
            )
            attempts, result = (
                found.attempts,
                f"use(memory_budget={found.memory_budget}): "
                f"{format_bytes(found.measured - found.attempts[-1].start)}",
            )
        except rt.BudgetNotMet as error:
            attempts, result = error.attempts, "not met (least measured above the budget)"
        steps = "; ".join(
            f"{format_bytes(a.target - a.start)}, {format_bytes(a.predicted - a.start)}, "
            f"{format_bytes(a.measured - a.start)}, "
            f"{a.seconds:.1f}"
            for a in attempts
        )
        lines.append(
            f"| {format_bytes(budget)} | {format_bytes(predicted)} | {format_bytes(measured)} | "
            f"{'yes' if measured <= budget else 'no'} | {steps} | {result} |"
        )
        print(lines[-1], flush=True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"fit_{args.device}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
