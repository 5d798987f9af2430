"""Tuning a chain's plan by measuring: the candidates (plan/tune.py) timed on the chain before the
first step (tune_plan), or one per training step (OnlineTuning).

Tuning a chain's plan on the training steps themselves, not in the first one.

`tune_plan` times the planner's plan and up to two uniform segmentations on the chain
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
import time
import warnings
from typing import Any, Callable, Sequence

import torch

from ... import _distributed
from ...saved_memory import has_fsdp_modules
from .._runtime import _detached, _modules_of, _PreservedState, _synchronize, _tensors, clock
from ..measuring.calls import saves_kept_apart
from ..planning.tune import _tunable, fastest, tuning_candidates
from ..types import Plan
from .contexts import plan_contexts
from .execution import Execution


def tune_plan(
    functions: Sequence[Callable[[Any], Any]],
    input: Any,
    planned: Plan,
    repeats: int = 2,
    max_candidates: int = 3,
    max_seconds: float | None = None,
    plan_group: Any = None,
) -> Plan:
    """The fastest, measured on the chain, of the planner's plan and the uniform segmentations
    whose predicted peak fits the budget.

    Bounded: nothing is timed when the plan needs no region; at most `max_candidates` plans
    (the planner's and the fitting segmentations with the least predicted recompute), each
    timed `repeats` times in rounds, and no new round starts once `max_seconds` have passed
    (default: the time of 10 forward passes of the chain as profiled). Not under FSDP2 (a layer
    that is or holds a fully_shard module): the timed backward would run FSDP's own backward
    hooks, reduce-scattering gradients and resharding parameters in the middle of the step
    (the model's next layer then met sharded weights)."""
    p = planned.profile
    if not _tunable(planned):
        return planned
    modules = [m for f in functions for m in _modules_of(f)]
    if any(has_fsdp_modules(m) for m in modules):
        warnings.warn(
            "remat: the chain's layers are FSDP2 (fully_shard) modules, so the plan is not tuned "
            "(timing a step would run FSDP's backward hooks mid-step); the planner's plan is used",
            RuntimeWarning,
            stacklevel=3,
        )
        return planned
    candidates = tuning_candidates(planned, max_candidates)
    if len(candidates) == 1:
        return planned
    limit = 10 * p.forward_seconds if max_seconds is None else max_seconds
    parameters = [t for m in modules for t in m.parameters() if t.requires_grad]
    devices = {t.device for t in _tensors(input)}
    timings: dict[str, list[float]] = {label: [] for label in candidates}
    start = time.perf_counter()
    with _PreservedState(modules, devices):
        for _ in range(repeats):
            for label, candidate in candidates.items():
                timings[label].append(
                    _time_step(
                        functions, candidate.regions, input, parameters, plan_contexts(candidate)
                    )
                )
            # Ranks must run the same candidates as often (under FSDP each run gathers
            # parameters): the time cap applies only to a plan made alone.
            if time.perf_counter() - start > limit and not _distributed.active(plan_group):
                break
    median = {label: statistics.median(t) for label, t in timings.items()}
    median = _distributed.agree_on_timings(median, plan_group)
    return fastest(candidates, median)


def _time_step(
    functions: Sequence[Callable[[Any], Any]],
    regions: Sequence[tuple[int, int, int]],
    input: Any,
    parameters: Sequence[torch.Tensor],
    contexts: dict[int, Callable[[], Any]] | None = None,
) -> float:
    x = _detached(input)
    inputs = [*parameters, *(t for t in _tensors(x) if t.requires_grad)]
    now = clock()
    _synchronize(x)
    start = now()
    with torch.enable_grad(), saves_kept_apart():
        execution = Execution(functions, regions, contexts)
        outputs = [t for t in _tensors(execution(x)) if t.requires_grad]
        if outputs and inputs:
            # Returned, not accumulated: the caller's .grad fields stay as they are.
            torch.autograd.grad(
                outputs, inputs, [torch.ones_like(t) for t in outputs], allow_unused=True
            )
    _synchronize(x)
    return now() - start


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
