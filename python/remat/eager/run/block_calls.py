"""auto_checkpoint's part that runs one block call: plainly or as a checkpoint region, as the
step's plan says, or as a region with a warning when the call is off the plan.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...saved_memory import storage_key
from .._runtime import _signature, _tensors, signature_difference
from ..caches import without_caches
from ..generators import measuring_now
from ..snapshots import CallSnapshot
from .buffers import BufferReplay
from .handle_state import HandleState
from .offload import OffloadedCall
from .step import _Step


class BlockCalls(HandleState):
    """AutoCheckpoint's part for one block call (see auto.py for the state it shares)."""

    def _block_forward(
        self, module: nn.Module, original: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        step = self._step
        if step is None or not self._active():
            if step is None and self._active() and not measuring_now():
                self._warn(
                    f"{self._name(module)} was called while the model's forward was not running "
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
            return self._measure_and_run(step, module, original, signature, args, kwargs)
        planned = self._block_plans[step.plan_key]
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
            self._warn(
                f"block call {position} ({self._name(module)}) does not match the plan made for "
                f"these inputs ({reason}); it runs as its own checkpoint region{hint}"
            )
            out = self._run(module, original, args, kwargs, checkpointed=True)
            if step.pending_offload is not None:
                self._hand_over(step, out, None)
            return out
        position, step.position = place, place + 1
        self.plan = step.plan
        offloaded = None
        moved = planned.inputs_offloaded.get(position)
        eager = not torch.compiler.is_compiling()
        if eager and position in planned.offloaded:
            out, offloaded = self._run_offloaded(step, module, original, args, kwargs)
        elif eager and moved is not None:
            out, offloaded = self._run_moving_input(step, module, original, args, kwargs, moved)
        else:  # under torch.compile's tracing an offloaded call runs as a region (less memory)
            checkpointed = position in planned.regions or position in planned.offloaded
            context_fn = planned.regions.get(position)
            out = self._run(module, original, args, kwargs, checkpointed, context_fn)
        if offloaded is not None or step.pending_offload is not None:
            self._hand_over(step, out, offloaded)
        return out

    def _off_plan(
        self, expected: Any, module: nn.Module, signature: Any, planned_calls: int
    ) -> str:
        """How a block call differs from the plan's call at its position, in words."""
        if expected is None:
            return f"more block calls than the {planned_calls} planned"
        if expected[0] is not module:
            return f"{self._name(expected[0])} was planned there"
        (args_was, kwargs_was), (args_now, kwargs_now) = expected[1], signature
        return (
            signature_difference(args_was, args_now, "arguments")
            or signature_difference(kwargs_was, kwargs_now, "keywords")
            or "another call"
        )

    def _run_moving_input(
        self,
        step: _Step,
        module: nn.Module,
        original: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        positions: tuple[int, ...],
    ) -> tuple[Any, OffloadedCall]:
        """A whole region whose input (the previous block's output, at `positions` among its
        arguments) goes to the host: its checkpoint saves its inputs through the call's hooks."""
        arguments = (*args, *kwargs.values())
        moved = {
            storage_key(arguments[p]) for p in positions if isinstance(arguments[p], torch.Tensor)
        }
        call = OffloadedCall(self._name(module), (), self._excluded(step), self._warn, moved)
        with call.hooks():
            out = self._run(module, original, args, kwargs, True, note_inputs=False)
        call.finish(out)
        return out, call

    def _run_offloaded(
        self,
        step: _Step,
        module: nn.Module,
        original: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[Any, OffloadedCall]:
        call = OffloadedCall(self._name(module), (args, kwargs), self._excluded(step), self._warn)
        self._inside += 1
        try:
            with call.hooks():
                out = original(*args, **kwargs)
        finally:
            self._inside -= 1
        call.finish(out)
        return out, call

    @staticmethod
    def _hand_over(step: _Step, out: Any, offloaded: OffloadedCall | None) -> None:
        """A block call of a plan that offloads has run: the previous offloaded call's device
        storages go (its copy out ran beside this forward), and its copies back start when a
        gradient reaches this call's outputs."""
        previous = step.pending_offload
        if previous is not None:
            previous.release()
            previous.prefetch_at(out)
        step.pending_offload = offloaded

    def _without_caches(
        self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        args, kwargs, dropped = without_caches(module, args, kwargs)
        if dropped and self.warn_on_dropped_caches:
            self._warn(
                f"{type(module).__name__} blocks were given {' and '.join(dropped)}: a "
                "key-value cache in training is appended to again by every re-run of a block, "
                "so remat passes "
                + ", ".join(f"{n}={'False' if n == 'use_cache' else 'None'}" for n in dropped)
                + " to the blocks, as Hugging Face's gradient checkpointing does. Train with "
                "use_cache=False (model.config.use_cache = False) to silence this"
            )
        return args, kwargs

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
        """`note_inputs`: keep the region's inputs (and their versions) until the step ends,
        to warn when one changes in place (not for a region whose input leaves the device).
        `watch`: a context entered around the region's forward (the first step's CallWatch),
        not around its re-run in backward."""
        self._inside += 1
        try:
            if not checkpointed:
                return original(*args, **kwargs)
            names, count = list(kwargs), len(args)  # not args: the closure would hold them
            # Under torch.compile, AOTAutograd applies a buffer's update once, in the forward.
            compiling = torch.compiler.is_compiling()
            replay = None if compiling else BufferReplay([module], self._name(module))

            def region(*inputs: Any) -> Any:
                call_args = inputs[:count]
                call_kwargs = dict(zip(names, inputs[count:]))
                if replay is None:
                    return original(*call_args, **call_kwargs)
                return replay.run(original, *call_args, **call_kwargs)

            # A mapping the block writes into: its re-runs write into copies of it as it was.
            snapshot = None if compiling else CallSnapshot(args, kwargs)
            if snapshot:
                region = _re_running_from(snapshot, region, count, names)

            if watch is not None:  # (never under torch.compile: no state to mutate in a trace)
                region = _watching_the_forward(region, watch)

            # Keyword arguments travel as positional inputs: torch's checkpoint finds the devices
            # whose RNG it must preserve (dropout on CUDA) among its positional arguments only,
            # and its own keywords (debug, context_fn, ...) must not capture a block's.
            extra: dict[str, Any] = {} if context_fn is None else {"context_fn": context_fn}
            out = checkpoint(
                region,
                *args,
                *kwargs.values(),
                use_reentrant=False,
                preserve_rng_state=True,
                **extra,
            )
            if self._step is not None and not compiling and note_inputs:
                inputs = [(t, t._version) for t in _tensors((args, kwargs))]
                self._step.region_inputs.append((self._name(module), inputs))
            return out
        finally:
            self._inside -= 1

    def _check_region_inputs(self, step: _Step) -> None:
        """A region re-runs its block in backward from the inputs it was given; one changed in
        place after the block returned makes autograd raise there, naming no block."""
        changed = sorted(
            {name for name, inputs in step.region_inputs if any(t._version != v for t, v in inputs)}
        )
        if changed:
            self._warn(
                f"an input of {', '.join(changed)} was changed in place after the block returned "
                "(as `x += block(x)` or a tensor every block add_s to do); the block ran as a "
                "checkpoint region, whose re-run in backward needs that input as it was, so "
                "backward will raise that a variable was modified by an inplace operation. Write "
                "it out of place (x = x + block(x)); the first step runs every block as a region "
                "unless auto_checkpoint got example_inputs="
            )


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


def _re_running_from(
    snapshot: CallSnapshot, region: Callable[..., Any], count: int, names: list[str]
) -> Callable[..., Any]:
    """`region` whose calls after the first (its re-runs in backward) get fresh copies of the
    mappings the call was given, as they were when it began (see snapshots.py)."""
    runs = [0]

    def replaying(*inputs: Any) -> Any:
        if runs[0]:
            args, kwargs = snapshot.replayed(inputs[:count], dict(zip(names, inputs[count:])))
            inputs = (*args, *kwargs.values())
        runs[0] += 1
        return region(*inputs)

    return replaying


def _watching_the_forward(region: Callable[..., Any], watch: Any) -> Callable[..., Any]:
    """`region` with `watch` entered around its first call (the checkpoint's forward), not
    around its re-run in backward."""
    pending = [watch]

    def watched(*inputs: Any) -> Any:
        if not pending:
            return region(*inputs)
        with pending.pop():
            return region(*inputs)

    return watched
