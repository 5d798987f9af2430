"""remat: exact activation-checkpointing planners.

The knapsack that torch.compile's memory-budget partitioner solves, solved exactly and within a
planner-memory cap, and optimal checkpoint schedules for chains of layers. The work happens in
the C++ core (``remat._core``); this package is the thin layer that reaches PyTorch users:

- :func:`solve` and :func:`pareto` on one knapsack instance;
- :mod:`remat.knapsack`: drop-in functions with torch's solver signatures;
- :mod:`remat.torch`: ``remat.torch.use()`` makes torch.compile use remat's solver, and
  ``remat.torch.auto_checkpoint(model, memory_budget="2GiB")`` / ``checkpoint_sequential``
  checkpoint eager training to an absolute budget (:mod:`remat.eager`).
"""

from . import knapsack
from ._core import (
    InputError,
    InvalidSchedule,
    PlannerMemoryError,
    WorkLimitError,
    __version__,  # the project() version in CMakeLists.txt, as `remat --version`
)
from ._solve import SOLVERS, ParetoFront, Result, pareto, solve

__all__ = [
    "InputError",
    "InvalidSchedule",
    "ParetoFront",
    "PlannerMemoryError",
    "Result",
    "SOLVERS",
    "pareto",
    "solve",
    "WorkLimitError",
    "__version__",
    "knapsack",
]
