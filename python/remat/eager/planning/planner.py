"""The least-recompute plan of a measured profile under a byte budget (the C++ chain planner),
and the stage budget of a pipeline stage that holds several microbatches (1F1B)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator

from ... import _core
from ...units import parse_bytes
from ..types import Plan, Profile, Region


def _plan_one(profile: Profile, budget: int, slots: int | None) -> Plan:
    layers = profile.planned_layers()
    if not layers:
        raise ValueError("functions: the chain has no layers")
    result = _core.eager_plan(
        profile.input_bytes,
        layers,
        profile.region_overhead_seconds,
        profile.max_region_layers,
        budget,
        0 if slots is None else slots,
        0,  # 0: default
    )
    return Plan(
        regions=tuple(Region(first, last, depth) for first, last, depth, _ in result.regions),
        options=tuple(option for *_, option in result.regions),
        memory_budget=budget,
        predicted_peak_bytes=result.peak_bytes,
        predicted_recompute_seconds=result.recompute_time,
        minimum_budget_bytes=result.minimum_budget,
        no_checkpoint_bytes=result.no_checkpoint_bytes,
        profile=profile,
        predicted_stage_peak_bytes=result.peak_bytes,
    )


def _stage_peak(found: Plan, microbatches: int) -> int:
    """1F1B: the stage holds the forward activations of `microbatches` microbatches, and one of
    them is in its backward (re-runs included) at a time."""
    return (microbatches - 1) * found.held_at_end_of_forward() + found.predicted_peak_bytes


def _whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_planner_options(slots: int | None, microbatches_in_flight: int) -> None:
    if slots is not None and not _whole_number(slots):
        raise ValueError(f"slots: expected a whole number >= 1 (or None), got {slots!r}")
    if not _whole_number(microbatches_in_flight):
        raise ValueError(
            f"microbatches_in_flight: expected a whole number >= 1, got {microbatches_in_flight!r}"
        )


@contextlib.contextmanager
def budget_named(field: str) -> Iterator[None]:
    """The planner's errors name its budget `memory_budget`; a caller that took it under
    another name (auto_checkpoint's `activation_budget`) has them name that instead."""
    try:
        yield
    except _core.InputError as error:
        said = str(error)
        if not said.startswith("memory_budget:"):
            raise
        raise _core.InputError(field + said[len("memory_budget") :]) from None


def plan_profile(
    profile: Profile,
    memory_budget: int | float | str,
    *,
    slots: int | None = None,
    microbatches_in_flight: int = 1,
) -> Plan:
    """The least-recompute plan for a measured profile (see :func:`plan`).

    With `microbatches_in_flight` = m > 1 (a pipeline stage under a 1F1B-style schedule) the
    budget is the stage's: (m - 1) microbatches' bytes held after their forward plus one
    microbatch's peak must fit. The plan is the least-recompute one among per-microbatch
    budgets from budget / m (which always fits, held <= peak) up to the budget, searched by
    bisection on that stage peak.

    Args:
        profile: the measured chain (:func:`profile_layers`, ``Measurement.profile``, or
            ``Profile.from_json``).
        memory_budget: the peak of saved activations (the stage's, with m > 1), in bytes or
            with a unit.
        slots: the planner's memory resolution (None: exact).
        microbatches_in_flight: m, the microbatches whose activations the stage holds at once.

    Returns:
        The plan, with its predicted peak, recompute, and the least budget any plan reaches.

    Raises:
        remat.InputError: the budget is below that least budget (stating it).
    """
    budget = parse_bytes(memory_budget)
    check_planner_options(slots, microbatches_in_flight)
    m = microbatches_in_flight
    if m == 1:
        return _plan_one(profile, budget, slots)
    least = _plan_one(profile, 2**60, slots).minimum_budget_bytes
    floor = _plan_one(profile, least, slots)
    if _stage_peak(floor, m) > budget:
        raise _core.InputError(
            f"memory_budget: {budget} bytes is below the least stage peak with "
            f"{m} microbatches in flight, {_stage_peak(floor, m)} bytes"
        )
    best, low, high = floor, max(least, budget // m), budget
    while low <= high:
        middle = (low + high) // 2
        candidate = _plan_one(profile, middle, slots)
        if _stage_peak(candidate, m) <= budget:
            if candidate.predicted_recompute_seconds <= best.predicted_recompute_seconds:
                best = candidate
            low = middle + 1
        else:
            high = middle - 1
    return dataclasses.replace(
        best,
        memory_budget=budget,
        microbatches_in_flight=m,
        predicted_stage_peak_bytes=_stage_peak(best, m),
    )


def uniform_regions(layers: int, segments: int) -> list[Region]:
    """The regions of torch.utils.checkpoint.checkpoint_sequential(functions, segments, ...):
    segments of layers // segments layers, all but the last checkpointed."""
    size = layers // segments
    return [Region(first, first + size - 1, 0) for first in range(0, size * (segments - 1), size)]
