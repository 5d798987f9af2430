"""The budget check for graphs torch partitions without asking the solver.

With ``activation_memory_budget`` just above 0, torch's ``choose_saved_values_set`` still
decides some graphs itself: when no candidate op can be recomputed, when its default plan saves
no more than the inputs, or when a more aggressive min-cut already saves almost nothing. Those
plans are already the least it can save, but their peak was never compared with the byte
budget. This wrapper predicts it and raises BudgetTooSmall when it does not fit, so a byte
budget is never silently exceeded.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable

from .budget import BudgetTooSmall, Candidate, GraphChoice
from .partition import Partitioner

#: The ratio budget that sends every graph with recomputable candidates to the solver: torch
#: returns early only for plans whose ratio is below it, which no plan saving more than the
#: inputs has.
ROUTE_TO_SOLVER = 1e-9


def guarded_choice(
    original: Callable[..., Any], solver: Any, previous_ratio: float
) -> Callable[..., Any]:
    """torch's ``original`` choose_saved_values_set, checked against ``solver``'s budget;
    ``previous_ratio`` is the ratio budget the routing ratio replaced."""

    def choose_saved_values_set(joint_graph: Any, node_info: Any, memory_budget: float = 1) -> Any:
        asked_before = len(solver.choices)
        saved_values = original(joint_graph, node_info, memory_budget)
        if memory_budget == ROUTE_TO_SOLVER and len(solver.choices) == asked_before + 1:
            saved_values = _verified(
                original, solver, joint_graph, node_info, memory_budget, saved_values
            )
            _tag_offloaded(solver.choices[-1], saved_values)
            return saved_values
        if memory_budget != ROUTE_TO_SOLVER or len(solver.choices) != asked_before:
            return saved_values  # another budget (a region annotation), or the solver decided
        if solver.survey or solver.memory_budget is None:
            return saved_values
        budget, start = solver.graph_budget(joint_graph)
        partitioner = Partitioner(joint_graph, node_info)
        peak = partitioner.partition_saving(list(saved_values)).peak
        candidate = Candidate((), 0.0, peak)
        solver.choices.append(
            GraphChoice(
                budget=solver.memory_budget,
                chosen=candidate,
                candidates=[candidate],
                start_bytes=start,
            )
        )
        assert budget is not None  # a byte budget, not surveying (checked above)
        if peak.peak > budget:
            raise BudgetTooSmall(solver.memory_budget, candidate, 1, start)
        return saved_values

    choose_saved_values_set._remat_unguarded = (original, previous_ratio)  # type: ignore[attr-defined]
    return choose_saved_values_set


def _verified(
    original: Callable[..., Any],
    solver: Any,
    joint_graph: Any,
    node_info: Any,
    memory_budget: float,
    saved_values: Any,
) -> Any:
    """``saved_values``, torch's partition of the plan the solver chose, once torch's own split
    predicts the peak the solver's fast path did; else the plan chosen again with torch's own
    min-cut and split throughout (with a warning: the fast path is meant to be exact)."""
    choice = solver.choices[-1]
    if solver.survey or not solver.fast or choice.chosen is None:
        return saved_values
    started = time.perf_counter()
    exact = Partitioner(joint_graph, node_info, fast=False).partition_saving(
        list(saved_values), offload=bool(choice.chosen.offloaded)
    )
    choice.step_seconds["check"] = time.perf_counter() - started
    if exact.peak == choice.chosen.peak:
        return saved_values
    warnings.warn(
        "remat.torch.use(memory_budget=...): remat's fast prediction of a plan's peak "
        f"({choice.chosen.peak.peak} bytes) differs from torch's own partition of it "
        f"({exact.peak.peak} bytes); planning this graph again with torch's min-cut and split. "
        "Please report this graph",
        stacklevel=3,
    )
    solver.choices.pop()
    solver.fast = False
    try:
        return original(joint_graph, node_info, memory_budget)
    finally:
        solver.fast = True


def _tag_offloaded(choice: GraphChoice, saved_values: Any) -> None:
    """Marks the saved values the chosen plan offloads for torch's activation offloading (the
    forward graph's copies of these nodes keep their meta)."""
    moved = set() if choice.chosen is None else choice.chosen.offloaded
    for node in saved_values:
        if node.name in moved:
            node.meta["should_offload"] = True


def unguarded(function: Callable[..., Any]) -> tuple[Callable[..., Any], float | None]:
    """torch's own function under any remat guard, and the ratio that guard's routing replaced
    (None when there was no guard)."""
    original, ratio = getattr(function, "_remat_unguarded", (function, None))
    return original, ratio
