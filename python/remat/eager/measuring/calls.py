"""One call of a layer, measured: the storages autograd saves inside it, its outputs, its time.

Two ways, one CallWatch:

- measure_call runs the call on detached copies of its inputs, so measuring holds one call's
  activations at a time; saved tensors are noted and dropped, never back-propagated;
- auto_checkpoint's first step measures inside the checkpoint region that trains the block
  (CallWatch around the region's forward): saved tensors are noted and handed on to the
  checkpoint's own hooks, so the block runs once in that forward, not twice.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from ...saved_memory import (
    is_parameter_cast,
    is_persistent,
    storage_key,
    storage_of,
    top_save_hooks,
)
from .._runtime import _detached, _modules_of, _storage_bytes, _synchronize, _tensors, clock
from ..generators import GeneratorWatch
from ..mutation import argument_states, check_unchanged


class _NotKept:
    """What measuring stores in place of a saved tensor. Keeping the tensor itself would make a
    cycle (an output saved by its own grad_fn) that is never freed: measuring leaked one layer's
    activations per layer that way. Measured graphs are never back-propagated."""

    __slots__ = ()


def _never_unpacked(_: Any) -> torch.Tensor:
    raise RuntimeError("remat: a graph built while measuring was back-propagated")


def _not_kept(_: torch.Tensor) -> _NotKept:
    return _NotKept()


def saves_dropped() -> Any:
    """Saved-tensor hooks for a timing run that is never back-propagated: autograd still
    records the graph (whose cost is part of the forward's time) but keeps none of the tensors
    it saves, which would otherwise outlive the run in a cycle (see _NotKept)."""
    return torch.autograd.graph.saved_tensors_hooks(_not_kept, _never_unpacked)


def keep_versioned(tensor: torch.Tensor) -> tuple[torch.Tensor, int]:
    """A pack hook that keeps the tensor itself, detached (sharing its version counter; the
    tensor would make an output saved by its own node a reference cycle), with its version."""
    return tensor.detach(), tensor._version


def unpack_versioned(packed: tuple[torch.Tensor, int]) -> torch.Tensor:
    """keep_versioned's unpack hook: autograd's own check that a saved tensor was not changed
    in place, which any saved-tensor hook turns off."""
    tensor, version = packed
    if tensor._version != version:
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: a {tuple(tensor.shape)} tensor is at version "
            f"{tensor._version}; expected version {version} instead (checked by remat's "
            "saved-tensor hooks)"
        )
    return tensor


def saves_kept_apart() -> Any:
    """Saved-tensor hooks for a measuring run that is back-propagated (a timed plan, a timed
    region): autograd's saves are kept as it keeps them, and the user's hooks around the step
    (save_on_cpu, a meter) never see a run that plain training does not make."""
    return torch.autograd.graph.saved_tensors_hooks(keep_versioned, unpack_versioned)


class SaveRecorder:
    """While active, records the storages autograd saves (activations: not those in `excluded`,
    nor parameters), calling `on_save` at every save. Saved tensors are held until the block
    ends, as they would be for backward: freed earlier, their memory could be reused and two of
    them share one storage key. They are let go on exit: the hooks live in the graph and reach
    this object, a reference cycle through C++ that Python's collector cannot see.

    `hand_on`: each save goes on to the saved-tensor hooks active on entry (a checkpoint's,
    whose forward this runs in), which keep what backward needs. Otherwise the graph is never
    back-propagated and nothing is kept for it (see _NotKept).

    `kept_count` (with hand_on; a step's CPU count, StepSegments.kept_count): the saves are
    not held, so the region's forward holds what it will hold in training, and the count
    keeps their bytes in its kept peak instead. A saved storage that dies leaves its address
    to later tensors: its key is renamed (see _bury), so that keys stay one per storage."""

    def __init__(
        self,
        excluded: set[tuple[str, int, int]],
        on_save: Callable[[], None] | None = None,
        hand_on: bool = False,
        kept_count: Any = None,
    ) -> None:
        self.keys: set[tuple[str, int, int]] = set()
        self.casts: set[tuple[str, int, int]] = set()  # of parameters (is_parameter_cast)
        self._excluded = excluded
        self._on_save = on_save
        self._hand_on = hand_on
        self._kept_count = kept_count if hand_on else None
        self._alive: list[torch.Tensor] = []
        self._saved: dict[tuple[str, int, int], StorageWeakRef] = {}  # with kept_count
        self._buried = 0
        self._hooks: Any = None
        self.pack: Any = None  # the pack hook pushed, while active

    def _note(self, tensor: torch.Tensor) -> None:
        if self._on_save is not None:
            self._on_save()
        if is_persistent(tensor, self._excluded):
            return
        key = storage_key(tensor)
        if self._kept_count is None:
            self._alive.append(tensor)
        else:
            known = self._saved.get(key)
            if known is not None and known.expired():
                self._bury(key)
            if key not in self._saved:
                storage = storage_of(tensor)
                self._saved[key] = StorageWeakRef(storage)
                self._kept_count.keep_counting(storage)
        self.keys.add(key)
        if is_parameter_cast(tensor):
            self.casts.add(key)

    def _bury(self, key: tuple[str, int, int]) -> None:
        """The storage saved under `key` has died: its key becomes one no live storage has."""
        self._buried += 1
        buried = (f"{key[0]} (freed {self._buried})", key[1], key[2])
        for keys in (self.keys, self.casts):
            if key in keys:
                keys.discard(key)
                keys.add(buried)
        del self._saved[key]

    def _pack(self, tensor: torch.Tensor) -> Any:
        self._note(tensor)
        return _NotKept()

    def _hooks_on_entry(self) -> Any:
        if not self._hand_on:
            self.pack = self._pack
            return torch.autograd.graph.saved_tensors_hooks(self.pack, _never_unpacked)
        outer = top_save_hooks()
        if outer is None:  # autograd keeps the tensors itself
            outer_pack, outer_unpack = (lambda t: t), (lambda t: t)
        else:
            outer_pack, outer_unpack = outer

        def pack(tensor: torch.Tensor) -> Any:
            self._note(tensor)
            return outer_pack(tensor)

        self.pack = pack
        return torch.autograd.graph.saved_tensors_hooks(pack, outer_unpack)

    def __enter__(self) -> "SaveRecorder":
        self._hooks = self._hooks_on_entry()
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)
        self._hooks = None
        self._alive.clear()
        if self._kept_count is not None:
            for key in [k for k, storage in self._saved.items() if storage.expired()]:
                self._bury(key)
            self._saved.clear()
            self._kept_count.end_kept()
        # The hand-on pack closes over this object and the checkpoint's pack hook, which holds
        # its frame: a reference cycle that kept every measured region's saved inputs alive
        # until Python's collector ran, not until the block's backward freed them.
        self.pack = None


@dataclass(frozen=True)
class CallMeasurement:
    """One call of a layer, measured: storages of its tensor inputs, of what autograd saved inside
    it and of its outputs (activations only), and its forward time with autograd recording."""

    input_keys: frozenset[tuple[str, int, int]]
    saved_keys: frozenset[tuple[str, int, int]]
    output_keys: frozenset[tuple[str, int, int]]
    forward_seconds: float
    output: Any  # the outputs, detached
    dispatched: int = 0  # ops its first run dispatched
    cast_keys: frozenset[tuple[str, int, int]] = frozenset()  # saved casts of parameters


def _changes_its_input(function: Callable[..., Any]) -> ValueError:
    return ValueError(
        f"remat: {layer_name(function)} changes an input in place (as x.mul_(0.5) or x += ...): a "
        "checkpoint region re-runs a layer from its inputs as they were, so it cannot hold this "
        "layer, and measuring (which runs it more than once) would change the input again. "
        "Write the change out of place (x = x * 0.5), or leave this layer out of the blocks"
    )


def _reentrant_checkpoint_between(outputs: Any, inputs: list[torch.Tensor]) -> bool:
    """Whether the graph from a call's outputs back to its inputs holds a reentrant
    torch.utils.checkpoint (which runs its forward under no_grad: nothing it holds is saved)."""
    stop = {t.grad_fn for t in inputs if t.grad_fn is not None}
    todo = [t.grad_fn for t in _tensors(outputs) if t.grad_fn is not None]
    seen: set[Any] = set()
    while todo and len(seen) < 100_000:
        node = todo.pop()
        if node in seen or node in stop:
            continue
        seen.add(node)
        if type(node).__name__ == "CheckpointFunctionBackward":
            return True
        todo.extend(n for n, _ in node.next_functions if n is not None)
    return False


def _checkpoints_inside(name: str) -> RuntimeError:
    return RuntimeError(
        f"remat: {name} runs torch.utils.checkpoint inside its forward (Hugging Face's "
        "gradient_checkpointing_enable(), or the model's own code). What that checkpoint saves "
        "and re-runs in backward is hidden from remat's measurement, so no plan could keep the "
        "budget. Turn the model's own checkpointing off (on a Hugging Face model "
        "model.activation_checkpointing_disable(), gradient_checkpointing_disable() before "
        "transformers 5) and let remat choose, or pass blocks= modules that run inside "
        "those checkpoints"
    )


class CallWatch:
    """Measures one call of a layer while it runs: enter it around the call, then
    `measurement(out, seconds)`. Records what autograd saves (see SaveRecorder; `hand_on` for a
    call inside a checkpoint's forward) and which generators of the model's own its ops draw
    from (GeneratorWatch, or `recorder`: a dispatch mode that notes them itself, and whose
    note_save() is called at every save). Raises, naming the layer `name`, when the call
    changed a tensor input in place or a Python argument."""

    def __init__(
        self,
        function: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        excluded: set[tuple[str, int, int]],
        name: str | None = None,
        recorder: Any = None,
        hand_on: bool = False,
        kept_count: Any = None,
    ) -> None:
        self._function, self._args, self._kwargs = function, args, kwargs
        self._excluded = excluded
        self._name = name or layer_name(function)
        self._states = argument_states(args, kwargs)
        self._versions = [(t, t._version) for t in _tensors((args, kwargs))]
        self._watch = GeneratorWatch(_modules_of(function)) if recorder is None else recorder
        on_save = None if recorder is None else recorder.note_save
        self._saved = SaveRecorder(excluded, on_save, hand_on, kept_count)
        self._grad = torch.enable_grad()

    def __enter__(self) -> "CallWatch":
        self._grad.__enter__()
        self._saved.__enter__()
        self._watch.own_pack = self._saved.pack
        self._watch.__enter__()
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        try:
            self._watch.__exit__(kind, error, traceback)
        finally:
            self._watch.own_pack = None  # (see SaveRecorder.__exit__)
            self._saved.__exit__(kind, error, traceback)
            self._grad.__exit__(kind, error, traceback)
        # Measured inputs are leaves: autograd refuses in-place ops on them.
        if isinstance(error, RuntimeError) and "leaf Variable that requires grad" in str(error):
            raise _changes_its_input(self._function) from error

    def _activations(self, value: Any) -> frozenset[tuple[str, int, int]]:
        tensors = [t for t in _tensors(value) if not is_persistent(t, self._excluded)]
        keys, _ = _storage_bytes(tensors)
        return frozenset(keys)

    def measurement(self, out: Any, seconds: float) -> CallMeasurement:
        """What the call saved and returned (`out`, kept by the caller), taking `seconds`."""
        if any(t._version != v for t, v in self._versions):
            raise _changes_its_input(self._function)
        if self._watch.inner_checkpoint or _reentrant_checkpoint_between(
            out, [t for t, _ in self._versions]
        ):
            raise _checkpoints_inside(self._name)
        check_unchanged(self._name, self._states, argument_states(self._args, self._kwargs))
        return CallMeasurement(
            self._activations((self._args, self._kwargs)),
            frozenset(self._saved.keys),
            self._activations(out),
            seconds,
            None,
            self._watch.dispatched,
            frozenset(self._saved.casts),
        )


def measure_call(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    excluded: set[tuple[str, int, int]],
    repeats: int = 1,
    name: str | None = None,
    recorder: Any = None,
) -> CallMeasurement:
    """Runs `function(*args, **kwargs)` on detached copies of its inputs: once recording which
    storages autograd saves (timed too), then `repeats` more times, timed. The forward time is
    the least of the runs. Holds one call's activations at a time. Raises ChangesItsArgument
    (naming the layer `name`) after the first run when it changed a Python argument, before a
    repeat would change it again. `recorder`: a dispatch mode that watches the first run in
    place of GeneratorWatch (see CallWatch; ops.measure_with_ops records the ops in the same
    run)."""
    args, kwargs = _detached(args), _detached(kwargs)
    now = clock()
    _synchronize((args, kwargs))
    start = now()
    # The first run also learns which generators of the model's own the call draws from (the
    # watch's per-op cost is left out of the time: the least of the runs counts).
    with CallWatch(function, args, kwargs, excluded, name, recorder) as watch:
        out = function(*args, **kwargs)
    _synchronize(out)
    measured = watch.measurement(out, now() - start)
    seconds = [measured.forward_seconds]
    out = _detached(out)
    for _ in range(repeats):
        start = now()
        with torch.enable_grad(), saves_dropped():
            again = function(*args, **kwargs)
        _synchronize(again)
        seconds.append(now() - start)
        del again
    return replace(measured, forward_seconds=min(seconds), output=out)


def layer_name(function: Callable[..., Any]) -> str:
    """The layer's name in a plan's table: its module's class where there is one (also inside
    a functools.partial, as auto_checkpoint wraps blocks), else the function's name."""
    modules = _modules_of(function)
    if modules:
        return type(modules[0]).__name__
    if isinstance(function, functools.partial):
        return layer_name(function.func)
    return getattr(function, "__name__", type(function).__name__)
