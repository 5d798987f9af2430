"""remat.torch.use(memory_budget=..., offload=True): when no plan of a graph fits the budget on
the device alone, the least-recompute plan that fits with its saved activations moved to the
host, tagged for torch's activation offloading, whose peak is predicted with the copies.

On the CPU the host is the device, so use() leaves CPU graphs alone; these tests let it offload
them (solver.offload_devices) to check the machinery: torch's pass moves exactly the values
remat chose, the liveness walk of the graphs torch emits (host copies counted as none) equals
remat's prediction, and gradients are those of eager PyTorch."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import remat.torch as rt
from remat.compiled.budget import BudgetTooSmall
from remat.compiled.liveness import step_peak

pytest.importorskip("torch._functorch._activation_offloading.activation_offloading")


class Block(nn.Module):
    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.tanh(self.up(self.norm(x))))


def model_and_batch() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    # Wide activations next to small weights: the saved activations make the peak.
    return nn.Sequential(*(Block() for _ in range(4)), nn.Linear(64, 1)), torch.randn(1024, 64)


class Captured:
    """An aot_eager-style backend that keeps the forward and backward graphs torch emits."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, module, inputs):
        from functorch.compile import make_boxed_func, min_cut_rematerialization_partition
        from torch._functorch.aot_autograd import aot_module_simplified

        def keep(graph, _inputs):
            self.graphs.append(graph)
            return make_boxed_func(graph.forward)

        return aot_module_simplified(
            module,
            inputs,
            fw_compiler=keep,
            bw_compiler=keep,
            partition_fn=min_cut_rematerialization_partition,
        )


def train_step(model: nn.Module, x: torch.Tensor, budget: int, offload: bool, devices=None):
    torch._dynamo.reset()
    backend = Captured()
    with rt.use(memory_budget=budget, offload=offload) as solver:
        if devices is not None:
            solver.offload_devices = devices
        torch.compile(model, backend=backend)(x).sum().backward()
    return solver, backend.graphs


def least_on_the_device(model: nn.Module, x: torch.Tensor) -> int:
    with pytest.raises(BudgetTooSmall) as error:
        train_step(copy.deepcopy(model), x, 1, offload=False)
    return error.value.least_peak


def test_below_the_device_least_the_tagged_values_move_and_the_prediction_is_the_walk():
    model, x = model_and_batch()
    reference = copy.deepcopy(model)
    reference(x).sum().backward()
    least = least_on_the_device(model, x)
    with pytest.raises(BudgetTooSmall):
        train_step(copy.deepcopy(model), x, least - 1, offload=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        solver, (forward, backward) = train_step(model, x, least - 1, True, ("cpu", "cuda"))
    chosen = solver.choices[-1].chosen
    assert chosen.offloaded and chosen.peak.peak <= least - 1
    moved = {n.name for n in forward.graph.nodes if n.name.startswith("cpu_offload_")}
    assert moved == {f"cpu_offload_{name}" for name in chosen.offloaded}
    host = {n: {} for g in (forward, backward) for n in g.graph.nodes if n.name in moved}
    assert step_peak(forward, backward, 1, storages=host) == chosen.peak
    for got, want in zip(model.parameters(), reference.parameters()):
        assert torch.equal(got.grad, want.grad)


def test_offloading_is_the_last_resort_and_leaves_cpu_graphs_and_the_config_alone():
    model, x = model_and_batch()
    least = least_on_the_device(model, x)
    solver, _ = train_step(copy.deepcopy(model), x, least, True, ("cpu",))
    assert not solver.choices[-1].chosen.offloaded  # fits on the device: nothing moves
    with pytest.raises(BudgetTooSmall):  # CPU graphs are not offloaded by default
        train_step(copy.deepcopy(model), x, least - 1, offload=True)
    from torch._functorch import config

    assert config.enable_activation_offloading is False  # use() put it back
    with pytest.raises(ValueError, match="offload: needs a memory_budget"):
        rt.use(offload=True)
    with pytest.raises(TypeError, match="offload: expected True or False"):
        rt.use(memory_budget="1GiB", offload="yes")
