"""remat for PyTorch: torch.compile's memory-budget knapsack, and eager checkpointing to a budget.

    import remat.torch
    remat.torch.checkpoint_sequential(layers, x, activation_budget="2GiB")   # eager (remat.eager)
    remat.torch.auto_checkpoint(model, memory_budget="2GiB")
    remat.torch.estimate(meta_model, batch, optimizer=opt)  # the step's peak, on fake tensors
    remat.torch.use()                  # every later torch.compile uses remat's exact solver
    with remat.torch.use("exact"):     # or only inside this block
        ...
    remat.torch.use(memory_budget="6GiB")  # a budget in bytes for each compiled graph's peak
    remat.torch.tradeoff(model, x)         # predicted peak against recompute (remat.compiled)
    remat.torch.fit(model, x, memory_budget="6GiB")  # the budget to use() so a step measures within

This module only gathers the names users call: the solver and use() live in
remat.compiled.solver, the byte budgets in remat.compiled, eager checkpointing in remat.eager.

Torch versions: ``use()`` and :class:`RematKnapsackSolver` need torch >= 2.11, the first release
with ``torch._inductor.custom_graph_pass.CustomKnapsackSolver``; on an older torch this module
still imports, eager checkpointing works, and ``use()`` raises a RuntimeError saying so.
"""

from __future__ import annotations

from . import integrations  # noqa: F401  (remat.integrations.* after import remat.torch)
from .compiled import BudgetNotMet, BudgetTooSmall, fit, tradeoff
from .compiled.solver import use
from .eager import (
    AutoCheckpoint,
    CheckpointOptions,
    Measurement,
    Plan,
    Profile,
    auto_checkpoint,
    checkpoint_sequential,
    estimate,
    measure,
    plan,
)
from .saved_memory import SavedTensorMeter
from .step_memory import StepMemoryMeter

# isort: split
# Reachable as remat.torch.<name>, outside the public list below (documented at their modules).
from .compiled import Fit, GraphChoice, Tradeoff  # noqa: F401
from .compiled.solver import (  # noqa: F401
    COMPILE_MIN_TORCH,
    CustomKnapsackSolver,  # None on torch < 2.11, as this module's docstring says
    RematKnapsackSolver,
    node_runtimes,
)
from .eager import DeviceRates, Estimate, LayerProfile, find_blocks, profile_layers  # noqa: F401

# What users call, and the types they hold.
__all__ = [
    "AutoCheckpoint",
    "BudgetNotMet",
    "BudgetTooSmall",
    "CheckpointOptions",
    "Measurement",
    "Plan",
    "Profile",
    "SavedTensorMeter",
    "StepMemoryMeter",
    "auto_checkpoint",
    "checkpoint_sequential",
    "estimate",
    "fit",
    "measure",
    "plan",
    "tradeoff",
    "use",
]
