"""Runs one block call of auto_checkpoint: plainly, as a whole or selective checkpoint region,
or with what it saves (or its input) offloaded to the host.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...saved_memory import storage_key
from .._runtime import _tensors, argument_modules
from ..snapshots import CallSnapshot
from .buffers import BufferReplay
from .offload import OffloadedCall
from .running import Notices, Running
from .step import _Step


class CallRunner:
    """Runs one block call: plainly, as a checkpoint region (whole, or selective with a
    context_fn), or with what it saves (or its input) offloaded to the host."""

    def __init__(
        self,
        model: nn.Module,
        running: Running,
        notices: Notices,
        name: Callable[[nn.Module], str],
    ) -> None:
        self.model = model
        self.running = running
        self.notices = notices
        self.name = name

    def run(
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
        with self.running.inside_block():
            if not checkpointed:
                return original(*args, **kwargs)
            names, count = list(kwargs), len(args)  # not args: the closure would hold them
            # Under torch.compile, AOTAutograd applies a buffer's update once, in the forward.
            compiling = torch.compiler.is_compiling()
            replay = (
                None
                if compiling
                else BufferReplay([module, *argument_modules(args, kwargs)], self.name(module))
            )

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
            if self.running.step is not None and not compiling and note_inputs:
                inputs = [(t, t._version) for t in _tensors((args, kwargs))]
                self.running.step.region_inputs.append((self.name(module), inputs))
            return out

    def check_region_inputs(self, step: _Step) -> None:
        """A region re-runs its block in backward from the inputs it was given; one changed in
        place after the block returned makes autograd raise there, naming no block."""
        changed = sorted(
            {name for name, inputs in step.region_inputs if any(t._version != v for t, v in inputs)}
        )
        if changed:
            self.notices.warn(
                f"an input of {', '.join(changed)} was changed in place after the block returned "
                "(as `x += block(x)` or a tensor every block add_s to do); the block ran as a "
                "checkpoint region, whose re-run in backward needs that input as it was, so "
                "backward will raise that a variable was modified by an inplace operation. Write "
                "it out of place (x = x + block(x)); the first step runs every block as a region "
                "unless auto_checkpoint got example_inputs="
            )

    def run_moving_input(
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
        call = OffloadedCall(
            self.name(module), (), step.parameter_storages(self.model), self.notices.warn, moved
        )
        with call.hooks():
            out = self.run(module, original, args, kwargs, True, note_inputs=False)
        call.finish(out)
        return out, call

    def run_offloaded(
        self,
        step: _Step,
        module: nn.Module,
        original: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> tuple[Any, OffloadedCall]:
        call = OffloadedCall(
            self.name(module),
            (args, kwargs),
            step.parameter_storages(self.model),
            self.notices.warn,
        )
        with self.running.inside_block(), call.hooks():
            out = original(*args, **kwargs)
        call.finish(out)
        return out, call

    @staticmethod
    def hand_over(step: _Step, out: Any, offloaded: OffloadedCall | None) -> None:
        """A block call of a plan that offloads has run: the previous offloaded call's device
        storages go (its copy out ran beside this forward), and its copies back start when a
        gradient reaches this call's outputs."""
        previous = step.pending_offload
        if previous is not None:
            previous.release()
            previous.prefetch_at(out)
        step.pending_offload = offloaded


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
