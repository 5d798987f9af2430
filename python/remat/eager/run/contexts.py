"""torch.utils.checkpoint's ``context_fn`` for each region of a plan: the selective policy of the
menu entry the region runs with (eager/policy.py), or None where the region re-runs whole."""

from __future__ import annotations

from typing import Any, Callable

from ..policy import context_fn
from ..types import Plan


def region_context(
    plan: Plan, region: int, warn: Callable[[str], None] | None = None
) -> Callable[[], Any] | None:
    """The `context_fn` of region `region` (index into ``plan.regions``): its selective policy
    when the plan keeps some of its ops, else None (re-run all). `warn` gets what goes off the
    plan (a RuntimeWarning when not given)."""
    entry = plan.menu_entry(region)
    if entry is None or not entry.cached:
        return None
    first = plan.regions[region][0]
    selective = plan.profile.selective[first]
    assert selective is not None  # the region's entry comes from this layer's menu
    op_profile, _ = selective
    return context_fn(op_profile, entry, plan.profile.layers[first].name, warn)


def plan_contexts(plan: Plan) -> dict[int, Callable[[], Any]]:
    """Every selective region's `context_fn`, by region index."""
    found = {i: region_context(plan, i) for i in range(len(plan.regions))}
    return {i: f for i, f in found.items() if f is not None}
