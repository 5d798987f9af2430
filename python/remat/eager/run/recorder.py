"""auto_checkpoint's first step for a new input signature: each block call run as a checkpoint
region and measured as it runs (what it saves, passes on, and its ops' costs).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable

import torch
from torch import nn
from torch.multiprocessing.reductions import StorageWeakRef

from ...saved_memory import is_persistent, storage_key, storage_of
from .._runtime import _PreservedState, _synchronize, _tensors, argument_modules, clock
from ..measuring.blocks import RecordedCall
from ..measuring.calls import CallWatch
from ..measuring.ops import ModesCache, op_recorder, recorded_profile
from ..measuring.step_segments import StepSegments
from ..snapshots import CallSnapshot
from .call_runner import CallRunner
from .options import CheckpointOptions
from .running import Running
from .step import _Step


class StepRecorder:
    """Measures the block calls of a step that has no plan yet, each inside the checkpoint
    region that trains it, and records them on the step."""

    def __init__(
        self,
        model: nn.Module,
        options: CheckpointOptions,
        running: Running,
        runner: CallRunner,
        segments: Callable[[], StepSegments | None],
        name: Callable[[nn.Module], str],
    ) -> None:
        self.model = model
        self.options = options
        self.running = running
        self.runner = runner
        self.segments = segments  # the step's parts, when measured part by part
        self.name = name
        # Kept across this handle's measuring steps: a step for new shapes prices the modes on
        # its blocks from what earlier steps measured on the same ops.
        self._modes: ModesCache | None = None

    def modes_for(self, together: bool) -> ModesCache:
        """The modes' costs and op profiles a measuring step uses. Ranks planning together
        record and measure every layer, step after step (see ModesCache)."""
        if together:
            return ModesCache(shortcuts=False)
        if self._modes is None:
            self._modes = ModesCache()
        return self._modes

    # The first step is measured eagerly even when the blocks are under torch.compile: the
    # profile (and so the plan) is the eager one, and compiled code never sees the recording
    # dispatch modes and saved-tensor hooks.
    @torch.compiler.disable
    def measure_and_run(
        self,
        step: _Step,
        module: nn.Module,
        original: Callable[..., Any],
        signature: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        excluded = step.parameter_storages(self.model)
        devices = {t.device for t in _tensors((args, kwargs))}
        name = self.name(module)
        modes = step.modes
        assert modes is not None  # a measuring step
        kind = modes.kind(module, signature) if self.options.granularity == "op" else None
        # Measured inside the region that trains it: one forward, whose saves are noted on
        # their way to the checkpoint. At op level, a block of a new kind records its ops in
        # that forward until the modes' per-op cost is known (see ModesCache.records); its
        # forward time then comes from a plain run (ModesCache.ops_of, time_plainly), since
        # the recording mode times every op. The recorder holds no op's output, so the part's
        # peak is the forward's own.
        record = kind is not None and modes.records(kind)
        recorder = op_recorder(original, args, kwargs) if record else None
        segments = self.segments()
        # Counted on the CPU, the region lets go of what the block saves, as it will in
        # training: the part's peak is the region's, and the count's kept peak the block's.
        kept_count = segments.kept_count() if segments is not None else None
        watch = CallWatch(
            original, args, kwargs, excluded, name, recorder, hand_on=True, kept_count=kept_count
        )
        snapshot = CallSnapshot(args, kwargs)  # the measuring runs below see the call's mappings
        if devices:
            self.running.device = next(iter(devices))
        call = len(step.calls)
        held_before = 0
        if segments is not None:
            segments.mark(("forward", call))
            held_before = segments.held_bytes()
        now = clock()
        _synchronize((args, kwargs))
        start = now()
        out = self.runner.run(module, original, args, kwargs, checkpointed=True, watch=watch)
        _synchronize(out)
        measured = watch.measurement(out, now() - start)
        # Held through the region run, so that nothing it saved or returned could take
        # their addresses; the op-level runs below record no keys across calls.
        step.last_outputs = None
        recorded = recorded_profile(recorder, out) if record else None
        ops = None if kind is None or record else modes.known(kind, measured.dispatched)
        if kind is not None and ops is None:
            # These runs only measure: the steps that follow the plan do not hold them.
            room = _room_to_profile(segments, held_before, modes)
            aside = segments.aside() if segments is not None else contextlib.nullcontext()
            with (
                aside,
                self.running.inside_block(),
                _PreservedState([module, *argument_modules(args, kwargs)], devices),
            ):
                again, again_kwargs = snapshot.replayed(args, kwargs)
                ops = modes.ops_of(
                    kind, original, again, again_kwargs, excluded, measured, recorded, True, room
                )
        if ops is not None and ops.plain_seconds is not None:
            # The region run is slowed by the measuring mode.
            seconds = min(measured.forward_seconds, ops.plain_seconds)
            measured = dataclasses.replace(measured, forward_seconds=seconds)
        arguments = tuple(
            storage_key(a)
            if isinstance(a, torch.Tensor) and not is_persistent(a, excluded)
            else None
            for a in (*args, *kwargs.values())
        )
        step.calls.append(
            RecordedCall.of(module, name, signature, measured, ops, input_order=arguments)
        )
        outputs = [t for t in _tensors(out) if not is_persistent(t, excluded)]
        if step.outside is not None:
            step.outside.note_outputs(len(step.calls) - 1, outputs)
        step.last_output_storages = [
            (storage_key(t), StorageWeakRef(storage_of(t))) for t in outputs
        ]
        if segments is not None:
            segments.mark(("after", call))
            segments.watch_backward(call, _tensors((args, kwargs)), _tensors(out))
        step.last_outputs = out
        return out


def _room_to_profile(
    segments: StepSegments | None, held_before: int, modes: ModesCache
) -> int | None:
    """What the step's budget leaves the runs that profile a block's ops, beyond the block's
    working set as its measured forward (which began holding `held_before`) showed it, its saves
    held (as the profiling runs hold them). None: no bound (no budget; or ranks planning
    together, which must run the same forwards)."""
    room = None if segments is None or not modes.shortcuts else segments.room_bytes()
    if room is None:
        return None
    assert segments is not None
    return room - (segments.kept_part_peak_bytes() - held_before)
