"""What a training step holds as it begins, for ``use(memory_budget=...)``: the budget is the
whole step's peak, and a compiled graph gets what the start leaves of it.

Read when torch.compile partitions a graph, which it does at the graph's first call, before the
graph runs:

* On CUDA, every byte the process has allocated on the graph's device then: parameters,
  buffers, inputs, gradients held over, the optimizer's state, and the activations of graphs
  that ran earlier in the same step (a graph break).
* On the CPU, whose allocator keeps no count: the distinct storages of the graph's inputs
  (parameters, buffers, the user's inputs), plus the gradients and state of ``optimizer``.

With ``optimizer``, its state is counted before it exists (the first step's graphs are
partitioned before its first step creates it), and its step's peak (gradients, state and its
temporaries, predicted on fakes: ``remat.optimizer_footprint``) is checked against the budget:
no checkpoint plan changes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..optimizer_footprint import optimizer_footprint
from ..saved_memory import estimating_now
from ..step_memory import held_bytes


@dataclass(frozen=True)
class StepStart:
    """Bytes on the graph's device."""

    start: int  # what the step holds as it begins, the optimizer's state included
    optimizer_peak: int  # the optimizer step's predicted peak (0 without an optimizer)


def graph_device(joint_graph: Any) -> torch.device:
    for node in joint_graph.nodes:
        value = node.meta.get("val")
        if node.op == "placeholder" and isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")


def graph_input_bytes(joint_graph: Any, device: torch.device) -> int:
    """The distinct storages of the joint graph's primal inputs on `device`'s type."""
    primals = [
        node.meta.get("val")
        for node in joint_graph.nodes
        if node.op == "placeholder" and str(node.target).startswith("primals")
    ]
    # int(): a graph traced with dynamic sizes is planned at the sizes it was traced with.
    return int(held_bytes(*[v for v in primals if isinstance(v, torch.Tensor)], device=device))


class StartCounter:
    """Counts a step's start for each graph partitioned under one ``use()``; the optimizer's
    footprint is predicted once, as ``use()`` is called."""

    def __init__(self, optimizer: torch.optim.Optimizer | None) -> None:
        if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(
                f"optimizer: expected a torch.optim.Optimizer, got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        # Predicted here, not when a graph is partitioned: under torch.compile's tracing the
        # optimizer takes its compiled path, whose state and temporaries differ.
        self._footprint = None if optimizer is None else optimizer_footprint(optimizer)

    def __call__(self, joint_graph: Any) -> StepStart:
        device = graph_device(joint_graph)
        grads = self._gradients(device)
        if device.type == "cuda" and not estimating_now():
            start = torch.cuda.memory_allocated(device)  # the state and gradients held included
        else:
            start = graph_input_bytes(joint_graph, device) + grads + self._state(device)
        footprint = self._footprint
        if footprint is None:
            return StepStart(start, 0)
        if self.optimizer is not None and not self.optimizer.state:
            # Created by the first step, held by every later one.
            start += footprint.state_bytes
        # At its step every parameter has its gradient (those held at the start among them).
        peak = start - grads + footprint.gradient_bytes + footprint.step_bytes
        return StepStart(start, peak)

    def _gradients(self, device: torch.device) -> int:
        if self.optimizer is None:
            return 0
        grads = [p.grad for g in self.optimizer.param_groups for p in g["params"]]
        return held_bytes(*[g for g in grads if g is not None], device=device)

    def _state(self, device: torch.device) -> int:
        if self.optimizer is None:
            return 0
        return held_bytes(*self.optimizer.state.values(), device=device)
