"""torch.compile to a budget in bytes: predicted step peaks for the partitioner's plans.

- :mod:`.solver`: the knapsack solver torch's partitioner calls, and use(), which installs it;
- :mod:`.liveness`: the peak of a forward and backward graph pair, by a liveness walk;
- :mod:`.partition`: a knapsack plan turned into the graphs torch's partitioner would emit;
- :mod:`.budget`: the candidates (the exact Pareto front's breakpoints) and the choice;
- :mod:`.guard`: graphs torch decides without the solver, checked against the budget;
- :mod:`.step_start`: what a step holds as it begins, which the budget leaves a graph less;
- :mod:`.measure`: a step's measured peak (CUDA allocator stats, or the CPU profiler);
- :mod:`.tradeoff`: the whole curve of one model, measured at a few points;
- :mod:`.fit`: a budget that holds as measured (inductor), by compiling, measuring and retrying;
- :mod:`.survey`: what the last tradeoff() surveyed, to tell another graph apart.

``remat.torch.use(memory_budget=...)`` and ``remat.torch.tradeoff`` are the entry points.
"""

from .budget import BudgetTooSmall, GraphChoice
from .fitting import BudgetNotMet, Fit, fit
from .tradeoff_curve import Tradeoff, TradeoffPoint, tradeoff

# isort: split
# The partitioner's internals, reachable as remat.compiled.<name> for the tests and benches,
# outside the public list below.
from .budget import (  # noqa: F401
    Candidate,
    OptimizerStepTooLarge,  # noqa: F401  (a BudgetTooSmall)
    candidate_sizes,
    choose,
    front_plans,
    knapsack_answer,
)
from .fitting import Attempt  # noqa: F401
from .guard import ROUTE_TO_SOLVER, guarded_choice, unguarded  # noqa: F401
from .liveness import StepPeak, step_peak  # noqa: F401
from .measure import measured_peak  # noqa: F401
from .partition import Partitioner, require_partitioner_internals  # noqa: F401

# What users of torch.compile's budget call and catch; remat.torch.use lives in .solver.
__all__ = [
    "BudgetNotMet",
    "BudgetTooSmall",
    "Fit",
    "GraphChoice",
    "Tradeoff",
    "TradeoffPoint",
    "fit",
    "tradeoff",
]
