"""remat.optimizer_footprint: an optimizer's state and its step's temporaries, predicted on fake
parameters before its first step, against what real steps measure (StepMemoryMeter)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat.optimizer_footprint import optimizer_footprint
from remat.step_memory import StepMemoryMeter, held_at_start, held_bytes

OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, foreach=True),
    "adamw-loop": lambda p: torch.optim.AdamW(p, foreach=False),
    "adam-fused": lambda p: torch.optim.Adam(p, fused=True),
    "sgd-momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "rmsprop": lambda p: torch.optim.RMSprop(p),
}


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _model(device="cpu"):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(96, 160), nn.LayerNorm(160), nn.Linear(160, 7)).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_footprint_is_what_real_steps_measure(name, device):
    """On CUDA too (tests/device/gpu_pending.sh), where AdamW's default is its foreach path,
    which the fake copy takes only if told: its temporaries are larger."""
    model = _model(device)
    optimizer = OPTIMIZERS[name](model.parameters())
    footprint = optimizer_footprint(optimizer)
    assert not optimizer.state  # predicted without stepping the real one
    device = torch.device(device)
    parameters = held_bytes(model, device=device)
    assert footprint.gradient_bytes == parameters
    for step in range(3):
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        start = held_at_start(device, model, optimizer)  # on CUDA: all that is allocated
        with StepMemoryMeter(model, optimizer) as meter:
            optimizer.step()
        state = held_bytes(*optimizer.state.values(), device=device)
        assert state == footprint.state_bytes
        if step > 0:  # a later step begins holding the state: its temporaries on top
            assert start >= 2 * parameters + state
            assert meter.peak_bytes - start == footprint.step_bytes


def test_a_parameter_the_optimizer_does_not_know_is_named():
    from remat.optimizer_footprint import fake_optimizer

    optimizer = torch.optim.SGD(_model().parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['params'\]\[0\]"):
        fake_optimizer(optimizer, {})
