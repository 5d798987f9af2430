"""The plans worth timing on the real chain: the planner's and the uniform segmentations (torch's
checkpoint_sequential layout) that fit the budget; and the choice among them once timed."""

from __future__ import annotations

import dataclasses

from ... import _core
from ..types import Plan, Region, core_regions
from .planner import uniform_regions


def tuning_candidates(planned: Plan, max_candidates: int = 3) -> dict[str, Plan]:
    """The plans tuning times, by label: the planner's ("planner") and at most
    `max_candidates` - 1 uniform segmentations (torch's checkpoint_sequential layout, re-run
    whole) whose predicted peak fits the budget, those with the least predicted recompute.
    Only the planner's when tuning cannot change the plan (see _tunable)."""
    if not _tunable(planned):
        return {"planner": planned}
    p = planned.profile
    layers, overhead = p.core_layers(), p.region_overhead_seconds
    fitting = []
    planner_regions = planned.core_regions()
    for segments in range(2, len(layers) + 1):
        regions = core_regions(uniform_regions(len(layers), segments))
        peak, recompute = _core.eager_evaluate(p.input_bytes, layers, overhead, 0, regions)
        if peak <= planned.memory_budget and regions != planner_regions:
            fitting.append((recompute, segments, regions, peak))
    fitting.sort(key=lambda c: (c[0], c[1]))
    candidates = {"planner": planned}
    for recompute, segments, regions, peak in fitting[: max(0, max_candidates - 1)]:
        candidates[f"{segments} segments"] = dataclasses.replace(
            planned,
            regions=tuple(Region(first, last, depth) for first, last, depth, _ in regions),
            options=tuple(option for *_, option in regions),
            predicted_peak_bytes=peak,
            predicted_recompute_seconds=recompute,
        )
    return candidates


def _tunable(planned: Plan) -> bool:
    """Whether tuning may choose another plan: this one needs a region, and regions may span
    several layers (uniform segmentations do)."""
    return bool(planned.regions) and planned.profile.max_region_layers == 0


def fastest(candidates: dict[str, Plan], seconds: dict[str, float]) -> Plan:
    """The candidate of least measured `seconds`, carrying every candidate's timing."""
    choice = min(seconds, key=seconds.__getitem__)
    return dataclasses.replace(candidates[choice], timings=tuple(seconds.items()), choice=choice)
