"""The bytes one training step holds on its device, part by part: before the blocks, in each
block's forward and backward, between them, in the code after the blocks (the head and the
loss), and after the blocks' backward (the optimizer step).

A part's peak is read when the next part begins. On CUDA it is the allocator's
``max_memory_allocated`` since the last mark (its peak statistic is reset at each mark, so a
user reading it across a measured step sees only the last part). On the CPU it comes from the
live-storage count of :class:`remat.step_memory.StepMemoryMeter`.

Runs that only measure (a block's ops recorded, SAC's modes timed, in the first step) are
counted aside: the step holds their peak, so it is the step's, but not the part's, whose figure
plans the steps that follow and do not run them. Given a budget, the step runs them only where
they leave it room (``room_bytes``).

Backward marks come from tensor hooks: a block's backward begins when the gradient of its
output is complete and ends when that of its input is. Hooks on one tensor can fire out of
order (a block's input is the previous block's output), so a mark that would move the step
back is ignored.
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode, _push_mode

from ...saved_memory import estimating_now
from ...step_memory import _LiveStorages, reset_cuda_peak

# Where a step is: ("pre",) before the blocks' forward; ("forward", i) in block call i's
# forward; ("after", i) after it (the last: the head and the loss, up to the blocks' backward);
# ("backward", i) in its backward; ("before", i) between its backward and the previous call's
# (("before", 0): the rest of the backward); ("done",) after the backward, up to
# ("optimizer",), the optimizer step. A step with no optimizer step ends with its backward.
Part = tuple[Any, ...]
OUTSIDE = ("pre", "done", "optimizer")  # parts where no block activation is held


@dataclass(frozen=True)
class StepRecord:
    """One measured step: the bytes held when it began, and the peak of each part."""

    start_bytes: int
    parts: tuple[tuple[Part, int], ...]
    saw_inductor: bool = False  # the CPU count missed an Inductor graph's buffers
    aside_bytes: int = 0  # the peak of the runs that only measured (see StepSegments.aside)
    # Per part where a block's region let go of what it saved (see StepSegments.kept_count):
    # its peak had the block held its saves, as a block run without a region does. Parts not
    # here held their saves, or saved nothing they let go.
    kept_parts: tuple[tuple[Part, int], ...] = ()
    # Whether the regions' forwards let go of their saves (counted on the CPU): a forward
    # part's peak is then a region's, and kept_parts the block's held whole.
    regions_let_go: bool = False

    @property
    def peak_bytes(self) -> int:
        return max(self.unprofiled_peak_bytes, self.aside_bytes)

    @property
    def unprofiled_peak_bytes(self) -> int:
        """The peak without the runs that only measured."""
        return max([self.start_bytes, *(peak for _, peak in self.parts)])


class StepSegments:
    """Measures one step, part by part (see the module's docstring). `held`: what the step
    holds when it begins (the model, its optimizers, the batch); counted on the CPU only."""

    def __init__(
        self,
        device: torch.device,
        held: tuple[Any, ...],
        optimizer_follows: bool,
        budget: int | None = None,
    ) -> None:
        self.device = device
        self.budget = budget  # the step's memory budget, if it has one (see room_bytes)
        # Whether an optimizer step is expected after the backward: else what follows the
        # backward is the user's, and the CPU count stops there (the dispatch mode, which the
        # backward's end cannot take off the stack, passes ops through until the step ends).
        self._optimizer_follows = optimizer_follows
        self._held = held
        self._mode: _LiveStorages | None = None
        self._below: list[tuple[Any, int]] = []  # the modes under ours, with their entries
        self._finalizer: Any = None
        self._part: Part = ("pre",)
        self._backward_progress: int | None = None  # 2 * call + 1 in its backward, 2 * call after
        self._parts: list[tuple[Part, int]] = []
        self.start_bytes = 0
        self.open = False
        self._allocator = False  # measured by CUDA's allocator (else by counting storages)
        self._aside_bytes = 0
        self._part_floor = 0  # CUDA: the part's peak before an aside run reset the statistic
        self._kept_parts: list[tuple[Part, int]] = []
        self._let_go = False  # some region let go of its saves (see kept_count)

    def begin(self) -> None:
        # An estimated step's CUDA tensors are fake: the allocator sees none, storages count.
        self._allocator = self.device.type == "cuda" and not estimating_now()
        if self._allocator:
            reset_cuda_peak(self.device)
            self.start_bytes = torch.cuda.memory_allocated(self.device)
        else:
            self._mode = _LiveStorages(self.device.type)
            self._mode.hold_all(self._held)
            self.start_bytes = self._mode.current
            # Pushed, not entered: the mode is left where the step ends, which may lie inside
            # a mode the user enters later and leaves after it (see _remove).
            self._below = [(m, _entries(m)) for m in _get_current_dispatch_mode_stack()]
            _push_mode(self._mode)
            self._mode.watch()
            # Taken off the stack if this step is dropped unfinished (its handle collected).
            self._finalizer = weakref.finalize(self, _remove, self._mode, self._below)
        self.open = True

    def _close_part(self) -> None:
        if self._allocator:
            peak = max(reset_cuda_peak(self.device), self._part_floor)
            self._part_floor = 0
        else:
            assert self._mode is not None
            peak, kept = self._mode.peak, self._mode.kept_peak
            self._mode.reset_peaks()
            if kept > peak:
                self._kept_parts.append((self._part, kept))
        self._parts.append((self._part, peak))

    def mark(self, part: Part) -> None:
        """The step enters `part` (a forward mark: in program order)."""
        if self.open:
            self._close_part()
            self._part = part

    def backward_mark(self, call: int, inside: bool) -> None:
        """Call `call`'s backward begins (`inside`) or ends."""
        progress = 2 * call + (1 if inside else 0)
        if not self.open or (
            self._backward_progress is not None and progress >= self._backward_progress
        ):
            return
        self._backward_progress = progress
        self.mark(("backward", call) if inside else ("before", call))

    def blocks_done(self) -> None:
        """The blocks' backward is over."""
        self.backward_mark(0, inside=False)

    def backward_done(self) -> None:
        """The step's backward is over: what follows counts if an optimizer step follows
        (gradient clipping, say), and is the user's own otherwise."""
        self.blocks_done()
        if self._part[0] not in OUTSIDE:
            self.mark(("done",))
            if not self._optimizer_follows and self._mode is not None:
                self._mode.counting = False

    def optimizer_begins(self) -> None:
        self.backward_done()
        if self._mode is not None:
            self._mode.counting = True
        self.mark(("optimizer",))

    def watch_end_of_backward(self, outputs: Any) -> None:
        """Marks the end of the backward that reaches `outputs` (a callback of autograd's engine,
        queued when the gradient of the first of them that takes one is computed)."""
        found = next((t for t in outputs if t.requires_grad), None)
        if found is None:
            return

        def queue(grad: torch.Tensor) -> None:
            torch.autograd.Variable._execution_engine.queue_callback(self.backward_done)

        found.register_hook(queue)

    def watch_backward(self, call: int, inputs: Any, outputs: Any) -> None:
        """Hooks that mark call `call`'s backward: on its first output and first input that
        take a gradient."""
        for tensors, inside in ((outputs, True), (inputs, False)):
            found = next((t for t in tensors if t.requires_grad), None)
            if found is not None:
                found.register_hook(self._hook(call, inside))

    def _hook(self, call: int, inside: bool) -> Any:
        def marked(grad: torch.Tensor) -> None:
            self.backward_mark(call, inside)

        return marked

    @contextlib.contextmanager
    def uncounted(self) -> Iterator[None]:
        """On the CPU, what is made inside is not the step's (remat's own copies on the host)."""
        if self._mode is None:
            yield
            return
        counting, self._mode.counting = self._mode.counting, False
        try:
            yield
        finally:
            self._mode.counting = counting

    def kept_count(self) -> _LiveStorages | None:
        """The CPU count, to which a block's measured region hands what it saves
        (keep_counting) instead of holding it, and ends with end_kept(): the part's peak is the
        region's and its kept peak the block's held whole. None on CUDA, whose allocator can
        give one peak only: there the measured region holds its saves to its end, and a forward
        part's peak is the block's held whole (a region's is planned no lower)."""
        if self._mode is None or not self.open:
            return None
        self._let_go = True
        return self._mode

    def kept_part_peak_bytes(self) -> int:
        """The part's peak so far had the block under way held what it saved."""
        if self._mode is None:
            return self.part_peak_bytes()
        return max(self._mode.peak, self._mode.kept_peak)

    @contextlib.contextmanager
    def remats_own(self) -> Iterator[None]:
        """Runs inside that are remat's own (timing the copy bandwidth on 64 MiB buffers):
        on the CPU not counted; on CUDA, whose allocator counts every byte, aside."""
        with self.uncounted() if self._mode is not None else self.aside():
            yield

    def held_bytes(self) -> int:
        """What the step holds now."""
        if self._allocator:
            return torch.cuda.memory_allocated(self.device)
        assert self._mode is not None
        return self._mode.current

    def part_peak_bytes(self) -> int:
        """The peak of the part under way, so far."""
        if self._allocator:
            return max(torch.cuda.max_memory_allocated(self.device), self._part_floor)
        assert self._mode is not None
        return self._mode.peak

    def room_bytes(self) -> int | None:
        """What the budget leaves beyond what the step holds now (None: no budget)."""
        if self.budget is None or not self.open:
            return None
        return self.budget - self.held_bytes()

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Runs inside that only measure: their peak is the step's, not the part's (see the
        module's docstring). What they leave behind counts in the part from then on."""
        if not self.open:
            yield
            return
        if self._allocator:
            before = reset_cuda_peak(self.device)
        else:
            assert self._mode is not None
            before, kept_before = self._mode.peak, self._mode.kept_peak
        try:
            yield
        finally:
            if self._allocator:
                peak = reset_cuda_peak(self.device)
                after = torch.cuda.memory_allocated(self.device)
                self._part_floor = max(self._part_floor, before, after)
            else:
                assert self._mode is not None
                peak, after = self._mode.peak, self._mode.current
                self._mode.peak = max(before, after)
                self._mode.kept_peak = max(kept_before, after + self._mode.kept_bytes)
            self._aside_bytes = max(self._aside_bytes, peak)

    def leave(self) -> None:
        """The step ends here: its last part closes and nothing after it counts."""
        if self.open:
            self._close_part()
            self.open = False
            if self._mode is not None:
                self._finalizer.detach()
                _remove(self._mode, self._below)

    def finish(self) -> StepRecord:
        self.leave()
        parts = self._parts
        if all(part != ("optimizer",) for part, _ in parts):
            parts = [(part, peak) for part, peak in parts if part != ("done",)]
        saw_inductor = self._mode is not None and self._mode.saw_inductor
        return StepRecord(
            self.start_bytes,
            tuple(parts),
            saw_inductor,
            self._aside_bytes,
            tuple(self._kept_parts),
            self._let_go,
        )


def _entries(mode: Any) -> int:
    """How deep a TorchDispatchMode is entered (its __exit__ pops one of these flags)."""
    return len(getattr(mode, "old_dispatch_mode_flags", ()))


def _remove(mode: Any, below: list[tuple[Any, int]]) -> None:
    """Takes `mode` off the dispatch-mode stack, leaving the others in their order. A mode that
    was under it and has exited since popped `mode` in its place (a mode's exit pops the top):
    that mode is the one taken off."""
    mode.unwatch()
    stack = _get_current_dispatch_mode_stack()
    if not any(m is mode for m in stack):
        exited = [m for m, entries in below if _entries(m) < entries]
        mode = next((m for m in reversed(stack) if any(m is e for e in exited)), None)
        if mode is None:
            return
    above = []
    while (top := _pop_mode()) is not mode:
        above.append(top)
    for other in reversed(above):
        _push_mode(other)
