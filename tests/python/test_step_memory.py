"""StepMemoryMeter: every byte a training step holds on the CPU, counted as torch's MemTracker
counts it (parameters, gradients, optimizer state, activations, temporaries)."""

from __future__ import annotations

import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

import remat.torch as rt
from zoo import torchvision_cpu  # noqa: F401  (before transformers, which imports torchvision)


def test_a_storage_counts_once_from_its_creation_to_its_release():
    held = torch.zeros(256)  # 1 KiB, held before the step
    with rt.StepMemoryMeter(held) as meter:
        assert meter.current_bytes == 1024
        a = torch.empty(1024)  # 4 KiB
        views = [a[:10], a.view(32, 32), a.t() if a.dim() == 2 else a[1:]]
        assert meter.current_bytes == 1024 + 4096
        del a, views
        assert meter.current_bytes == 1024
        b = torch.ones(512)
        del b
    assert meter.start_bytes == 1024 and meter.peak_bytes == 1024 + 4096


@pytest.mark.parametrize("name", ["llama", "gpt2", "t5", "convnext", "vit"])
@pytest.mark.parametrize("remat", [False, True])
def test_the_step_peak_agrees_with_torchs_mem_tracker_on_the_zoo(name, remat):
    pytest.importorskip("transformers")
    pytest.importorskip("timm")
    from zoo import adopt
    from zoo.models import ZOO

    zoo = ZOO[name]
    torch.manual_seed(0)
    model = zoo.build(zoo.attention[0])
    args, kwargs = zoo.batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if remat:
        least = adopt.measure(zoo, model).least_activation_budget_bytes
        adopt.enable(zoo, model, least)
    for _ in range(2):  # the first step creates the optimizer's state
        tracker = MemTracker()
        tracker.track_external(model, optimizer, args, kwargs)
        with tracker, rt.StepMemoryMeter(model, optimizer, args, kwargs) as meter:
            zoo.loss(model(*args, **kwargs)).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        peak = sum(by_kind["Total"] for by_kind in tracker.get_tracker_snapshot("peak").values())
        assert meter.peak_bytes == peak > meter.start_bytes > 0
