"""A new input shape's measuring step on the zoo models: its time against the later steps at
that shape, after the first shape's plan is made.

Each new input signature measures a step of its own (shapes change what blocks save). This
times that second measuring step (a shorter sequence for the decoders, a batch of one for the
image models) on a handle that has already planned the first shape, against the median of 5
later steps at the new shape: the median over 5 fresh handles, CPU, 1 thread.

    python bench/zoo_new_shapes.py [--out bench/results/zoo/new_shapes_cpu.md]
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

from zoo import adopt  # noqa: E402
from zoo.models import ZOO  # noqa: E402
from zoo.training import pair  # noqa: E402

MODELS = ("llama", "gpt2", "vit", "convnext")


def new_shape(name: str, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    if name in ("vit", "convnext"):
        return (args[0][:1],), kwargs  # a batch of one image

    def shorter(value):
        is_tokens = isinstance(value, torch.Tensor) and value.dim() == 2
        return value[:, :24] if is_tokens else value

    return tuple(shorter(a) for a in args), {k: shorter(v) for k, v in kwargs.items()}


def measure(name: str, handles: int = 5, repeats: int = 5) -> tuple[float, float]:
    zoo = ZOO[name]
    args, kwargs = zoo.batch()
    args2, kwargs2 = new_shape(name, args, kwargs)

    def step(model, a, k) -> float:
        start = time.perf_counter()
        zoo.loss(model(*a, **k)).backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    firsts, laters = [], []
    for _ in range(handles):
        model, _ = pair(zoo, zoo.attention[0])
        measured = adopt.measure(zoo, copy.deepcopy(model))
        budget = (measured.least_activation_budget_bytes + measured.no_checkpoint_bytes) // 2
        adopt.enable(zoo, model, budget, granularity="op")
        for _ in range(3):
            step(model, args, kwargs)  # the first shape: measured, planned, followed
        firsts.append(step(model, args2, kwargs2))
        laters.append(statistics.median(step(model, args2, kwargs2) for _ in range(repeats)))
    return statistics.median(firsts), statistics.median(laters)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=pathlib.Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    lines = [
        "# A new input shape's measuring step (cpu)",
        "",
        "Command: `python bench/zoo_new_shapes.py`. The second shape's first step (measuring, "
        "planning) against the median of 5 later steps at that shape; median over 5 fresh "
        "handles, 1 thread. Decoders: sequence 32 then 24; image models: batch 2 then 1.",
        "",
        "| model | new-shape first ms | later ms | first / later |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name in MODELS:
        first, later = measure(name)
        lines.append(f"| {name} | {first * 1e3:.1f} | {later * 1e3:.1f} | {first / later:.2f} |")
        print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
