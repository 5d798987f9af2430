"""What a remat checkpoint region costs over Hugging Face's own, with every block a region in both.

On a zoo decoder (bench/zoo.py's sizes), interleaved in one process: plain training, HF's
gradient checkpointing (every block), and remat at its least budget (whole-block regions only,
every block a region), each step timed by the thread's CPU time with one thread. The gap
between the last two, per region, is what remat's regions add (the model's own and the host's
generators replayed, buffers kept, keyword arguments passed as inputs) over torch's checkpoint.

    python bench/zoo_region_cost.py                   # Llama, hidden 256, 25 rounds

Writes bench/results/zoo/region_cost_<device>.md.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import pathlib
import random
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("zoo_bench", ROOT / "bench" / "zoo.py")
zoo_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo_bench)  # type: ignore[union-attr]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama")
    parser.add_argument("--hidden", type=int, default=256)
    zoo_bench.size_arguments(parser)
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "zoo"))
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    random.seed(0)
    base = zoo_bench.build(args.model, args)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator)
    models = zoo_bench.baselines(base)
    measured = zoo_bench.measure(base, ids)
    model = copy.deepcopy(base)
    handle = zoo_bench.hf.enable(
        model, activation_budget=measured.least_activation_budget_bytes, granularity="block"
    )
    runs = {
        "plain": models["plain"],
        "hf_gradient_checkpointing": models["hf_gradient_checkpointing"],
        "remat_every_block": model,
    }
    steps = {label: zoo_bench.step_of(m, ids) for label, m in runs.items()}
    for step in steps.values():
        step()
        step()
    regions = len(handle.plan.regions)
    now = zoo_bench.clock()
    times: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(args.rounds):
        order = list(steps)
        random.shuffle(order)
        for label in order:
            zoo_bench.sync(args.device)
            start = now()
            steps[label]()
            zoo_bench.sync(args.device)
            times[label].append(now() - start)
    median = {label: statistics.median(values) for label, values in times.items()}
    hf, ours = median["hf_gradient_checkpointing"], median["remat_every_block"]
    lines = [
        f"# remat's regions against Hugging Face's checkpointing ({args.device})",
        "",
        f"Command: `python bench/zoo_region_cost.py {' '.join(sys.argv[1:])}`. torch "
        f"{torch.__version__}, {torch.get_num_threads()} thread(s); {args.model}, hidden "
        f"{args.hidden}, {args.layers} layers, batch {args.batch} x seq {args.seq}; median of "
        f"{args.rounds} interleaved rounds. Date {time.strftime('%Y-%m-%d')}.",
        "",
        "| plain ms | HF checkpointing ms | remat, every block a region, ms | regions | "
        "remat - HF per region ms |",
        "| ---: | ---: | ---: | ---: | ---: |",
        f"| {median['plain'] * 1e3:.1f} | {hf * 1e3:.1f} | {ours * 1e3:.1f} | {regions} | "
        f"{(ours - hf) / max(1, regions) * 1e3:.2f} |",
    ]
    print("\n".join(lines))
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"region_cost_{args.device}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
