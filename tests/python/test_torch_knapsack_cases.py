"""PyTorch's own knapsack cases, checked as PyTorch's test checks them, ties included.

The 13 cases are the data of ``TestActivationCheckpointingKnapsack.setUp`` in PyTorch's
``test/functorch/test_ac_knapsack.py``
(https://github.com/pytorch/pytorch/blob/19a3e8fe32c9a39a576003292219092630529cf6/test/functorch/test_ac_knapsack.py).
That test runs them on torch's ``dp_knapsack`` and ``dp_knapsack_sliding_hirschberg`` and
compares the runtime with ``==`` and the saved and recomputed indices sorted; the same checks are
made here, on remat's drop-ins for those two and for ``ilp_knapsack``. Cases 4 and 8 tie: several
plans reach the optimum and the expected one is the plan torch's rule picks.
"""

import pytest

from remat import knapsack

# (memory, runtime, max_memory, expected_runtime, expected_saved, expected_recomputable),
# in PyTorch's order and spelling (expected lists are compared sorted, as PyTorch does).
TORCH_CASES = [
    ([2, 3, 2, 4, 1], [1, 2, 1, 3, 2], 5, 5.0, [3, 4], [2, 1, 0]),
    ([1, 1, 1], [1, 2, 3], 3, 6.0, [0, 1, 2], []),
    ([10, 20, 30], [1, 2, 3], 5, 0.0, [], [2, 1, 0]),
    ([1, 2, 3], [10, 20, 30], 1, 10.0, [0], [2, 1]),
    ([1, 1, 1], [2, 2, 2], 2, 4.0, [0, 1], [2]),
    ([0, 2, 3], [5, 2, 3], 5, 10.0, [0, 1, 2], []),
    ([1, 2, 3], [0, 2, 3], 3, 3.0, [2], [0, 1]),
    ([100, 200, 300], [1000, 2000, 3000], 500, 5000.0, [1, 2], [0]),
    ([0.5, 1.5, 2.0], [1.0, 2.0, 3.0], 2.0, 3.0, [1, 0], [2]),
    ([], [], 10, 0.0, [], []),
    ([1, 2, 3], [1, 2, 3], 0, 0.0, [], [2, 1, 0]),
    ([0, 0, 0], [1, 2, 3], 0, 6.0, [0, 1, 2], []),
    ([1, 2, 3], [0, 0, 0], 6, 0.0, [], [2, 1, 0]),
]

FUNCTIONS = ["dp_knapsack", "dp_knapsack_sliding_hirschberg", "ilp_knapsack"]


def test_all_thirteen_cases_are_here():
    assert len(TORCH_CASES) == 13


@pytest.mark.parametrize("case", range(len(TORCH_CASES)))
@pytest.mark.parametrize("function", FUNCTIONS)
def test_torch_case(function, case):
    memory, runtime, max_memory, expected_runtime, expected_saved, expected_recomputable = (
        TORCH_CASES[case]
    )
    result_runtime, result_saved, result_recomputable = getattr(knapsack, function)(
        memory, runtime, max_memory
    )
    assert result_runtime == expected_runtime
    assert sorted(result_saved) == sorted(expected_saved)
    assert sorted(result_recomputable) == sorted(expected_recomputable)


@pytest.mark.parametrize("case", [4, 8])
def test_tied_cases_have_another_optimal_plan(case):
    # What makes cases 4 and 8 tie-breaking checks: a different plan within budget is as good.
    memory, runtime, max_memory, expected_runtime, expected_saved, _ = TORCH_CASES[case]
    other = {4: [1, 2], 8: [2]}[case]
    assert sorted(other) != sorted(expected_saved)
    assert sum(memory[i] for i in other) <= max_memory
    assert sum(runtime[i] for i in other) == expected_runtime
