"""remat.torch.measure's training step: each block call recorded inside its own checkpoint
region (recorder.StepRecorder), and the step's profile made from the records. Nothing is
planned or followed here; measure() plans from the profile itself.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from .._runtime import _signature, _tensors, in_backward
from ..blocks import Blocks
from ..caches import without_caches
from ..measuring.step_segments import StepRecord, StepSegments
from ..planning.agree import agree_on_profile
from ..planning.planner import plan_profile
from ..types import Plan, Profile
from .agreement import Agreement
from .block_planner import Calls, region_overhead, step_profile
from .call_runner import CallRunner
from .chain_mode import ChainRunner
from .options import CheckpointOptions
from .recorder import StepRecorder
from .running import Notices, PlanBook, Running, step_context
from .step import _OutsideSaves, _Step
from .wrapping import Patched, restore_forwards, wrap_forwards


class MeasuredStep:
    """One training step of `model`, measured block call by block call.

    Used as a context: inside it the blocks are wrapped, and the model's first forward is the
    step (begun and ended by the model's hooks, as auto_checkpoint's step is). ``by_parts``:
    the step's peak is measured part by part as well (``segments``, ``finish()``), and a stock
    nn.Sequential is measured call by call; otherwise (under a process group) such a chain is
    measured and planned as one, every block its own region, as auto_checkpoint plans it
    there."""

    def __init__(
        self,
        model: nn.Module,
        blocks: Blocks,
        plan_group: Any,
        optimizer: torch.optim.Optimizer | None,
        by_parts: bool,
        granularity: str = "op",
    ) -> None:
        self.model = model
        self.blocks = blocks
        self.options = CheckpointOptions(tune=False, plan_group=plan_group, granularity=granularity)
        self.optimizer = optimizer
        self.by_parts = by_parts
        self.notices = Notices("remat.measure")
        self.running = Running()
        self.agreement = Agreement(plan_group)
        name = blocks.name_of
        self.runner = CallRunner(model, self.running, self.notices, name)
        self.segments: StepSegments | None = None  # the step's parts, while measured
        self.recorder = StepRecorder(
            model, self.options, self.running, self.runner, lambda: self.segments, name
        )
        self.chain_book = PlanBook()  # the chain's plan, under a process group
        self.chain = (
            None
            if blocks.chain is None
            else ChainRunner(
                model,
                blocks,
                self.options,
                2**60,  # the plan's budget does not matter: measure() reports the least
                self.running,
                self.agreement,
                self.chain_book,
                self.notices,
                measuring=True,
            )
        )
        self.ended = False  # the step's forward has ended
        self.profile: Profile | None = None  # the blocks' calls, once it has
        self.calls: Calls = ()  # what a plan from the profile is made for (step_profile)
        self._patched: Patched = []
        self._hooks: list[Any] = []

    def __enter__(self) -> MeasuredStep:
        blocks = self.blocks
        targets: list[tuple[nn.Module, Callable[..., Any]]] = [
            (m, self._block_forward) for m in dict.fromkeys(blocks.modules)
        ]
        if self.chain is not None and blocks.chain is not None:
            targets.append((blocks.chain, self.chain.forward))
        self._patched = wrap_forwards(targets)
        self._hooks = [
            self.model.register_forward_pre_hook(self._begin, with_kwargs=True),
            self.model.register_forward_hook(self._end, always_call=True),
        ]
        return self

    def __exit__(self, *_: Any) -> None:
        step, self.running.step = self.running.step, None
        if step is not None and step.outside is not None:  # the forward raised
            step.outside.__exit__(None, None, None)
        if self.segments is not None:
            self.segments.leave()
        restore_forwards(self._patched)
        for hook in self._hooks:
            hook.remove()
        self._patched, self._hooks = [], []

    def _begin(self, _model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.ended or self.running.step is not None or in_backward():
            return  # the step is the model's first call
        key = (_signature(args), _signature(kwargs), step_context(self.model, self.blocks))
        step = self.running.step = _Step(key, key, None)
        if self.by_parts:
            devices = [t.device for t in _tensors((args, kwargs))]
            device = devices[0] if devices else self.running.device
            held = (self.model, *([self.optimizer] if self.optimizer else []), args, kwargs)
            self.segments = StepSegments(device, held, self.optimizer is not None)
            self.segments.begin()
        if self.chain is None:
            running = self.running
            step.outside = _OutsideSaves(lambda: running.inside > 0).__enter__()
        step.modes = self.recorder.modes_for(self.agreement.together)

    def _end(self, _model: nn.Module, _args: Any, output: Any) -> None:
        step, self.running.step = self.running.step, None
        if step is None:
            return
        if step.outside is not None:
            step.outside.__exit__(None, None, None)
        if self.segments is not None:
            self.segments.watch_end_of_backward(_tensors(output))
        self.runner.check_region_inputs(step)
        # Made now, as auto_checkpoint plans at the end of the forward: the step's record holds
        # every region's inputs, which its backward frees.
        if step.calls:
            self.profile, self.calls = step_profile(step, region_overhead(self.running.device))
        self.ended = True

    def finish(self) -> StepRecord | None:
        """Ends the step's measuring (after its backward and optimizer step): its parts' peaks,
        None when it was not measured part by part."""
        segments, self.segments = self.segments, None
        return None if segments is None else segments.finish()

    def plan(self) -> Plan | None:
        """The step's least-activation plan (its profile and least budgets), agreed on by the
        ranks of a process group; None when no block was called."""
        if self.chain is not None:
            return self.chain_book.last
        if self.profile is None:
            return None
        return plan_profile(agree_on_profile(self.profile, 0, self.options.plan_group), 2**60)

    def _block_forward(self, module: nn.Module, original: Any, *args: Any, **kwargs: Any) -> Any:
        step = self.running.step
        if step is None or not self.running.active():
            return original(*args, **kwargs)
        if module.training:  # a key-value cache is dropped, as a training step drops it
            args, kwargs, _ = without_caches(module, args, kwargs)
        signature = (_signature(args, ints=True), _signature(kwargs, ints=True))
        step.position += 1
        return self.recorder.measure_and_run(step, module, original, signature, args, kwargs)
