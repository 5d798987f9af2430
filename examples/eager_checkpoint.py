"""Train a small GPT-style decoder under an absolute activation-memory budget.

    python examples/eager_checkpoint.py [--budget 3MiB] [--steps 3]

remat measures each block once, plans the least-recompute nested checkpoints whose saved
activations fit the budget, and every later step follows that plan. The script prints the plan
and checks, with remat.torch.SavedTensorMeter, that the measured peak of saved-for-backward
bytes stays within the budget, and that the gradients are the ones training without
checkpointing gives.
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
    parser.add_argument("--budget", default="3MiB")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    torch.manual_seed(0)
    model, blocks, tokens = models.make_gpt(
        depth=6, width=64, heads=4, seq=64, batch=4, dropout=0.1
    )
    reference = copy.deepcopy(model)

    handle = remat.torch.auto_checkpoint(model, memory_budget=args.budget)  # the second line
    budget = parse_bytes(args.budget)

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step in range(args.steps):
        torch.manual_seed(step)  # the same dropout masks for both models
        with remat.torch.SavedTensorMeter(model) as meter:
            models.loss(model(tokens)).backward()
        torch.manual_seed(step)
        with remat.torch.SavedTensorMeter(reference) as plain:
            models.loss(reference(tokens)).backward()
        same = all(
            torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), reference.parameters())
        )
        # The embedding and the head save the same bytes in both runs; the blocks are planned.
        outside = plain.peak_bytes - handle.plan.no_checkpoint_bytes
        print(
            f"step {step}: peak saved {format_bytes(meter.peak_bytes)} with remat, "
            f"{format_bytes(plain.peak_bytes)} without; blocks within the budget: "
            f"{meter.peak_bytes - outside <= budget}; gradients equal: {same}; predicted re-runs "
            f"{handle.plan.predicted_recompute_seconds * 1e3:.1f} ms"
        )
        if not same or meter.peak_bytes - outside > budget:
            sys.exit("gradients differ or the budget is exceeded")
        optimizer.step(), reference_optimizer.step()
        optimizer.zero_grad(), reference_optimizer.zero_grad()

    print(handle.plan)  # the plan the steps followed


if __name__ == "__main__":
    main()
