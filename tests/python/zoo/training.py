"""Training a zoo model for a few steps, with and without remat, to compare bit for bit."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .meter import BlockMeter
from .models import ZooModel

STEPS = 3


@dataclass
class Run:
    losses: list[torch.Tensor] = field(default_factory=list)
    grads: list[list[torch.Tensor | None]] = field(default_factory=list)
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    saved_peaks: list[int] = field(default_factory=list)  # per metered step


def train(
    zoo: ZooModel,
    model: nn.Module,
    blocks: list[nn.Module] | None = None,
    steps: int = STEPS,
    meter_from: int = 1,
) -> Run:
    """`steps` SGD steps on the zoo's batch, from the RNG state seed 0; the steps from
    `meter_from` on are metered with a BlockMeter on `blocks` when given."""
    args, kwargs = zoo.batch()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(0)
    run = Run()
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        if blocks is not None and step >= meter_from:
            with BlockMeter(model, blocks) as meter:
                loss = zoo.loss(model(*args, **kwargs))
                loss.backward()
            run.saved_peaks.append(meter.peak_bytes)
        else:
            loss = zoo.loss(model(*args, **kwargs))
            loss.backward()
        run.losses.append(loss.detach().clone())
        run.grads.append([None if p.grad is None else p.grad.clone() for p in model.parameters()])
        optimizer.step()
    run.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return run


def metered_within(run: Run, plan: Any, budget: int) -> None:
    """Every metered step's saved bytes within the plan's prediction, and the prediction within
    the budget. A meter that read nothing where the plan keeps something was hidden (an inner
    saved-tensor hook that swallows the meter's): that fails too, rather than pass as within."""
    assert run.saved_peaks, "no step was metered"
    if plan.predicted_peak_bytes > 0:
        assert min(run.saved_peaks) > 0, f"the meter read 0 on a plan that saves: {plan}"
    assert max(run.saved_peaks) <= plan.predicted_peak_bytes <= budget, (run.saved_peaks, plan)


def differences(a: Run, b: Run) -> list[str]:
    """Where two runs are not bit for bit the same: losses, gradients, final state."""
    out = []
    for step, (x, y) in enumerate(zip(a.losses, b.losses)):
        if not torch.equal(x, y):
            out.append(f"loss of step {step}: {x.item()} != {y.item()}")
    for step, (gx, gy) in enumerate(zip(a.grads, b.grads)):
        bad = [
            i
            for i, (x, y) in enumerate(zip(gx, gy))
            if (x is None) != (y is None) or x is not None and not torch.equal(x, y)
        ]
        if bad:
            out.append(f"gradients of step {step}: {len(bad)} parameters differ (first {bad[0]})")
    bad_state = [k for k in a.state if not torch.equal(a.state[k], b.state[k])]
    if bad_state:
        out.append(f"final state: {bad_state[:3]} differ")
    return out


def fresh(zoo: ZooModel, attention: str) -> nn.Module:
    torch.manual_seed(1234)
    return zoo.build(attention)


def pair(zoo: ZooModel, attention: str) -> tuple[nn.Module, nn.Module]:
    model = fresh(zoo, attention)
    return model, copy.deepcopy(model)
