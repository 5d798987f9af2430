"""The CPU count of a training step's memory under torch.compile, against the CPU allocator.

Zoo models under auto_checkpoint(memory_budget=) at a budget halfway between measure()'s least
and no-checkpoint step peaks (where remat refuses it, at the least peak it names), compiled
whole after auto_checkpoint (aot_eager and Inductor), AdamW. Per step: the peak by
remat.torch.StepMemoryMeter (the live-storage count the checks use on the CPU) and the peak the
CPU allocator reached, read from torch's profiler (every allocation, Inductor's generated code
included) plus what the step held as it began; whether the step went over the budget; how many
graphs torch.compile had made.

    python bench/step_count_compiled.py      # writes bench/results/step_count/compiled_cpu.md
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import re
import subprocess
import sys
import warnings

import torch
from torch._dynamo.utils import counters

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
import remat  # noqa: E402
import remat.torch as rt  # noqa: E402
from step_cases import allocator_peak, zoo_measured  # noqa: E402
from zoo import (
    adopt,  # noqa: E402
    torchvision_cpu,  # noqa: E402, F401  (before transformers)
)


def run_model(name: str, backend: str, steps: int) -> dict:
    """At the budget halfway between measure()'s least and no-checkpoint peaks; where remat
    refuses it (compiled code can hold more than the eager code measure() ran), again at the
    least peak the refusal names. Each run in a fresh process: torch.compile's caches change
    what a first step holds."""
    found = _in_fresh_process(name, backend, steps, None)
    if "refused" not in found:
        return dict(found, refused=None)
    least = re.search(r"least peak of this training step, (\d+) bytes", found["refused"])
    if least is None:
        raise RuntimeError(found["refused"])
    budget = int(least.group(1))
    found = _in_fresh_process(name, backend, steps, budget)
    if "refused" in found:
        raise RuntimeError(f"{name} with {backend}: refused twice: {found['refused']}")
    return dict(found, refused=budget)


def _in_fresh_process(name: str, backend: str, steps: int, budget: int | None) -> dict:
    command = [sys.executable, __file__, "--one", name, backend, str(steps), str(budget or 0)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{name} with {backend}: {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def run_one(name: str, backend: str, steps: int, budget: int | None) -> dict:
    try:
        return _run(name, backend, steps, budget)
    except remat.InputError as error:
        return {"refused": str(error)}


def _run(name: str, backend: str, steps: int, budget: int | None) -> dict:
    zoo, model, (args, kwargs), _, measured = zoo_measured(name)
    least, plain = measured.least_budget_bytes, measured.no_checkpoint_step_bytes
    asked = (least + plain) // 2
    budget = budget or asked
    optimizer = torch.optim.AdamW(model.parameters())
    torch._dynamo.reset()
    counters.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handle = adopt.enable_step(zoo, model, budget, optimizer=optimizer)
        compiled = torch.compile(model, backend=backend)
        rows = []
        for _ in range(steps):
            meters = []

            def step() -> None:
                with rt.StepMemoryMeter(model, optimizer, args, kwargs) as meter:
                    zoo.loss(compiled(*args, **kwargs)).backward()
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                meters.append(meter)

            beyond = allocator_peak(step)  # beyond what the step held as it began
            meter = meters[0]
            allocator = meter.start_bytes + beyond
            rows.append((meter.peak_bytes, allocator, counters["stats"]["unique_graphs"]))
    handle.remove()
    return {
        "budget": budget,
        "asked": asked,
        "rows": rows,
        "warnings": [str(w.message) for w in caught],
    }


def report(results: dict) -> str:
    lines = [
        "# The CPU count of a compiled step's memory, against the allocator",
        "",
        f"Command: `python bench/step_count_compiled.py {' '.join(sys.argv[1:])}`. Machine: "
        f"{platform.machine()}, torch {torch.__version__}. Zoo models, AdamW, "
        "auto_checkpoint(memory_budget=) halfway between measure()'s least and no-checkpoint "
        "step peaks (where remat refused that, at the least peak it named), then "
        "torch.compile(model). Step 1 measures the blocks; steps 2-3 are checked by the count.",
        "",
        "| model | backend | step | compiles | counted (B) | allocator (B) | counted - allocator "
        "| budget (B) | allocator - budget |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    steady, compiling, count_over, allocator_over = [], [], 0, []
    for (name, backend), result in results.items():
        budget = result["budget"]
        graphs_before = 0
        for i, (counted, allocator, graphs) in enumerate(result["rows"], 1):
            compiles = graphs > graphs_before
            graphs_before = graphs
            (compiling if compiles else steady).append(counted - allocator)
            count_over += counted > budget
            if allocator > budget:
                allocator_over.append(f"{name} {backend} step {i} by {allocator - budget:,} B")
            lines.append(
                f"| {name} | {backend} | {i} | {'yes' if compiles else 'no'} | {counted:,} | "
                f"{allocator:,} | {counted - allocator:+,} | {budget:,} | "
                f"{max(allocator - budget, 0):,} |"
            )
    refused = [
        f"{name} with {backend}: {r['asked']:,} B refused, run at {r['refused']:,} B"
        for (name, backend), r in results.items()
        if r["refused"] is not None
    ]
    lines += [
        "",
        f"Steps that compile nothing: the count is {-max(steady):,} to {-min(steady):,} bytes "
        "below the allocator (the profiler's own allocations). Steps in which torch.compile "
        f"compiles: {min(compiling):+,} to {max(compiling):+,} bytes (the count leaves out what "
        "torch.compile allocates while it compiles, and counts some of the tensors it makes "
        "then once they reach the step).",
        "",
        f"Steps whose count is over the budget: {count_over}. Steps whose allocator peak is: "
        + ("; ".join(allocator_over) or "none")
        + ".",
        "",
        "Budgets remat refused (the least it named is above the eager least that set the asked "
        "budget): " + ("; ".join(refused) or "none") + ".",
        "",
        "Warnings: "
        + ("; ".join(sorted({w for r in results.values() for w in r["warnings"]})) or "none."),
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama,gpt2")
    parser.add_argument("--backends", default="aot_eager,inductor")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "step_count"))
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)  # name backend steps budget
    args = parser.parse_args()
    if args.one:
        name, backend, steps, budget = args.one
        print(json.dumps(run_one(name, backend, int(steps), int(budget) or None)))
        return
    results = {}
    for name in args.models.split(","):
        for backend in args.backends.split(","):
            print(f"{name} {backend}", flush=True)
            results[(name, backend)] = run_model(name, backend, args.steps)
    text = report(results)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "compiled_cpu.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
