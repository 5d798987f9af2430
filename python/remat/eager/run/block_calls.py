"""auto_checkpoint's parts for one block call: BlockCalls routes it (measured at the first
step, run as the plan says, or as its own region with a warning when it is off the plan), and
call_runner.CallRunner runs it.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import torch
from torch import nn

from .._runtime import _signature, _synchronize, clock, signature_difference
from ..caches import without_caches
from ..generators import measuring_now
from .block_planner import BlockPlanner
from .call_runner import CallRunner
from .recorder import StepRecorder
from .running import Notices, PlanBook, Running


class BlockCalls:
    """Routes each block call of a step: measured (a step with no plan yet), as the plan says,
    or, off the plan, as its own checkpoint region with a warning."""

    def __init__(
        self,
        running: Running,
        book: PlanBook,
        notices: Notices,
        name: Callable[[nn.Module], str],
        runner: CallRunner,
        recorder: StepRecorder,
        planner: BlockPlanner,
    ) -> None:
        self.running = running
        self.book = book
        self.notices = notices
        self.name = name
        self.runner = runner
        self.recorder = recorder
        self.planner = planner
        # Whether a cache dropped from the blocks' calls in training is warned about (an
        # integration that documents the drop turns it off).
        self.warn_on_dropped_caches = True

    def forward(
        self, module: nn.Module, original: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        """A block's forward while it is under auto_checkpoint."""
        step = self.running.step
        active = self.running.active()
        if step is None or not active:
            if step is None and active and not measuring_now():
                self.notices.warn(
                    f"{self.name(module)} was called while the model's forward was not running "
                    "(a method such as model.encode(), a training_step, or a loop over the "
                    "blocks outside forward): it runs without checkpointing, and the budget is "
                    "not kept. Call the model itself, or give auto_checkpoint the module whose "
                    "forward calls the blocks",
                    once_as="a block called outside the model's forward",
                )
            return original(*args, **kwargs)
        if module.training:
            args, kwargs = self._without_caches(module, args, kwargs)
        signature = (_signature(args, ints=True), _signature(kwargs, ints=True))
        position = step.position
        step.position += 1
        if step.plan is None:
            return self.recorder.measure_and_run(step, module, original, signature, args, kwargs)
        planned = self.planner.block_plans[step.plan_key]
        # Its place in the plan: this position, or one further on where the step skipped
        # blocks (LayerDrop in the model's loop).
        place = _place_after(planned.calls, position, module, signature)
        if place is None:
            expected = planned.calls[position] if position < len(planned.calls) else None
            step.off_plan = True
            # None from here on. With none at all (more calls than planned, or a block the
            # measured step never called), the next step measures again (see _end_step).
            step.outgrew_plan |= position >= len(planned.calls) or all(
                call[0] is not module for call in planned.calls
            )
            reason = self._off_plan(expected, module, signature, len(planned.calls))
            hint = (
                ". An int that does not change what the block saves (a timestep, a step count) "
                "keeps the plan when passed as a float or a tensor"
                if re.search(r": int value -?\d+, planned -?\d+$", reason)
                else ""
            )
            self.notices.warn(
                f"block call {position} ({self.name(module)}) does not match the plan made for "
                f"these inputs ({reason}); it runs as its own checkpoint region{hint}"
            )
            out = self.runner.run(module, original, args, kwargs, checkpointed=True)
            if step.pending_offload is not None:
                self.runner.hand_over(step, out, None)
            return out
        position, step.position = place, place + 1
        self.book.last = step.plan
        offloaded = None
        moved = planned.inputs_offloaded.get(position)
        eager = not torch.compiler.is_compiling()
        if eager and position in planned.offloaded:
            out, offloaded = self.runner.run_offloaded(step, module, original, args, kwargs)
        elif eager and moved is not None:
            out, offloaded = self.runner.run_moving_input(
                step, module, original, args, kwargs, moved
            )
        else:  # under torch.compile's tracing an offloaded call runs as a region (less memory)
            checkpointed = position in planned.regions or position in planned.offloaded
            context_fn = planned.regions.get(position)
            timed = step.times is not None and eager
            if timed:
                now = clock()
                _synchronize((args, kwargs))
                started = now()
            out = self.runner.run(module, original, args, kwargs, checkpointed, context_fn)
            if timed:
                assert step.times is not None
                _synchronize(out)
                step.times[position] = now() - started
        if offloaded is not None or step.pending_offload is not None:
            self.runner.hand_over(step, out, offloaded)
        return out

    def _off_plan(
        self, expected: Any, module: nn.Module, signature: Any, planned_calls: int
    ) -> str:
        """How a block call differs from the plan's call at its position, in words."""
        if expected is None:
            return f"more block calls than the {planned_calls} planned"
        if expected[0] is not module:
            return f"{self.name(expected[0])} was planned there"
        (args_was, kwargs_was), (args_now, kwargs_now) = expected[1], signature
        return (
            signature_difference(args_was, args_now, "arguments")
            or signature_difference(kwargs_was, kwargs_now, "keywords")
            or "another call"
        )

    def _without_caches(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args, kwargs, dropped = without_caches(module, args, kwargs)
        if dropped and self.warn_on_dropped_caches:
            self.notices.warn(
                f"{type(module).__name__} blocks were given {' and '.join(dropped)}: a "
                "key-value cache in training is appended to again by every re-run of a block, "
                "so remat passes "
                + ", ".join(f"{n}={'False' if n == 'use_cache' else 'None'}" for n in dropped)
                + " to the blocks, as Hugging Face's gradient checkpointing does. Train with "
                "use_cache=False (model.config.use_cache = False) to silence this"
            )
        return args, kwargs


def _place_after(
    calls: tuple[tuple[Any, Any, tuple[int, ...]], ...],
    start: int,
    module: nn.Module,
    signature: Any,
) -> int | None:
    """The first position from `start` on where the plan calls `module` with `signature`."""
    for position in range(start, len(calls)):
        if calls[position][0] is module and calls[position][1] == signature:
            return position
    return None
