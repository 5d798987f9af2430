"""torch.compile to a budget in bytes: remat's predicted and measured peaks against torch's ratio.

For each model (GPT-style, ResNet-style, MLP-Mixer, Llama-style from examples/models.py) and
backend, the model and its loss are compiled together and one training step is measured:

- torch's own partitioner at ratio budgets (``activation_memory_budget``, its default ``dp``
  solver): the measured peak and step time;
- remat at byte budgets spread over the model's curve (``remat.torch.tradeoff``), and at each
  of torch's measured peaks (the same bytes): predicted and measured peak, step time, estimated
  recompute, and the ratio the chosen plan maps to.

Peaks: CPU allocator events under the profiler (CPU), ``max_memory_allocated`` (CUDA). Step
time: median of --steps steps after two warm-ups. Writes bench/results/compile_budget/.

    python bench/compile_budget.py                      # CPU, about 10 minutes on 2 cores
    python bench/compile_budget.py --device cuda        # the GPU sizes
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
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
    "cpu": {
        "gpt": dict(depth=4, width=128, heads=4, seq=64, batch=8, dropout=0.0),
        "resnet": dict(per_stage=2, batch=8, size=32),
        "mixer": dict(depth=4, width=128, patch=4, size=32, batch=16),
        "llama": dict(depth=4, width=128, heads=4, seq=64, batch=4, vocab=512),
    },
    "cuda": {
        "gpt": dict(depth=8, width=1024, heads=16, seq=1024, batch=8, dropout=0.0),
        "resnet": dict(per_stage=3, batch=64, size=128),
        "mixer": dict(depth=8, width=512, patch=8, size=224, batch=64),
        "llama": dict(depth=4, width=2048, heads=16, seq=2048, batch=4, vocab=32000),
    },
}
RATIOS = {"aot_eager": [1.0, 0.8, 0.5, 0.2, 0.1, 0.05, 0.0], "inductor": [1.0, 0.5, 0.1, 0.0]}


def build(name: str, device: str):
    torch.manual_seed(0)
    model, _, x = models.MODELS[name](**SIZES[device][name])
    model, x = model.to(device), x.to(device)
    if device == "cuda":
        model = model.to(torch.bfloat16) if name in ("llama", "gpt") else model
    return model, x


def run(model, x, backend: str, device: str, steps: int, solver_context) -> dict:
    torch._dynamo.reset()
    with functorch_config.patch(enable_autograd_cache=False), solver_context() as solver:
        compiled = torch.compile(lambda inputs: models.loss(model(inputs)), backend=backend)

        def step():
            compiled(x).backward()
            model.zero_grad(set_to_none=True)

        started = time.perf_counter()
        step()
        compile_seconds = time.perf_counter() - started
        step()
        peak = measured_peak(step, device)
        times, cpu_times = [], []
        for _ in range(steps):
            if device == "cuda":
                torch.cuda.synchronize()
            started, cpu_started = time.perf_counter(), time.process_time()
            step()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
            cpu_times.append(time.process_time() - cpu_started)
    row = {
        "measured": peak,
        "step_ms": 1e3 * statistics.median(times),
        "step_cpu_ms": 1e3 * statistics.median(cpu_times),  # this process's CPU time
        "compile_s": compile_seconds,
    }
    choices = getattr(solver, "choices", None)
    if choices:
        chosen = choices[0]
        row.update(
            predicted=chosen.chosen.peak.peak,
            recompute=chosen.chosen.recompute,
            ratio=chosen.ratio,
            graphs=len(choices),
            candidates=len(chosen.candidates),
            # Choosing, and the guard's check of the choice against torch's own split.
            solve_s=chosen.seconds + chosen.step_seconds.get("check", 0.0),
            step_s=dict(chosen.step_seconds),  # min-cut, split, liveness
            bounded=chosen.bounded,  # plans ruled out by the lower bound, without a split
        )
    return row


class _torch_ratio:
    def __init__(self, ratio: float) -> None:
        self.patch = functorch_config.patch(activation_memory_budget=ratio)

    def __call__(self):
        return self

    def __enter__(self):
        self.patch.__enter__()
        return None

    def __exit__(self, *exc):
        return self.patch.__exit__(*exc)


def fit_row(model, x, budget: int) -> dict:
    """remat.torch.fit at ``budget``: whether a compile measured within it, and at what cost."""
    try:
        # fit()'s budget is the whole step's: what the step begins holding, then `budget`.
        start = held_at_start(x.device, model, x)
        found = rt.fit(model, x, memory_budget=start + budget, loss=models.loss, verbose=False)
        attempts, met = found.attempts, True
    except rt.BudgetNotMet as error:
        attempts, met = error.attempts, False
    return {
        "fit_met": met,
        "fit_compiles": max(1, len(attempts)),
        "fit_seconds": sum(a.seconds for a in attempts),
        "fit_measured": attempts[-1].measured - attempts[-1].start if attempts else None,
    }


def bench_model(name: str, backend: str, device: str, steps: int, fit: bool = False) -> dict:
    model, x = build(name, device)
    curve = rt.tradeoff(model, x, backend=backend, measure=0, loss=models.loss)
    points = sorted(curve.curve, key=lambda p: -p.predicted_peak)
    torch_rows = []
    for ratio in RATIOS[backend]:
        row = run(model, x, backend, device, steps, _torch_ratio(ratio))
        torch_rows.append({"ratio": ratio, **row})
        print(
            f"  torch ratio {ratio:<5} measured {format_bytes(row['measured']):>10} "
            f"step {row['step_ms']:.1f} ms",
            flush=True,
        )
    high, low = points[0].predicted_peak, points[-1].predicted_peak
    if high == low:
        high = int(low * 1.2)
    spread = [int(high * 1.01 - (high * 1.01 - low) * k / 4) for k in range(5)]
    same_bytes = sorted({r["measured"] for r in torch_rows if r["measured"] >= low}, reverse=True)
    remat_rows = []
    for budget, source in [(b, "spread") for b in spread] + [
        (b, "torch's peak") for b in same_bytes
    ]:
        # use() takes the whole step's peak; the bench's budgets are beyond the step's start.
        start = held_at_start(x.device, model, x)
        row = run(model, x, backend, device, steps, lambda: rt.use(memory_budget=start + budget))
        if fit and backend == "inductor":
            row.update(fit_row(model, x, budget))
        remat_rows.append({"budget": budget, "source": source, **row})
        print(
            f"  remat {format_bytes(budget):>10} predicted {format_bytes(row['predicted']):>10} "
            f"measured {format_bytes(row['measured']):>10} step {row['step_ms']:.1f} ms",
            flush=True,
        )
    return {
        "model": name,
        "backend": backend,
        "size": SIZES[device][name],
        "curve": [p.__dict__ for p in curve.points],
        "torch": torch_rows,
        "remat": remat_rows,
    }


def non_monotone(rows: list[dict]) -> list[tuple[float, int, float, int]]:
    """Pairs of torch ratios where the smaller ratio measured a higher peak."""
    found = []
    ordered = sorted(rows, key=lambda r: -r["ratio"])
    for hi, lo in zip(ordered, ordered[1:]):
        if lo["measured"] > hi["measured"]:
            found.append((hi["ratio"], hi["measured"], lo["ratio"], lo["measured"]))
    return found


def report(results: list[dict], device: str, command: str) -> str:
    lines = [
        f"# torch.compile to a budget in bytes ({device})",
        "",
        f"Reproduce: `{command}`. Peak: "
        + (
            "CPU allocator events under the profiler"
            if device == "cpu"
            else "`torch.cuda.max_memory_allocated`"
        )
        + " over one training step (model and loss compiled together, gradients set to None "
        "before the step), above what was allocated before it. Step: median of the timed steps, "
        "wall and this process's CPU time. On the shared CPU machine (load 3-5 on 2 cores) "
        "identical plans measured up to 10x apart, in CPU time too (OpenMP threads spin while "
        "descheduled): the step times are recorded, not comparable; peaks are deterministic. "
        "`plans predicted`/`planning s`: candidates remat predicted for the chosen plan, and "
        "the time that took inside the compile; `skipped by bound`: plans ruled out by a lower "
        "bound on their peak after their min-cut, without a split; the last column splits the "
        "planning time into min-cuts, forward/backward splits and liveness walks. "
        "torch rows use its default `dp` solver at the ratio; remat rows use "
        "`remat.torch.use(memory_budget=...)`. `ratio` is the ratio budget torch's knapsack "
        "would need to save the same candidate ops. Recompute: torch's estimator (flops).",
        "",
    ]
    lines += ["## Summary", ""]
    for backend in sorted({r["backend"] for r in results}):
        rows = [row for r in results if r["backend"] == backend for row in r["remat"]]
        ratios = [row["measured"] / row["predicted"] for row in rows]
        within = sum(row["measured"] <= row["budget"] for row in rows)
        fitted = [row for row in rows if "fit_met" in row]
        if fitted:
            lines.append(
                f"- {backend} with remat.torch.fit(): within the budget in "
                f"{sum(row['fit_met'] for row in fitted)} of {len(fitted)}, after "
                f"{min(row['fit_compiles'] for row in fitted)}-"
                f"{max(row['fit_compiles'] for row in fitted)} compiles "
                f"({max(row['fit_seconds'] for row in fitted):.0f} s at most); a budget it "
                "cannot meet is refused (BudgetNotMet)"
            )
        lines.append(
            f"- {backend}: measured/predicted {min(ratios):.3f} to {max(ratios):.3f} over "
            f"{len(rows)} compiles; measured within the budget in {within} of {len(rows)}; "
            f"planning {min(row['solve_s'] for row in rows):.2f} to "
            f"{max(row['solve_s'] for row in rows):.1f} s per graph"
        )
    lines.append("")
    for result in results:
        lines += [f"## {result['model']} ({result['backend']}), size {result['size']}", ""]
        lines += [
            "| torch ratio | measured peak | step ms | step CPU ms |",
            "| ---: | ---: | ---: | ---: |",
        ]
        for row in result["torch"]:
            lines.append(
                f"| {row['ratio']} | {format_bytes(row['measured'])} | {row['step_ms']:.1f} | "
                f"{row['step_cpu_ms']:.1f} |"
            )
        lines += [
            "",
            "| remat budget | from | predicted | measured | measured/predicted | "
            "step ms | step CPU ms | recompute | ratio | plans predicted | skipped by bound | "
            "planning s | min-cut / split / walk / check s |",
            "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
            "| ---: |",
        ]
        for row in result["remat"]:
            lines.append(
                f"| {format_bytes(row['budget'])} | {row['source']} | "
                f"{format_bytes(row['predicted'])} | {format_bytes(row['measured'])} | "
                f"{row['measured'] / row['predicted']:.3f} | {row['step_ms']:.1f} | "
                f"{row['step_cpu_ms']:.1f} | {row['recompute']:.3g} | {row['ratio']:.3f} | "
                f"{row['candidates']} | {row.get('bounded', 0)} | "
                f"{row['solve_s']:.2f} | "
                + " / ".join(f"{v:.2f}" for v in row.get("step_s", {}).values())
                + " |"
            )
        over = [r for r in result["remat"] if r["measured"] > r["budget"]]
        rising = [
            (a["budget"], a["measured"], b["budget"], b["measured"])
            for a, b in zip(result["remat"][:5], result["remat"][1:5])
            if b["measured"] > a["measured"]
        ]
        lines += [
            "",
            f"- measured within budget: {len(result['remat']) - len(over)} of "
            f"{len(result['remat'])}"
            + (
                ""
                if not over
                else "; over: "
                + ", ".join(
                    f"{format_bytes(r['budget'])} by {100 * (r['measured'] / r['budget'] - 1):.1f}%"
                    for r in over
                )
            ),
        ]
        fitted = [r for r in result["remat"] if "fit_met" in r]
        if fitted:
            lines.append(
                f"- with remat.torch.fit(): within budget in {sum(r['fit_met'] for r in fitted)} "
                f"of {len(fitted)}; compiles "
                + ", ".join(str(r["fit_compiles"]) for r in fitted)
                + "; refused: "
                + (
                    ", ".join(format_bytes(r["budget"]) for r in fitted if not r["fit_met"])
                    or "none"
                )
            )
        lines += [
            "- remat's measured peak as the spread budgets fall: "
            + ("non-increasing" if not rising else f"rose at {rising}"),
        ]
        bad = non_monotone(result["torch"])
        lines.append(
            "- torch's ratio, non-monotone in measured peak: "
            + (
                "no"
                if not bad
                else "; ".join(
                    f"ratio {a} → {format_bytes(b)} but ratio {c} → {format_bytes(d)}"
                    for a, b, c, d in bad
                )
            )
        )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--models", default="gpt,resnet,mixer,llama")
    parser.add_argument("--inductor-models", default="mixer,llama")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "compile_budget"))
    parser.add_argument(
        "--fit",
        action="store_true",
        help="on inductor, also run remat.torch.fit at each remat budget",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite the README from the output's JSON without running anything",
    )
    parser.add_argument(
        "--append",
        action="store_true",
        help="keep the (model, backend) results already in the output's JSON that this run "
        "does not redo, and write the report over all of them",
    )
    args = parser.parse_args()
    if args.report_only:
        out = pathlib.Path(args.out)
        results = json.loads((out / f"results_{args.device}.json").read_text())
        readme = out / f"README_{args.device}.md"
        command = readme.read_text().split("Reproduce: `", 1)[1].split("`", 1)[0]
        readme.write_text(report(results, args.device, command))
        return
    jobs = [(m, "aot_eager") for m in args.models.split(",") if m]
    jobs += [(m, "inductor") for m in args.inductor_models.split(",") if m]
    results = []
    for name, backend in jobs:
        print(f"{name} ({backend})", flush=True)
        results.append(bench_model(name, backend, args.device, args.steps, args.fit))
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = "python " + " ".join(["bench/compile_budget.py"] + sys.argv[1:])
    saved = out / f"results_{args.device}.json"
    if args.append and saved.exists():
        done = {(r["model"], r["backend"]) for r in results}
        kept = [r for r in json.loads(saved.read_text()) if (r["model"], r["backend"]) not in done]
        results = kept + results
        command += " (appended to earlier runs' results)"
    saved.write_text(json.dumps(results, indent=1))
    (out / f"README_{args.device}.md").write_text(report(results, args.device, command))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
