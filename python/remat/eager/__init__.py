"""Eager PyTorch: checkpoint a chain of layers to an absolute memory budget.

    import remat.torch
    y = remat.torch.checkpoint_sequential(model.layers, x, memory_budget="2GiB")
    remat.torch.auto_checkpoint(model, memory_budget="2GiB")   # every later step follows a plan

The budget is on saved-for-backward bytes: what autograd keeps between forward and backward
(activations), not parameters, gradients or optimizer state. remat measures, once per input
shape, what each layer saves and how long its forward takes (layer by layer, so measuring never
holds more than one layer's activations), plans the least recompute time whose peak fits with
the C++ planner (``remat._core.eager_plan``: nested regions, optimal under its model), and runs
the plan with non-reentrant ``torch.utils.checkpoint``, RNG state preserved so dropout replays
identically.
"""

from .auto import AutoCheckpoint, auto_checkpoint
from .blocks import Blocks, find_blocks
from .execution import Execution
from .measure import Measurement, measure
from .planning import Plan, plan, plan_profile, run_plan, tune_plan, uniform_regions
from .profile import LayerProfile, Profile, profile_layers
from .sequential import checkpoint_sequential

__all__ = [
    "AutoCheckpoint",
    "Blocks",
    "Execution",
    "Measurement",
    "LayerProfile",
    "Plan",
    "Profile",
    "auto_checkpoint",
    "checkpoint_sequential",
    "find_blocks",
    "measure",
    "plan",
    "plan_profile",
    "profile_layers",
    "run_plan",
    "tune_plan",
    "uniform_regions",
]
