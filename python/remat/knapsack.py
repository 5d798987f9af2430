"""Drop-in replacements for torch._functorch._activation_checkpointing.knapsack.

Same signatures and return convention, ``(max_runtime, saved_indices, recomputable_indices)``,
so code written against torch's module works unchanged. Indices are ascending. Every function is
exact except greedy_knapsack, never goes over budget, and needs neither SciPy nor an
(n+1) x (W+1) table:

- dp_knapsack: remat's full-table DP (a bit per cell); refuses with MemoryError where the table
  would not fit, instead of exhausting memory.
- dp_knapsack_sliding_hirschberg: remat's O(W) sliding-window DP with Hirschberg splitting.
- ilp_knapsack: remat's exact core solver (what SciPy's MILP computes, without SciPy).
- greedy_knapsack: torch's ratio greedy, on quantized weights.
"""

from __future__ import annotations

from ._solve import solve


def _run(memory: list[float], runtime: list[float], max_memory: float, solver: str) -> tuple[float, list[int], list[int]]:
    result = solve(memory, runtime, max_memory, solver=solver)
    return result.max_runtime, list(result.saved), list(result.recomputed)


def dp_knapsack(memory: list[float], runtime: list[float], max_memory: float) -> tuple[float, list[int], list[int]]:
    return _run(memory, runtime, max_memory, "dp")


def dp_knapsack_sliding_hirschberg(
    memory: list[float], runtime: list[float], max_memory: float
) -> tuple[float, list[int], list[int]]:
    return _run(memory, runtime, max_memory, "sliding_hirschberg")


def ilp_knapsack(memory: list[float], runtime: list[float], max_memory: float) -> tuple[float, list[int], list[int]]:
    return _run(memory, runtime, max_memory, "exact")


def greedy_knapsack(memory: list[float], runtime: list[float], max_memory: float) -> tuple[float, list[int], list[int]]:
    return _run(memory, runtime, max_memory, "greedy")


__all__ = ["dp_knapsack", "dp_knapsack_sliding_hirschberg", "greedy_knapsack", "ilp_knapsack"]
