"""What an optimizer's step costs in memory, predicted before it has run: the state its first
step creates, and a step's temporaries beyond the parameters, gradients and state.

The step runs twice on fake copies of the parameters (``FakeTensorMode``: no data, no device
memory), each given a gradient, with the live storages counted as ``StepMemoryMeter`` counts
them. The copy has the optimizer's class and hyperparameters. Where a group leaves ``foreach``
to the optimizer, the copy gets what the real parameters would choose: a fake tensor is not
among the types torch's default allows, so the copy would otherwise take the per-tensor loop,
whose temporaries are smaller.

Time: two optimizer steps on fakes (its ops' shape functions only); memory: none on the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import _pop_mode, _push_mode

from .step_memory import _LiveStorages, held_bytes


@dataclass(frozen=True)
class OptimizerFootprint:
    """Bytes on the parameters' device."""

    state_bytes: int  # the state after the first step
    gradient_bytes: int  # a gradient for every parameter the optimizer steps
    step_bytes: int  # a later step's peak beyond what it begins holding and the gradients


def fake_optimizer(
    optimizer: torch.optim.Optimizer, fake_of: dict[int, torch.Tensor]
) -> torch.optim.Optimizer:
    """An optimizer of `optimizer`'s class and hyperparameters over fakes of its parameters
    (`fake_of`: id of a real parameter -> its fake), choosing ``foreach`` as the real one would."""
    groups = []
    for index, group in enumerate(optimizer.param_groups):
        missing = [i for i, p in enumerate(group["params"]) if id(p) not in fake_of]
        if missing:
            raise ValueError(
                f"optimizer: param_groups[{index}]['params'][{missing[0]}] is not a parameter "
                "of the model"
            )
        hyper = {k: v for k, v in group.items() if k != "params"}
        if "foreach" in hyper and hyper["foreach"] is None and not hyper.get("fused"):
            hyper["foreach"] = _default_foreach(group["params"], hyper)
        groups.append({**hyper, "params": [fake_of[id(p)] for p in group["params"]]})
    kind: Any = type(optimizer)  # its own constructor: (params, **hyperparameters)
    return kind(groups)


def _default_foreach(params: list[torch.Tensor], hyper: dict[str, Any]) -> bool:
    from torch.optim.optimizer import _default_to_fused_or_foreach

    _, foreach = _default_to_fused_or_foreach(
        list(params), bool(hyper.get("differentiable", False)), use_fused=False
    )
    return bool(foreach)


def optimizer_footprint(optimizer: torch.optim.Optimizer) -> OptimizerFootprint:
    """The footprint of `optimizer`'s step (see the module's docstring)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if not params:
        return OptimizerFootprint(0, 0, 0)
    device_type = params[0].device.type
    mode = FakeTensorMode(allow_non_fake_inputs=False)
    with mode:
        fake_of: dict[int, torch.Tensor] = {}
        for p in params:
            fake = torch.empty_strided(p.shape, p.stride(), dtype=p.dtype, device=p.device)
            fake.requires_grad_(p.requires_grad)
            if p.requires_grad:
                fake.grad = torch.empty_like(fake)
            fake_of[id(p)] = fake
        stepped = fake_optimizer(optimizer, fake_of)
        device = params[0].device
        gradients = held_bytes(
            *[f.grad for f in fake_of.values() if f.grad is not None], device=device
        )
        count = _LiveStorages(device_type)
        count.hold_all((stepped,))
        _push_mode(count)
        try:
            stepped.step()  # creates the state
            # The second step begins holding the state, as every later step does.
            before = count.peak = count.current
            stepped.step()
        finally:
            _pop_mode()
        state = held_bytes(*stepped.state.values(), device=device)
    return OptimizerFootprint(
        state_bytes=state, gradient_bytes=gradients, step_bytes=count.peak - before
    )
