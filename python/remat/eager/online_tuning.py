"""Tuning a chain's plan on the training steps themselves, not in the first one.

`planning.tune_plan` times the planner's plan and up to two uniform segmentations on the chain
before the first step runs: each candidate's forward and backward, twice. On a model made of
one chain (a stock ``nn.Sequential`` of blocks under auto_checkpoint) that is up to six more
passes over the whole model in the first step. Here each of the next steps runs one candidate
instead, in turn, and is timed: its chain's forward from the call to the return, its backward
from the gradient reaching the chain's outputs to the last gradient of the chain's first layer
(its parameters' and its input's). Once every candidate has `repeats` such steps, the fastest
by median is kept for good.

Every candidate fits the budget by the same prediction as the planner's plan, and every plan
of regions re-runs its layers exactly (RNG state preserved), so the steps that tune hold no
more than the budget and compute the same values as any other step. A step whose backward did
not run (a forward with gradients enabled and no backward, an evaluation) gives no sample.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

import torch

from ._runtime import _tensors, clock
from .planning import Plan, fastest


class OnlineTuning:
    """The candidates of one chain call signature, timed one training step at a time."""

    def __init__(self, candidates: dict[str, Plan], repeats: int = 2) -> None:
        self.candidates = candidates
        self.repeats = repeats
        self.samples: dict[str, list[float]] = {label: [] for label in candidates}
        self._pending: _Sample | None = None

    def done(self) -> bool:
        return all(len(s) >= self.repeats for s in self.samples.values())

    def next(self) -> tuple[str, Plan]:
        """The candidate the next step runs: the one with the fewest samples, in order."""
        self._collect()
        label = min(self.samples, key=lambda k: len(self.samples[k]))
        return label, self.candidates[label]

    def result(self) -> Plan:
        """The fastest candidate by median, once done()."""
        self._collect()
        median = {label: statistics.median(s) for label, s in self.samples.items()}
        return fastest(self.candidates, median)

    def run(
        self,
        label: str,
        execute: Callable[[Any], Any],
        input: Any,
        first_layer: torch.nn.Module | None,
    ) -> Any:
        """Runs `execute(input)` (the chain under candidate `label`), timing its forward and
        arranging for its backward to be timed."""
        self._collect()
        now = clock()
        start = now()
        out = execute(input)
        sample = _Sample(label, now() - start, now)
        outputs = [t for t in _tensors(out) if t.requires_grad]
        ends = [t for t in _tensors(input) if t.requires_grad]
        if first_layer is not None:
            ends += [p for p in first_layer.parameters() if p.requires_grad]
        if outputs and ends:
            for tensor in outputs:
                tensor.register_hook(sample.backward_starts)
            sample.handle = torch.autograd.graph.register_multi_grad_hook(
                ends, sample.backward_ends, mode="all"
            )
            self._pending = sample
        return out

    def _collect(self) -> None:
        sample, self._pending = self._pending, None
        if sample is None:
            return
        sample.handle.remove()  # the parameters' hooks outlive the step
        if sample.seconds is not None:
            self.samples[sample.label].append(sample.seconds)


class _Sample:
    def __init__(self, label: str, forward: float, now: Callable[[], float]) -> None:
        self.label, self.forward, self.now = label, forward, now
        self.started: float | None = None
        self.seconds: float | None = None
        self.handle: Any = None

    def backward_starts(self, grad: torch.Tensor) -> None:
        if self.started is None:
            self.started = self.now()

    def backward_ends(self, grads: Any) -> None:
        if self.started is not None and self.seconds is None:
            self.seconds = self.forward + self.now() - self.started
