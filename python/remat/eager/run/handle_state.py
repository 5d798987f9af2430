"""The state the auto_checkpoint handle's parts share, declared once.

AutoCheckpoint (auto.py) is built from three parts: BlockCalls (how one block call runs),
FirstStep (measuring a step and planning from it) and ChainMode (a stock nn.Sequential as one
chain). Each reads and writes the handle's state and calls the others' methods. This class
declares that state and those methods, with their types, so the type checker holds every part
to them; AutoCheckpoint.__init__ sets every attribute.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from ..blocks import Blocks
from ..measuring.ops import ModesCache
from ..types import Plan, Profile
from .execution import Execution
from .options import CheckpointOptions
from .step import _BlockPlan, _PendingBackward, _Step
from .step_budget import StepBudget
from .tuning import OnlineTuning


class HandleState:
    # --- what the user gave ---
    model: nn.Module
    blocks: Blocks
    activation_budget: int | None  # None: planned for step_budget
    step_budget: StepBudget | None  # None: planned for activation_budget
    options: CheckpointOptions  # slots, tuning, plan group, granularity, offload settings
    warn_on_dropped_caches: bool
    _measuring: bool  # measure()'s handle: every block its own region, then undone

    # --- what the handle found ---
    plans: dict[Any, Plan]  # every plan made, by input signature
    plan: Plan | None  # the plan the last step followed
    warnings: list[str]
    _block_plans: dict[Any, _BlockPlan]
    _chain_plans: dict[Any, Plan]
    _tunings: dict[Any, OnlineTuning]
    # Under a process group: this rank's number for each key, and the profile it measured for it
    # (with its calls), from which a plan for a new combination of the ranks' keys is made.
    _key_numbers: dict[Any, int]
    _profiles: dict[Any, tuple[Profile, tuple[tuple[Any, Any, tuple[int, ...]], ...]]]
    _region_overhead: float | None  # seconds a region costs besides its layers, once measured
    _modes: ModesCache | None

    # --- the step under way ---
    _step: _Step | None
    _inside: int  # > 0 while a block (or the chain) runs: blocks inside it run plainly
    _start_bytes: int | None  # what the step under way held as it began
    _device: torch.device  # the blocks' inputs', once seen
    _pending: _PendingBackward
    last_execution: Execution | None  # the chain's last run (ChainMode)

    # --- the parts' methods, as the others call them ---
    def _warn(self, message: str, once_as: str | None = None) -> None:
        raise NotImplementedError

    def _name(self, module: nn.Module) -> str:
        raise NotImplementedError

    def _active(self) -> bool:
        raise NotImplementedError

    def _context(self) -> Any:
        raise NotImplementedError

    def _plan_key(self, key: Any, known: bool) -> tuple[Any, bool]:
        raise NotImplementedError

    def _run(
        self,
        module: nn.Module,
        original: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        checkpointed: bool,
        context_fn: Callable[[], Any] | None = None,
        note_inputs: bool = True,
        watch: Any = None,
    ) -> Any:
        raise NotImplementedError

    def _measure_and_run(
        self,
        step: _Step,
        module: nn.Module,
        original: Callable[..., Any],
        signature: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        raise NotImplementedError

    def _excluded(self, step: _Step) -> set[tuple[str, int, int]]:
        raise NotImplementedError
