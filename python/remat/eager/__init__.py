"""Eager PyTorch: checkpoint a chain of layers, or a model's blocks, to an absolute memory budget.

    import remat.torch
    y = remat.torch.checkpoint_sequential(model.layers, x, activation_budget="2GiB")
    remat.torch.auto_checkpoint(model, memory_budget="2GiB")   # every later step follows a plan

``memory_budget`` is the whole training step's peak on the device: parameters, gradients,
optimizer state, activations and temporaries. ``activation_budget`` is on saved-for-backward
bytes only: what autograd keeps between forward and backward. remat measures, once per input
shape, what each layer saves and how long its forward takes (layer by layer, so measuring never
holds more than one layer's activations), plans the least recompute time whose peak fits with
the C++ planner (``remat._core.eager_plan``: nested regions, optimal under its model), and runs
the plan with non-reentrant ``torch.utils.checkpoint``, RNG state preserved so dropout replays
identically.

The package is arranged by stage, and imports run one way only: ``run`` (execution, the entry
points) uses ``plan`` (the planner, tuning candidates), which uses ``measure`` (calls, ops,
menus, chains, block calls), which uses ``types`` (the data: profiles and plans). The modules
at this level besides ``types`` (``_runtime``, ``generators``, ``numpy_state``, ``op_facts``,
``mutation``, ``caches``, ``blocks``, ``policy``, ``table``) are the helpers every stage shares.
"""

from . import table  # noqa: F401  (registers how print(plan) shows a plan)
from .measuring.chain import profile_layers
from .planning.offload import plan_offload
from .planning.planner import plan_profile
from .run.auto import AutoCheckpoint, auto_checkpoint
from .run.estimation import estimate
from .run.measurement import Measurement, measure
from .run.options import CheckpointOptions
from .run.sequential import checkpoint_sequential, plan, run_plan
from .types import Plan, Profile

# isort: split
# Reachable as remat.eager.<name>, outside the public list below.
from .blocks import Blocks, find_blocks  # noqa: F401
from .measuring.roofline import DeviceRates  # noqa: F401
from .planning.offload import OffloadPlan, measure_bandwidth  # noqa: F401
from .run.estimation import Estimate, PlanPeak  # noqa: F401
from .types import LayerProfile, Region  # noqa: F401

# The entry points and the data they return.
__all__ = [
    "AutoCheckpoint",
    "CheckpointOptions",
    "Measurement",
    "Plan",
    "Profile",
    "auto_checkpoint",
    "checkpoint_sequential",
    "estimate",
    "measure",
    "plan",
    "plan_offload",
    "plan_profile",
    "profile_layers",
    "run_plan",
]
