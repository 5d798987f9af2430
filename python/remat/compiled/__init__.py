"""torch.compile to a budget in bytes: predicted step peaks for the partitioner's plans.

- :mod:`.solver`: the knapsack solver torch's partitioner calls, and use(), which installs it;
- :mod:`.liveness`: the peak of a forward and backward graph pair, by a liveness walk;
- :mod:`.partition`: a knapsack plan turned into the graphs torch's partitioner would emit;
- :mod:`.budget`: the candidates (the exact Pareto front's breakpoints) and the choice;
- :mod:`.guard`: graphs torch decides without the solver, checked against the budget;
- :mod:`.measure`: a step's measured peak (CUDA allocator stats, or the CPU profiler);
- :mod:`.tradeoff`: the whole curve of one model, measured at a few points;
- :mod:`.fit`: a budget that holds as measured (inductor), by compiling, measuring and retrying;
- :mod:`.survey`: what the last tradeoff() surveyed, to tell another graph apart.

``remat.torch.use(memory_budget=...)`` and ``remat.torch.tradeoff`` are the entry points.
"""

from .budget import (
    BudgetTooSmall,
    Candidate,
    GraphChoice,
    candidate_sizes,
    choose,
    front_plans,
    knapsack_answer,
)
from .fitting import Attempt, BudgetNotMet, Fit, fit
from .guard import ROUTE_TO_SOLVER, guarded_choice, unguarded
from .liveness import StepPeak, step_peak
from .measure import measured_peak
from .partition import Partitioner, require_partitioner_internals
from .tradeoff_curve import Tradeoff, TradeoffPoint, tradeoff

__all__ = [
    "Attempt",
    "BudgetNotMet",
    "BudgetTooSmall",
    "Fit",
    "Candidate",
    "GraphChoice",
    "Partitioner",
    "ROUTE_TO_SOLVER",
    "StepPeak",
    "Tradeoff",
    "TradeoffPoint",
    "candidate_sizes",
    "choose",
    "fit",
    "front_plans",
    "guarded_choice",
    "knapsack_answer",
    "measured_peak",
    "require_partitioner_internals",
    "step_peak",
    "tradeoff",
    "unguarded",
]
