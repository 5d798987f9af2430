"""auto_checkpoint's options in one checked dataclass, shared by the integrations' enable().

``auto_checkpoint(model, memory_budget=..., **options)`` keeps its keywords; they are read into a
:class:`CheckpointOptions` once, at the call, where every value is checked and an unknown keyword
is named. The handle and its parts read the options from there.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Sequence

import torch
from torch import nn

from ... import _distributed
from ..planning.offload import OffloadSettings
from ..planning.planner import check_planner_options

_GRANULARITIES = ("op", "block")
_FIRST_STEPS = ("measure", "trace")
_OFFLOAD_KEYWORDS = ("offload", "host_budget", "offload_bandwidth")


@dataclasses.dataclass(frozen=True)
class CheckpointOptions:
    """What :func:`remat.torch.auto_checkpoint` takes besides the model and its budget.

    Give them as keywords (``auto_checkpoint(model, memory_budget="8GiB", slots=512)``); the
    integrations' ``enable()`` takes the same ones, except ``blocks``.

    Attributes:
        optimizer: the optimizer that steps the model (None: found at its first step), whose
            state is counted in ``memory_budget``.
        blocks: a dotted path ("layers"), a container, or a list of modules (None: the model's
            repeated blocks, see :func:`remat.eager.find_blocks`).
        slots: the planner's memory resolution (None: exact).
        tune: time the candidate plans of a stock ``nn.Sequential`` and keep the fastest.
        example_inputs: positional arguments of one forward pass measured at the call, so that a
            budget below the least feasible one raises there rather than at the first step.
        example_kwargs: keyword arguments of that forward pass.
        verbose: print which blocks were chosen.
        microbatches_in_flight: for a pipeline stage whose schedule keeps that many
            microbatches' activations at once, the budget is the stage's peak over all of them.
        plan_group: under a process group, the ranks that plan from one agreed profile (None:
            all ranks; a ProcessGroup; "local": this rank alone).
        granularity: "op" also considers selective checkpointing inside single blocks; "block"
            plans whole-block regions only.
        offload: whether and how saved activations may go to host memory (the keywords
            ``offload``, ``host_budget`` and ``offload_bandwidth``; see docs/offload.md).
        first_step: how a new input signature's first step gets its plan: "measure" runs every
            block as its own region while measuring it; "trace" (with ``memory_budget``) plans
            from the step traced on fake tensors, follows that plan in the first step and
            times its block calls (see run/traced_plan.py).
    """

    optimizer: torch.optim.Optimizer | None = None
    blocks: str | nn.Module | Sequence[nn.Module] | None = None
    slots: int | None = None
    tune: bool = True
    example_inputs: tuple[Any, ...] | None = None
    example_kwargs: dict[str, Any] | None = None
    verbose: bool = False
    microbatches_in_flight: int = 1
    plan_group: Any = None
    granularity: str = "op"
    offload: OffloadSettings = OffloadSettings()
    first_step: str = "measure"

    def __post_init__(self) -> None:
        if self.example_inputs is not None and not isinstance(self.example_inputs, (tuple, list)):
            raise TypeError(
                "example_inputs: expected a tuple of the model's positional arguments, got "
                f"{type(self.example_inputs).__name__} (write example_inputs=(x,))"
            )
        if self.example_kwargs is not None and not isinstance(self.example_kwargs, dict):
            raise TypeError(
                "example_kwargs: expected a dict of keyword arguments, got "
                f"{type(self.example_kwargs).__name__}"
            )
        if self.granularity not in _GRANULARITIES:
            raise ValueError(f"granularity: expected 'op' or 'block', got {self.granularity!r}")
        if self.first_step not in _FIRST_STEPS:
            raise ValueError(f"first_step: expected 'measure' or 'trace', got {self.first_step!r}")
        if self.first_step == "trace" and self.offload.mode is not False:
            raise ValueError(
                "first_step: 'trace' plans without offloading; offload plans are made from a "
                "measured first step (first_step='measure')"
            )
        if not isinstance(self.offload, OffloadSettings):
            raise TypeError(
                f"offload: expected False, 'auto' or True, got {type(self.offload).__name__}"
            )
        if self.offload.mode is not False and self.microbatches_in_flight != 1:
            raise ValueError(
                "offload: plans for a pipeline stage (microbatches_in_flight > 1) do not offload"
            )
        check_planner_options(self.slots, self.microbatches_in_flight)
        _distributed.active(self.plan_group)  # checks its value

    @classmethod
    def of(cls, entry: str = "auto_checkpoint", **keywords: Any) -> CheckpointOptions:
        """The options from `entry`'s keywords: the fields, with the offload settings given
        flat (``offload=``, ``host_budget=``, ``offload_bandwidth=``)."""
        fields = {field.name for field in dataclasses.fields(cls)}
        for name in keywords:
            if name not in fields and name not in _OFFLOAD_KEYWORDS:
                known = sorted(fields | set(_OFFLOAD_KEYWORDS))
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" (did you mean {close[0]}=?)" if close else ""
                raise TypeError(
                    f"{entry}() got an unexpected keyword argument {name!r}{hint}; its options "
                    f"are {', '.join(known)}"
                )
        offload = OffloadSettings.of(
            keywords.pop("offload", False),
            keywords.pop("host_budget", None),
            keywords.pop("offload_bandwidth", None),
        )
        return cls(offload=offload, **keywords)
