"""auto_checkpoint's part for a budget on the whole training step's peak (``memory_budget``).

It measures steps part by part (measuring/step_segments.py): the step that measures the blocks,
and the first steps that follow each plan. From the measuring step it keeps the step's figures
(planning/step_budget.py); the handle plans each signature's blocks to the activation budget
that keeps the predicted step peak within the memory budget. A followed step measured over the
budget adds its excess to the figures and the next step follows a plan made with it (warned
once). A step that begins holding more than its plan assumed (the optimizer's state appears at
the first optimizer step) is planned again from the kept profile, without measuring again.

On the CPU the live-storage count runs as a dispatch mode from the model's forward to the end
of the step (the optimizer step, or the model's next call): a dispatch mode entered before the
step and left inside it is kept in its place on the stack.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from ... import _distributed
from ...inductor_buffers import UNSEEN as INDUCTOR_UNSEEN
from ...step_memory import held_at_start
from ..measuring.step_segments import StepRecord, StepSegments
from ..planning.step_budget import (
    StepFigures,
    agree_on_figures,
    figures_of,
    least_plan,
    plan_step,
)
from ..types import Plan, Profile

CHECKED_STEPS = 2  # steps measured after each new plan


@dataclass
class _Open:
    """The step being measured."""

    key: Any
    segments: StepSegments
    measuring: bool  # the step measures the blocks (else it follows a plan, checked)


def resolve_auto_budget(device: torch.device) -> int:
    """``memory_budget="auto"``: what the CUDA device can give this process now (free memory,
    plus what the caching allocator holds for it), less a margin for fragmentation: what the
    allocator holds beyond live tensors, and at least 5% of the device."""
    if device.type != "cuda":
        raise ValueError(
            f"memory_budget: 'auto' reads a CUDA device's free memory; the blocks run on "
            f"{device.type}, whose memory remat cannot read. Give the budget in bytes "
            '(memory_budget="24GiB")'
        )
    free, total = torch.cuda.mem_get_info(device)
    reserved = torch.cuda.memory_reserved(device)
    allocated = torch.cuda.memory_allocated(device)
    margin = max(reserved - allocated, total // 20)
    return free + reserved - margin


class StepBudget:
    """The step-peak budget of one handle (see the module's docstring)."""

    def __init__(
        self,
        memory_budget: int | str,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
    ) -> None:
        self.memory_budget = memory_budget  # "auto" until the first step's device is known
        self.auto = memory_budget == "auto"  # resolved by each rank: the ranks take the least
        self._model = model
        self._optimizers: list[torch.optim.Optimizer] = [] if optimizer is None else [optimizer]
        self.warn: Callable[[str], None] = print  # the handle's, once it exists
        self.figures: dict[Any, StepFigures] = {}
        self._start_of_plan: dict[Any, int] = {}  # bytes held at the start its plan assumed
        self._checks_left: dict[Any, int] = {}
        self._steps_over = 0  # checked steps found over the budget (each one is warned about)
        self._trained: tuple[Any, ...] | None = None  # see _check_again_if_training_changed
        # Under a process group: keys whose figures call for a new plan, made when all agree.
        self._plan_again: set[Any] = set()
        self._stepping = False  # inside an optimizer step of the model's parameters
        self._open: _Open | None = None
        self._parameters = {id(p) for p in model.parameters()}
        self._hooks = [
            register_optimizer_step_pre_hook(_bound(self, StepBudget._before_optimizer)),
            register_optimizer_step_post_hook(_bound(self, StepBudget._after_optimizer)),
        ]
        weakref.finalize(self, _remove_hooks, self._hooks)

    def remove(self) -> None:
        self.close()

    @property
    def optimizer(self) -> torch.optim.Optimizer | None:
        """The optimizer known to step the model (given, or seen stepping it)."""
        return self._optimizers[0] if self._optimizers else None

    # --- measuring steps ---

    def begin(self, key: Any, device: torch.device, held: tuple[Any, ...], measuring: bool) -> None:
        """The model's forward begins step `key` on `device`: measured when it measures the
        blocks or is among the first steps of its plan."""
        if self.memory_budget == "auto":
            self.memory_budget = resolve_auto_budget(device)
        if self._stepping:
            self.warn(
                "the optimizer runs the model inside its step (a closure, as LBFGS's step "
                "does): memory_budget bounds a step of one forward, backward and optimizer step, "
                "so the optimizer's own state and its forwards are not planned for, and the "
                "step's peak may pass the budget. Use activation_budget=, or an optimizer whose "
                "step() takes no closure"
            )
        self._check_again_if_training_changed()
        if not measuring and self._checks_left.get(key, 0) <= 0:
            return
        budget = self.memory_budget
        assert isinstance(budget, int)  # resolved above
        segments = StepSegments(
            device,
            (self._model, *self._optimizers, *held),
            optimizer_follows=bool(self._optimizers),
            budget=budget,
        )
        segments.begin()
        self._open = _Open(key, segments, measuring)

    def _check_again_if_training_changed(self) -> None:
        """Which parameters train (requires_grad), and the optimizers' parameter groups, set
        what a step holds beyond the blocks: gradients, optimizer state and its step. When they
        change (layers unfrozen, a group added), the next steps of every plan are checked
        again, so that a step they take over the budget is warned about and planned away."""
        trained = (
            tuple(p.requires_grad for p in self._model.parameters()),
            tuple(len(g["params"]) for o in self._optimizers for g in o.param_groups),
        )
        if self._trained is not None and trained != self._trained:
            for key in self.figures:
                self._checks_left[key] = CHECKED_STEPS
        self._trained = trained

    @property
    def open(self) -> StepSegments | None:
        """The step being measured, measuring or checked."""
        return self._open.segments if self._open is not None else None

    @property
    def segments(self) -> StepSegments | None:
        return self._open.segments if self._open is not None and self._open.measuring else None

    def _steps_model(self, optimizer: torch.optim.Optimizer) -> bool:
        def steps_known() -> bool:
            return any(
                id(p) in self._parameters for g in optimizer.param_groups for p in g["params"]
            )

        if steps_known():
            return True
        # The model's parameters may have been replaced since (FSDP2's fully_shard registers
        # sharded ones in their place): looked up again.
        self._parameters = {id(p) for p in self._model.parameters()}
        return steps_known()

    def _before_optimizer(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        if not self._steps_model(optimizer):
            return
        self._stepping = True
        if self._open is not None:
            self._open.segments.optimizer_begins()

    def _after_optimizer(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        if not self._steps_model(optimizer):
            return
        self._stepping = False
        if all(o is not optimizer for o in self._optimizers):
            self._optimizers.append(optimizer)  # its state is held from the next step on
        if self._open is not None:
            self._open.segments.leave()  # the user's code after the step is not the step's

    def close(self, profiles: dict[Any, Profile] | None = None) -> tuple[Any, bool] | None:
        """Ends the step being measured. Returns (its key, whether its plan must be made again)."""
        opened, self._open = self._open, None
        if opened is None:
            return None
        record = opened.segments.finish()
        if record.saw_inductor:
            self.warn(f"the check of this step's peak may be short: {INDUCTOR_UNSEEN}")
        if opened.measuring:
            profile = (profiles or {}).get(opened.key)
            if profile is None or not record.parts:
                return None
            self.figures[opened.key] = figures_of(record, profile)
            budget = int(self.memory_budget)
            if record.peak_bytes > budget:
                self.warn(
                    f"the step that measured the blocks held {record.peak_bytes} bytes at its "
                    f"peak, over the memory_budget of {budget} bytes (it runs every block as "
                    "its own region, and measures one block at a time beside that): "
                    "remat.torch.measure() reports the least budget that holds that step too"
                )
            return opened.key, True
        return opened.key, self._checked(opened.key, record)

    def _checked(self, key: Any, record: StepRecord) -> bool:
        self._checks_left[key] = self._checks_left.get(key, 0) - 1
        budget = int(self.memory_budget)
        if key not in self.figures:
            return False
        # The optimizer step, which no plan changes, is taken as measured (it is measured now
        # if the step that measured the blocks ran before the optimizer was known).
        figures = self.figures[key]
        optimizer = (p for part, p in record.parts if part == ("optimizer",))
        outside = max([figures.outside_bytes, *optimizer])
        replanned = outside > figures.outside_bytes
        self.figures[key] = replace(figures, outside_bytes=outside)
        if record.peak_bytes <= budget:
            return replanned
        excess = record.peak_bytes - budget
        figures = self.figures[key]
        self.figures[key] = replace(figures, margin_bytes=figures.margin_bytes + excess)
        self._checks_left[key] = CHECKED_STEPS
        self._steps_over += 1
        # Numbered: a warning repeated word for word is given once, and every step over the
        # budget must be told.
        self.warn(
            f"a training step measured {record.peak_bytes} bytes at its peak, over the "
            f"memory_budget of {budget} bytes by {excess} (steps over it so far: "
            f"{self._steps_over}): the next step follows a plan made with that excess added"
        )
        return True

    # --- planning ---

    def start_bytes(self, device: torch.device, held: tuple[Any, ...]) -> int:
        """What a step holds as it begins."""
        return held_at_start(device, self._model, *self._optimizers, *held)

    def stale(self, key: Any, start_bytes: int) -> bool:
        """Whether the plan for `key` assumed a smaller start than this step's."""
        return key in self.figures and start_bytes > self._start_of_plan.get(key, 2**62)

    def plan_again_later(self, key: Any) -> None:
        """Under a process group: `key`'s figures call for a new plan (see plan_again_together)."""
        self._plan_again.add(key)

    def plan_again_together(
        self, key: Any, profiled: bool, planned: bool, start_bytes: int, group: Any
    ) -> bool:
        """Under a process group, whether every rank plans step `key` again, all together (one
        plan for all): when any rank's figures call for it (or it has no plan yet) and every
        rank can (its inputs `profiled` and its step's figures in). One all_gather a step."""
        can = profiled and key in self.figures
        wants = can and (key in self._plan_again or not planned or self.stale(key, start_bytes))
        gathered = _distributed.all_gather((wants, can), "whether to plan again", group)
        again = any(w for w, _ in gathered) and all(c for _, c in gathered)
        if again:
            self._plan_again.discard(key)
        return again

    def plan(
        self,
        key: Any,
        make_plan: Callable[[int], Plan],
        start_bytes: int | None,
        group: Any = None,
    ) -> Plan:
        """The plan for `key`: to the step budget when its figures are known, else the least
        activations (the step that measured has not ended). Under a process group, one plan
        for every rank, from the largest figures any rank measured (agree_on_figures)."""
        figures = self.figures.get(key) if start_bytes is not None else None
        start = max(start_bytes or 0, self._start_of_plan.get(key, 0))
        figures, agreed_start, budget = agree_on_figures(
            figures, start, int(self.memory_budget), group
        )
        if figures is None:
            return least_plan(make_plan)
        self._start_of_plan[key] = start
        self._checks_left[key] = CHECKED_STEPS
        return plan_step(make_plan, budget, figures, agreed_start)


def _remove_hooks(hooks: list[Any]) -> None:
    for hook in hooks:
        hook.remove()


def _bound(owner: Any, method: Callable[..., Any]) -> Callable[..., Any]:
    """A hook that does not keep `owner` alive."""
    reference = weakref.ref(owner)

    def hook(*args: Any) -> None:
        found = reference()
        if found is not None:
            method(found, *args)

    return hook
