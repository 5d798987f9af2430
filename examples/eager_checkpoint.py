"""Train a small GPT-style decoder within a memory budget for the whole training step.

    python examples/eager_checkpoint.py [--budget 12MiB] [--steps 3]

remat measures the first step part by part (each block, the head, the backward, the
optimizer step), plans the least-recompute checkpoints whose predicted step peak fits the
budget, and every later step follows that plan. The script prints the plan and checks, with
remat.torch.StepMemoryMeter, that every step's peak (parameters, gradients, AdamW's state,
activations, the backward's working set) stays within the budget, the first step included, and
that the gradients are the ones training without checkpointing gives.
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import models  # noqa: E402
import remat.torch  # noqa: E402
from remat.units import format_bytes, parse_bytes  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget", default="12MiB")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    model, blocks, tokens = models.make_gpt(
        depth=6, width=64, heads=4, seq=64, batch=4, dropout=0.1
    )
    reference = copy.deepcopy(model)

    handle = remat.torch.auto_checkpoint(model, memory_budget=args.budget)  # the second line
    budget = parse_bytes(args.budget)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    reference_optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-3)
    for step in range(args.steps):
        torch.manual_seed(step)  # the same dropout masks for both models
        with remat.torch.StepMemoryMeter(model, optimizer, tokens) as meter:
            models.loss(model(tokens)).backward()
            grads = [p.grad for p in model.parameters()]
            optimizer.step()
            optimizer.zero_grad()
        torch.manual_seed(step)
        with remat.torch.StepMemoryMeter(reference, reference_optimizer, tokens) as plain:
            models.loss(reference(tokens)).backward()
            same = all(torch.equal(a, b.grad) for a, b in zip(grads, reference.parameters()))
            reference_optimizer.step()
            reference_optimizer.zero_grad()
        print(
            f"step {step}: peak {format_bytes(meter.peak_bytes)} with remat, "
            f"{format_bytes(plain.peak_bytes)} without; within the budget: "
            f"{meter.peak_bytes <= budget}; gradients equal: {same}"
        )
        if not same or meter.peak_bytes > budget:
            sys.exit("gradients differ or the budget is exceeded")

    print(handle.plan)  # the plan the steps followed, and the step's predicted peak


if __name__ == "__main__":
    main()
