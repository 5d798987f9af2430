"""Planning time per compiled graph under remat.torch.use(memory_budget=...): remat's fast steps
(its C++ maximum flow for the min-cut, its node-list split) against torch's own (networkx's
preflow-push, _extract_fwd_bwd_modules and reordering_to_mimic_autograd_engine).

For each model (examples/models.py at the CPU sizes of bench/compile_budget.py, and a small
Hugging Face LlamaForCausalLM from the test zoo) and backend, the joint graph torch hands the
solver is captured once; then, in one process, interleaved, each way plans it --repeats times at
one byte below its least predicted peak (refused: every candidate plan is predicted in full, the
slowest case) and the answers (the least peak the refusal names) are compared.
Reports the median seconds per graph, their shares (min-cut, split, liveness walk), and the
guard's one check of the final choice against torch's own split.

    python bench/compile_planning.py            # CPU, about 3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import statistics
import sys
import time
import warnings
from datetime import date

import torch
import torch._functorch.config as functorch_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests" / "python"))
import models  # noqa: E402
import remat.torch as rt  # noqa: E402
from compile_budget import SIZES  # noqa: E402
from remat.compiled import solver as solver_module  # noqa: E402
from remat.compiled.budget import BudgetTooSmall, candidate_sizes, choose, front_plans  # noqa: E402
from remat.compiled.partition import Partitioner  # noqa: E402


def capture(step, backend: str):
    """(joint graph, node_info, candidate nodes, runtimes) of the one graph ``step`` compiles."""
    found = []
    original = solver_module.RematKnapsackSolver._within_bytes

    def grab(self, memory, runtimes, joint_graph, node_info, nodes):
        found.append((joint_graph, node_info, list(nodes), list(runtimes)))
        return original(self, memory, runtimes, joint_graph, node_info, nodes)

    solver_module.RematKnapsackSolver._within_bytes = grab
    try:
        torch._dynamo.reset()
        with (
            functorch_config.patch(enable_autograd_cache=False),
            warnings.catch_warnings(),
            rt.use(memory_budget=1 << 50),
        ):
            warnings.simplefilter("ignore")
            step(backend)
    finally:
        solver_module.RematKnapsackSolver._within_bytes = original
        torch._dynamo.reset()
    assert len(found) == 1, f"expected one graph, got {len(found)}"
    return found[0]


def plan_once(graph, fast: bool, budget: int | None):
    """(choice or the least peak when none fits, seconds, per-step seconds, partitioner)."""
    joint_graph, node_info, nodes, runtimes = graph
    started = time.perf_counter()
    partitioner = Partitioner(joint_graph, node_info, fast=fast)
    plans = front_plans(candidate_sizes(nodes), runtimes, 33)
    try:
        choice = choose(plans, lambda r, b: partitioner.predict([nodes[i] for i in r], b), budget)
        answer = (choice.chosen.recomputed, choice.chosen.peak) if choice.chosen else None
        predicted = len(choice.candidates)
    except BudgetTooSmall as error:
        answer, predicted = ("too small", error.least_peak), len(plans)
    seconds = time.perf_counter() - started
    return answer, seconds, dict(partitioner.seconds), predicted, len(plans)


def least_peak(graph) -> int:
    joint_graph, node_info, nodes, runtimes = graph
    partitioner = Partitioner(joint_graph, node_info)
    plans = front_plans(candidate_sizes(nodes), runtimes, 33)
    return min(partitioner.predict([nodes[i] for i in r], None).peak for r, _ in plans)


def check_seconds(graph) -> float:
    """What the guard adds to a graph that fits: torch's own split of the chosen partition
    (here the last plan's), once per graph (torch has run its own min-cut already)."""
    joint_graph, node_info, nodes, runtimes = graph
    recomputed = front_plans(candidate_sizes(nodes), runtimes, 33)[-1][0]
    saved = Partitioner(joint_graph, node_info).saved_values([nodes[i] for i in recomputed])
    started = time.perf_counter()
    Partitioner(joint_graph, node_info, fast=False).partition_saving(saved)
    return time.perf_counter() - started


def steps():
    """name -> (function of the backend that compiles and runs one step, backends)."""
    found = {}
    for name in ("gpt", "resnet", "mixer", "llama"):

        def run(backend, name=name):
            torch.manual_seed(0)
            model, _, x = models.MODELS[name](**SIZES["cpu"][name])
            torch.compile(lambda i: models.loss(model(i)), backend=backend)(x).backward()

        found[name] = (run, ("aot_eager", "inductor"))
    try:
        from zoo.models import ZOO

        zoo = ZOO["llama"]

        def run_hf(backend):
            torch.manual_seed(0)
            model = zoo.build("sdpa")
            args, kwargs = zoo.batch()
            step = torch.compile(lambda *a, **k: zoo.loss(model(*a, **k)), backend=backend)
            step(*args, **kwargs).backward()

        found["hf_llama"] = (run_hf, ("aot_eager", "inductor"))
    except ImportError as error:
        print(f"skipping the Hugging Face decoder: {error}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default="gpt,resnet,mixer,llama,hf_llama")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "compile_budget"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    every = steps()
    for name in args.models.split(","):
        run, backends = every[name]
        for backend in backends:
            graph = capture(run, backend)
            budget = least_peak(graph) - 1  # refused: every plan is predicted in full
            times = {True: [], False: []}
            shares = {True: [], False: []}
            answers = {}
            for _ in range(args.repeats):
                for fast in (False, True):  # interleaved
                    answer, seconds, per_step, predicted, plans = plan_once(graph, fast, budget)
                    times[fast].append(seconds)
                    shares[fast].append(per_step)
                    answers.setdefault(fast, answer)
                    assert answers[fast] == answer
            same = answers[True] == answers[False]
            check = statistics.median(check_seconds(graph) for _ in range(3))
            row = {
                "model": name,
                "backend": backend,
                "nodes": len(graph[0].nodes),
                "candidates": len(graph[2]),
                "plans": plans,
                "predicted": predicted,
                "torch_s": statistics.median(times[False]),
                "fast_s": statistics.median(times[True]),
                "check_s": check,
                "torch_steps": {
                    k: statistics.median(s[k] for s in shares[False]) for k in shares[False][0]
                },
                "fast_steps": {
                    k: statistics.median(s[k] for s in shares[True]) for k in shares[True][0]
                },
                "same_choice": same,
            }
            rows.append(row)
            print(
                f"{name} ({backend}): {row['nodes']} nodes, {predicted} plans predicted; torch "
                f"{row['torch_s']:.2f} s, remat {row['fast_s']:.2f} s (+{check:.2f} s check); "
                f"same choice: {same}",
                flush=True,
            )
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "planning_cpu.json").write_text(json.dumps(rows, indent=1))
    (out / "planning_cpu.md").write_text(report(rows, args))
    print(f"wrote {out / 'planning_cpu.md'}")


def report(rows, args) -> str:
    command = "python bench/compile_planning.py" + (
        f" --repeats {args.repeats}" if args.repeats != 3 else ""
    )
    lines = [
        "# Planning time per compiled graph (cpu)",
        "",
        f"Command: `{command}`. Machine: {platform.machine()}, torch {torch.__version__}, 1 "
        f"thread; median of {args.repeats} interleaved runs; {date.today()}. Each graph is "
        "planned one byte below its least predicted peak, which is refused after every "
        "candidate plan is predicted in full (the slowest case). torch: its networkx min-cut and its graph split per candidate; remat: "
        "remat's maximum flow and node-list split (exact: the same choice, checked here and "
        "in tests/python/test_compile_split.py). check: what the guard adds to a graph that "
        "fits, torch's split of the final choice, once per graph. Steps: min-cut / split / liveness s.",
        "",
        "| model | backend | nodes | plans predicted | torch s | remat s | remat + check s | "
        "speed-up | torch steps | remat steps | same choice |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for r in rows:
        total = r["fast_s"] + r["check_s"]
        lines.append(
            f"| {r['model']} | {r['backend']} | {r['nodes']} | {r['predicted']} | "
            f"{r['torch_s']:.2f} | {r['fast_s']:.2f} | {total:.2f} | "
            f"{r['torch_s'] / total:.1f}x | "
            + " / ".join(f"{v:.2f}" for v in r["torch_steps"].values())
            + " | "
            + " / ".join(f"{v:.2f}" for v in r["fast_steps"].values())
            + f" | {'yes' if r['same_choice'] else 'NO'} |"
        )
    worst = max(r["fast_s"] + r["check_s"] for r in rows)
    lines += [
        "",
        f"Target (planning <= 1 s per graph on every bench model): "
        f"{'met' if worst <= 1.0 else 'missed'}; the slowest graph took {worst:.2f} s with "
        f"remat's steps, {max(r['torch_s'] for r in rows):.2f} s with torch's.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
