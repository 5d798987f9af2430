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

Ties. When several plans reach the optimum, dp_knapsack and dp_knapsack_sliding_hirschberg return
the plan torch's function of the same name returns, wherever torch's plan is optimal and within
budget (checked plan for plan in tests/python/test_torch_parity.py, and on the 13 cases of
PyTorch's test/functorch/test_ac_knapsack.py in tests/python/test_torch_knapsack_cases.py):

- dp_knapsack: torch's backtrack. An item is saved only when saving it is strictly better than
  skipping it, deciding from the last item back; among optimal plans, the one with the
  lexicographically smallest (x[n-1], ..., x[0]), i.e. later items are left out whenever an
  optimal plan leaves them out. ``[1, 1, 1], [2, 2, 2], 2`` saves ``[0, 1]``.
- dp_knapsack_sliding_hirschberg: torch's splits. Items [lo, hi) split at lo + (hi - lo) // 2
  (counting every item, including those with runtime <= 0 or zero memory); the later half gets
  the least budget with which the two halves still reach the segment's optimum, the earlier
  half the rest plus torch's extra quantum; a single item is saved if it fits. That is torch's plan; where it goes over
  budget (pytorch/pytorch issue 197871) the same rule without the extra quantum is used instead,
  which is exact and within budget. ``[0.5, 1.5, 2.0], [1, 2, 3], 2.0`` saves ``[0, 1]``, and
  ``[1, 2, 1], [3, 2, 2], 3`` saves ``[0, 2]`` where dp_knapsack saves ``[0, 1]``.
- ilp_knapsack: remat's exact core, which returns the first optimal plan it reaches: a fixed
  answer for a given instance, but not an order on plans. torch's ilp_knapsack leaves ties to
  SciPy's HiGHS, which states no rule either (of three or more identical items it saves the last
  ones, so on PyTorch's case ``[1, 1, 1], [2, 2, 2], 2`` it gives ``[1, 2]``, not the ``[0, 1]``
  torch's test expects of its dp solvers and remat's ilp_knapsack returns). Where the optimum is
  unique the plans are the same.

torch computes in float32 and remat in double, so where float32 rounding makes or breaks a tie
the plans can differ; both are exact in the cases above. Items of zero memory and positive
runtime are always saved, items of runtime <= 0 never (torch's dp_knapsack saves zero-memory
items of negative runtime, which is never optimal).
"""

from __future__ import annotations

from ._solve import solve


def _run(
    memory: list[float], runtime: list[float], max_memory: float, solver: str
) -> tuple[float, list[int], list[int]]:
    result = solve(memory, runtime, max_memory, solver=solver)
    return result.max_runtime, list(result.saved), list(result.recomputed)


def dp_knapsack(
    memory: list[float], runtime: list[float], max_memory: float
) -> tuple[float, list[int], list[int]]:
    return _run(memory, runtime, max_memory, "dp")


def dp_knapsack_sliding_hirschberg(
    memory: list[float], runtime: list[float], max_memory: float
) -> tuple[float, list[int], list[int]]:
    return _run(memory, runtime, max_memory, "sliding_hirschberg")


def ilp_knapsack(
    memory: list[float], runtimes: list[float], max_memory: float
) -> tuple[float, list[int], list[int]]:
    return _run(memory, runtimes, max_memory, "exact")


def greedy_knapsack(
    memory: list[float], runtimes: list[float], max_memory: float
) -> tuple[float, list[int], list[int]]:
    return _run(memory, runtimes, max_memory, "greedy")


__all__ = ["dp_knapsack", "dp_knapsack_sliding_hirschberg", "greedy_knapsack", "ilp_knapsack"]
