"""Property tests (hypothesis): on any small instance every exact solver equals brute force,
every plan is a feasible partition, and greedy never beats the optimum. Failures shrink to a
minimal instance."""

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

import remat

SCALE = 10000
quanta = st.integers(min_value=0, max_value=6)
# Subnormal runtimes are refused (test_cli's BAD_INPUTS): they lose precision in the solvers' sums.
runtimes = st.one_of(
    st.integers(-3, 9).map(float),
    st.floats(-5, 1e6, allow_nan=False, allow_infinity=False, allow_subnormal=False),
)


@st.composite
def instances(draw):
    n = draw(st.integers(0, 10))
    memory = [q / SCALE for q in draw(st.lists(quanta, min_size=n, max_size=n))]
    runtime = draw(st.lists(runtimes, min_size=n, max_size=n))
    budget = draw(st.integers(0, 6 * n + 1)) / SCALE
    return memory, runtime, budget


def brute_force(memory, runtime, budget):
    weights = [round(m * SCALE) for m in memory]
    capacity = round(budget * SCALE)
    best = 0.0
    for mask in itertools.product((0, 1), repeat=len(memory)):
        if sum(w for w, take in zip(weights, mask) if take) <= capacity:
            best = max(best, sum(r for r, take in zip(runtime, mask) if take))
    return best, weights, capacity


@settings(max_examples=300, deadline=None)
@given(instances())
def test_solvers_agree_with_brute_force(instance):
    memory, runtime, budget = instance
    best, weights, capacity = brute_force(memory, runtime, budget)
    for solver in remat.SOLVERS:
        result = remat.solve(memory, runtime, budget, solver=solver)
        assert sorted(result.saved + result.recomputed) == list(range(len(memory)))
        assert sum(weights[i] for i in result.saved) <= capacity
        assert all(runtime[i] > 0 for i in result.saved)
        tolerance = 1e-9 * (1 + abs(best))
        if solver == "greedy":
            assert result.max_runtime <= best + tolerance
        else:
            assert abs(result.max_runtime - best) <= tolerance
            assert result.status == "optimal"
    front = remat.pareto(memory, runtime, budget)
    assert abs(front.value_at(budget) - best) <= 1e-9 * (1 + abs(best))
