"""solve() and pareto() on one knapsack instance."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from . import _core
from ._validate import number, vector
from .units import parse_bytes

SOLVERS: tuple[str, ...] = tuple(_core.solvers())


@dataclass(frozen=True)
class Result:
    """A plan: which candidate ops to save. Same fields as ``remat solve``'s JSON."""

    solver: str
    status: str  # "optimal", "heuristic", "time_limit" or "memory_limit"
    max_runtime: float  # runtime saved: sum of runtime over saved
    upper_bound: float  # no feasible plan saves more
    saved: list[int]  # ascending
    recomputed: list[int]  # ascending; saved and recomputed partition range(n)
    memory_used: float
    quantized_memory_used: int
    quantized_max_memory: int
    seconds: float
    planner_peak_bytes: int
    path: str  # which algorithm decided: "expanding_core", "meet_in_the_middle", "table", ...


def _planner_bytes(max_planner_bytes: int | str | None) -> int:
    if max_planner_bytes is None:
        return 0
    if isinstance(max_planner_bytes, str):  # with a unit, as --max-planner-bytes reads it
        max_planner_bytes = parse_bytes(max_planner_bytes, "max_planner_bytes")
    if (
        isinstance(max_planner_bytes, (bool, np.bool_))
        or not isinstance(max_planner_bytes, numbers.Integral)
        or max_planner_bytes <= 0
    ):
        raise ValueError(
            f"max_planner_bytes: must be a positive integer, got {max_planner_bytes!r}"
        )
    # A cap past what 64 bits address caps nothing: it is that many bytes to the planner.
    return min(int(max_planner_bytes), 2**64 - 1)


def solve(
    memory: Sequence[float] | np.ndarray,
    runtime: Sequence[float] | np.ndarray,
    max_memory: float,
    *,
    solver: str = "exact",
    scale: float = 10000,
    time_limit: float | None = None,
    max_planner_bytes: int | str | None = None,
    on_memory_limit: str = "best",
) -> Result:
    """Chooses which ops to save so that saved memory fits `max_memory` and saved runtime is
    maximal (``exact``, ``sliding_hirschberg``, ``dp``) or good (``greedy``).

    Memory is quantized exactly as torch does (``round(m * scale)``). The GIL is released while
    the core solves. A plan that meets its bound is ``"optimal"`` whichever limit stopped the
    search.

    Args:
        memory: each item's memory (the bytes saving it costs), as torch gives it.
        runtime: each item's runtime (what saving it spares).
        max_memory: the budget, in memory's unit.
        solver: "exact", "sliding_hirschberg", "dp" or "greedy".
        scale: the quantization, as torch's (10^4).
        time_limit: seconds; ``exact`` returns its best plan and a valid bound at the limit.
        max_planner_bytes: the planner-memory cap, in bytes or with a unit ("8GiB"; default:
            half of physical RAM).
        on_memory_limit: "best" (``exact`` returns its best plan with status
            "memory_limit" at the cap) or "raise" (:class:`PlannerMemoryError`).

    Returns:
        The plan: ``saved`` and ``recomputed`` indices, ``max_runtime`` (the runtime saved),
        ``status`` and ``upper_bound``.

    Raises:
        ValueError: bad input, naming the field and index (the CLI's messages).
        PlannerMemoryError: a table solver would exceed `max_planner_bytes` (a MemoryError).

    Example:
        ```python
        result = remat.solve([2, 3, 2, 4, 1], [1, 2, 1, 3, 2], 5)
        assert result.saved == [3, 4] and result.status == "optimal"
        ```
    """
    if not isinstance(solver, str):
        raise TypeError(f"solver: expected a string, got {type(solver).__name__}")
    if on_memory_limit not in ("best", "raise"):
        raise ValueError(f"on_memory_limit: expected 'best' or 'raise', got {on_memory_limit!r}")
    if time_limit is not None:
        time_limit = number(time_limit, "time_limit")
    raw: dict[str, Any] = _core.solve(
        vector(memory, "memory"),
        vector(runtime, "runtime"),
        number(max_memory, "max_memory"),
        solver,
        number(scale, "scale"),
        time_limit,
        _planner_bytes(max_planner_bytes),
        on_memory_limit == "raise",
    )
    return Result(**raw)


@dataclass(frozen=True)
class ParetoFront:
    """The exact trade-off: best saved runtime for every budget from 0 to max_memory."""

    budgets: np.ndarray  # budget at each breakpoint, in memory units (quanta / scale)
    budget_quanta: np.ndarray  # the same, quantized
    max_runtime: np.ndarray  # best saved runtime from that budget on
    max_memory: float  # the instance's budget
    scale: float

    def value_at(self, budget: float) -> float:
        """Best saved runtime within ``budget`` (memory units), which must lie between 0 and the
        instance's max_memory: past it the front was not computed, and its last value would
        understate what a larger budget saves."""
        budget = number(budget, "budget")
        if not math.isfinite(budget) or budget < 0:
            raise ValueError(f"budget: must be a finite number >= 0, got {budget}")
        quanta = round(budget * self.scale)
        if quanta > round(self.max_memory * self.scale):
            raise ValueError(
                f"budget: {budget} is above the front's max_memory {self.max_memory}; "
                "compute the front with a larger max_memory"
            )
        index = int(np.searchsorted(self.budget_quanta, quanta, side="right")) - 1
        return float(self.max_runtime[index]) if index >= 0 else 0.0


def pareto(
    memory: Sequence[float] | np.ndarray,
    runtime: Sequence[float] | np.ndarray,
    max_memory: float,
    *,
    scale: float = 10000,
    max_planner_bytes: int | str | None = None,
    time_limit: float | None = None,
) -> ParetoFront:
    """Every breakpoint of best saved runtime against budget, in one Nemhauser-Ullmann pass.

    Its work can grow with min(capacity, 2^n) per item, and a front is exact only once every
    item is in. Ctrl-C stops it (KeyboardInterrupt) within about 50 ms.

    Args:
        memory: each item's memory.
        runtime: each item's runtime.
        max_memory: the largest budget on the front.
        scale: the quantization, as torch's (10^4).
        max_planner_bytes: the planner-memory cap, in bytes or with a unit ("8GiB"; default:
            half of physical RAM).
        time_limit: seconds.

    Returns:
        The front: ``budgets`` and the best ``max_runtime`` at each.

    Raises:
        remat.WorkLimitError: past `time_limit` (a TimeoutError).

    Example:
        ```python
        front = remat.pareto([2, 3, 2, 4, 1], [1, 2, 1, 3, 2], 5)
        assert list(front.max_runtime) == [0.0, 2.0, 3.0, 4.0, 5.0]
        ```
    """
    scale = number(scale, "scale")
    if time_limit is not None:
        time_limit = number(time_limit, "time_limit")
    budgets, values, _ = _core.pareto(
        vector(memory, "memory"),
        vector(runtime, "runtime"),
        number(max_memory, "max_memory"),
        scale,
        _planner_bytes(max_planner_bytes),
        time_limit,
    )
    quanta = np.asarray(budgets, dtype=np.int64)
    return ParetoFront(quanta / scale, quanta, np.asarray(values), float(max_memory), scale)
