"""The peak of every byte a training step holds on a device: parameters, buffers, gradients,
optimizer state, activations, the backward's working set and temporaries.

    with StepMemoryMeter(model, optimizer, batch) as meter:
        loss_fn(model(batch)).backward()
        optimizer.step()
    meter.peak_bytes

On CUDA it is what ``torch.cuda.max_memory_allocated()`` reports over the block:
every allocation of the process on that device counts. (remat's own measuring of a step's parts
resets that statistic; the meter keeps the peaks it reset.) Elsewhere (the CPU) no allocator keeps
such a figure, so the meter counts live tensor storages: those of the objects it is given on
entry (modules' parameters, buffers and gradients, optimizers' state, tensors), and every
storage an op creates while it is active (a dispatch mode sees each op's outputs, in forward,
backward and the optimizer step alike), each until it is freed. That is the count torch's
``MemTracker`` keeps; a test checks that the two agree.

A storage counts once however many tensors view it. A DTensor counts by its local shard, and ops
on DTensors by the local ops they run. A storage resized in place (FSDP2 frees and re-gathers a
module's parameters so) counts at its new size: ``UntypedStorage.resize_``, which no dispatch
mode sees, is wrapped while a meter is active. Storages created outside torch's dispatcher while
the meter is active (a tensor made from a NumPy array) are not seen.

torch.compile'd code runs compiled under a meter, and its ops count as they reach the dispatcher.
Inductor's generated code allocates its CPU buffers outside the dispatcher: while a meter is
active, each Inductor graph it runs allocates them through the dispatcher instead
(inductor_buffers.py). Where that cannot be done (a C++ wrapper), the meter says its count may
fall short (``saw_inductor``).
"""

from __future__ import annotations

import copy
import functools
import sys
import threading
import warnings
import weakref
from typing import Any, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .inductor_buffers import UNSEEN as INDUCTOR_UNSEEN
from .inductor_buffers import buffers_dispatched
from .saved_memory import estimating_now, storage_of


def _storages(value: Any) -> list[tuple[torch.UntypedStorage, str]]:
    """The storages of the tensors in `value`, each with the type of the device its tensor is
    on: a fake tensor's storage is on "meta", its tensor on the device it stands for."""
    found = []
    for item in tree_flatten(value)[0]:
        if isinstance(item, torch.Tensor):
            try:
                storage = storage_of(item)  # a DTensor's: its local shard's
            except (RuntimeError, NotImplementedError):  # a tensor without storage
                continue
            found.append((storage, item.device.type))
    return found


def _is_dtensor_type(kind: type) -> bool:
    # Looked up where loaded: no DTensor exists before torch.distributed.tensor is imported.
    api = sys.modules.get("torch.distributed.tensor._api")
    return api is not None and issubclass(kind, api.DTensor)


# The counts active now, told of every in-place storage resize and every Inductor graph run
# while any is: neither reaches a dispatch mode.
_watch_lock = threading.Lock()
_watchers: list["_LiveStorages"] = []
_original_resize = torch.UntypedStorage.resize_
_INDUCTOR_GRAPHS = "torch._inductor.output_code"  # CompiledFxGraph: one compiled graph's call
_wrapped_graphs: tuple[Any, Any] | None = None  # (CompiledFxGraph, its own __call__) while wrapped


def _watched_resize(storage: torch.UntypedStorage, size: int) -> Any:
    result = _original_resize(storage, size)
    for watcher in list(_watchers):
        watcher.resized(storage)
    return result


def _watched_graph_call(graph: Any, *args: Any, **kwargs: Any) -> Any:
    assert _wrapped_graphs is not None
    call = _wrapped_graphs[1]
    counts = [watcher for watcher in _watchers if watcher.counting]
    if not counts:
        return call(graph, *args, **kwargs)
    with buffers_dispatched(graph) as seen:
        if not seen:
            for watcher in counts:
                watcher.saw_inductor = True
        return call(graph, *args, **kwargs)


def _patch_watched(on: bool) -> None:
    """Wraps (or restores) the calls the counts are told of. Inductor's graphs are watched
    where torch.compile has loaded them (remat.torch does)."""
    global _wrapped_graphs
    torch.UntypedStorage.resize_ = _watched_resize if on else _original_resize  # type: ignore[method-assign,assignment]
    compiled = getattr(sys.modules.get(_INDUCTOR_GRAPHS), "CompiledFxGraph", None)
    if on and compiled is not None:
        _wrapped_graphs = (compiled, compiled.__call__)
        compiled.__call__ = _watched_graph_call
    elif not on and _wrapped_graphs is not None:
        _wrapped_graphs[0].__call__ = _wrapped_graphs[1]
        _wrapped_graphs = None


# CUDA's caching allocator hands out memory in multiples of this many bytes.
_CUDA_BLOCK = 512


def allocated_size(nbytes: int, device_type: str) -> int:
    """What a storage of `nbytes` takes on `device_type`: on CUDA, rounded up to the caching
    allocator's blocks (counted so only where storages are counted: an estimated step)."""
    block = _CUDA_BLOCK if device_type == "cuda" else 1
    return -(-nbytes // block) * block


class _LiveStorages(TorchDispatchMode):
    """Counts the bytes of live storages on one device type, from their creation (or the
    meter's entry) to their release."""

    # torch.compile'd code runs under the count, and AOTAutograd's graphs call higher-order
    # operators (run_and_save_rng_state, for dropout): each runs below the count, which
    # counts its outputs as any op's.
    supports_higher_order_operators = True

    def __init__(self, device_type: str) -> None:
        super().__init__()
        self._device_type = device_type
        self._alive: dict[int, tuple[int, Any]] = {}
        self.current = 0
        self.peak = 0
        # Storages that count on after their release, until end_kept(): what a block saved
        # for backward, which a checkpoint region's forward lets go as soon as the block's code
        # drops it. `kept_peak` is the peak with them counted, as the block kept would hold.
        self._kept: set[int] = set()
        self.kept_bytes = 0
        self.kept_peak = 0
        self.counting = True  # False: passes ops through (releases are still counted)
        self.saw_inductor = False  # it ran an Inductor graph whose buffers it could not see

    def watch(self) -> None:
        """Called when the count becomes active: in-place resizes and Inductor graph runs
        reach it from then on."""
        with _watch_lock:
            if not _watchers:
                _patch_watched(True)
            _watchers.append(self)

    def unwatch(self) -> None:
        with _watch_lock:
            if self in _watchers:
                _watchers.remove(self)
                if not _watchers:
                    _patch_watched(False)

    def __enter__(self) -> "_LiveStorages":
        self.watch()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self.unwatch()

    def resized(self, storage: torch.UntypedStorage) -> None:
        """`storage` now has its new size: a counted storage counts at it; one that grows
        while the count runs is new memory of the step."""
        entry = self._alive.get(storage._cdata)
        if entry is None:
            if self.counting and storage.nbytes() > 0:
                self.hold(storage, storage.device.type)
            return
        size = allocated_size(storage.nbytes(), self._device_type)
        self._alive[storage._cdata] = (size, entry[1])
        self.current += size - entry[0]
        self.peak = max(self.peak, self.current)
        self.kept_peak = max(self.kept_peak, self.current + self.kept_bytes)

    def hold(self, storage: torch.UntypedStorage, device_type: str) -> None:
        if device_type != self._device_type:
            return
        key = storage._cdata
        if key in self._alive:
            return
        size = allocated_size(storage.nbytes(), self._device_type)
        reference = weakref.ref(storage, functools.partial(self._released, key))
        self._alive[key] = (size, reference)
        self.current += size
        self.peak = max(self.peak, self.current)
        self.kept_peak = max(self.kept_peak, self.current + self.kept_bytes)

    def keep_counting(self, storage: torch.UntypedStorage) -> None:
        """`storage`, if counted, counts in `kept_peak` after its release, until end_kept()."""
        if storage._cdata in self._alive:
            self._kept.add(storage._cdata)

    def end_kept(self) -> None:
        self._kept.clear()
        self.kept_bytes = 0

    def reset_peaks(self) -> None:
        """The peaks start again from what is held now."""
        self.peak = self.current
        self.kept_peak = self.current + self.kept_bytes

    def hold_all(self, objects: tuple[Any, ...]) -> None:
        """Holds the storages of what a step holds before it starts (see _held_tensors)."""
        for tensor in _held_tensors(objects):
            for storage, device_type in _storages(tensor):
                self.hold(storage, device_type)

    def ignore_compile_internals(self) -> bool:  # type: ignore[override]
        # torch.compile skips a frame for good when it first meets it under a mode that does
        # not ignore it: a count (a step checked on the CPU) would leave the user's model eager
        # for the rest of training. Compiled code runs, and its ops reach the count as they
        # reach the dispatcher.
        return True

    def _released(self, key: int, _reference: Any) -> None:
        entry = self._alive.pop(key, None)
        if entry is not None:
            self.current -= entry[0]
            if key in self._kept:
                self._kept.discard(key)
                self.kept_bytes += entry[0]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if any(_is_dtensor_type(kind) for kind in types):
            return NotImplemented  # DTensor runs its local ops, which come back here
        out = func(*args, **(kwargs or {}))
        if self.counting:
            for storage, device_type in _storages(out):
                self.hold(storage, device_type)
        return out


def _held_tensors(objects: tuple[Any, ...]) -> list[torch.Tensor]:
    """The tensors a step holds before it starts: modules' parameters, their gradients and
    buffers, optimizers' state and parameters, and tensors in any structure."""
    found: list[torch.Tensor] = []
    for value in objects:
        if isinstance(value, torch.nn.Module):
            for tensor in (*value.parameters(), *value.buffers()):
                found.append(tensor)
                if tensor.grad is not None:
                    found.append(tensor.grad)
        elif isinstance(value, torch.optim.Optimizer):
            for group in value.param_groups:
                for parameter in group["params"]:
                    found.append(parameter)
                    if parameter.grad is not None:
                        found.append(parameter.grad)
            for state in value.state.values():
                found.extend(t for t in tree_flatten(state)[0] if isinstance(t, torch.Tensor))
        else:
            found.extend(t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor))
    return found


def held_bytes(*held: Any, device: torch.device) -> int:
    """The bytes of the distinct storages of `held` (modules, optimizers, tensors) on
    `device`'s type: what a step begins with, on a device whose allocator cannot say (on
    CUDA, each as its allocator rounds it)."""
    seen: dict[int, int] = {}
    for tensor in _held_tensors(held):
        for storage, device_type in _storages(tensor):
            if device_type == device.type:
                seen[storage._cdata] = allocated_size(storage.nbytes(), device_type)
    return sum(seen.values())


def held_at_start(device: torch.device | str, *held: Any) -> int:
    """What a step holds on `device` as it begins: on CUDA, every byte the process has
    allocated there; on the CPU, the distinct storages of `held` (modules, optimizers, tensors;
    None is skipped), since the CPU allocator keeps no count."""
    device = torch.device(device)
    if device.type == "cuda" and not estimating_now():
        return torch.cuda.memory_allocated(device)
    return held_bytes(*[h for h in held if h is not None], device=device)


class HostCopy:
    """Tensors' values and an optimizer's state, copied to host memory (where a measured device
    does not see them), to put back after steps that measure but must not train."""

    def __init__(
        self, tensors: Iterable[torch.Tensor], optimizer: torch.optim.Optimizer | None = None
    ) -> None:
        unique = {id(t): t for t in tensors}
        self._values = [(t, t.detach().to("cpu", copy=True)) for t in unique.values()]
        self._optimizer = optimizer
        self._state = None if optimizer is None else _to_host(optimizer.state_dict())

    def restore(self, again: bool = True) -> None:
        """Puts the values and the state back; `again`: this copy will be restored again (the
        optimizer gets a fresh copy of the state, since load_state_dict keeps tensors already on
        their device), else it hands over its own."""
        with torch.no_grad():
            for tensor, value in self._values:
                tensor.copy_(value)
        if self._optimizer is not None and self._state is not None:
            self._optimizer.load_state_dict(_to_host(self._state) if again else self._state)
            if not self._state["state"]:
                self._optimizer.state.clear()  # older torch keeps the state an empty one adds to


def _to_host(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(v) for v in value)
    return copy.deepcopy(value)


# The CUDA meters now open, by device: remat's own measuring resets the allocator's peak
# statistic (reset_cuda_peak), and hands each open meter the peak it discarded.
_open_cuda_meters: dict[torch.device, list["StepMemoryMeter"]] = {}


def _indexed(device: torch.device) -> torch.device:
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def reset_cuda_peak(device: torch.device) -> int:
    """Reads and resets the allocator's peak statistic on `device`, for remat's measuring of a
    step's parts; open meters keep the peak it discarded. Returns that peak."""
    device = _indexed(device)
    peak = torch.cuda.max_memory_allocated(device)
    for meter in _open_cuda_meters.get(device, ()):
        meter._discarded = max(meter._discarded, peak)
    torch.cuda.reset_peak_memory_stats(device)
    return peak


class StepMemoryMeter:
    """The high-water mark of the bytes a training step holds on `device` while active (see the
    module's docstring): ``peak_bytes``, and ``start_bytes`` at entry.

    Args:
        *held: what the step holds before it starts, counted from entry on the CPU: modules,
            optimizers, tensors (the batch). On CUDA every allocation counts and these are
            not needed.
        device: the device whose memory counts ("cpu", "cuda", "cuda:1"); by default that of
            the first tensor in `held`, else the CPU.

    Example:
        ```python
        with remat.torch.StepMemoryMeter(model, optimizer, x) as meter:
            model(x).sum().backward()
            optimizer.step()
        print(meter.peak_bytes)
        ```
    """

    def __init__(self, *held: Any, device: str | torch.device | None = None) -> None:
        self._held = held
        if device is None:
            tensors = _held_tensors(held)
            device = tensors[0].device if tensors else torch.device("cpu")
        self.device = _indexed(torch.device(device))
        self.peak_bytes = 0
        self.start_bytes = 0
        self._mode: _LiveStorages | None = None
        self.saw_inductor = False  # the CPU count missed an Inductor graph's buffers
        self._discarded = 0  # CUDA: the peak remat's measuring reset while open

    def __enter__(self) -> "StepMemoryMeter":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start_bytes = torch.cuda.memory_allocated(self.device)
            self._discarded = 0
            _open_cuda_meters.setdefault(self.device, []).append(self)
            return self
        self._mode = _LiveStorages(self.device.type)
        self._mode.hold_all(self._held)
        self.start_bytes = self._mode.current
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.peak_bytes = max(torch.cuda.max_memory_allocated(self.device), self._discarded)
            _open_cuda_meters[self.device].remove(self)
            return
        assert self._mode is not None
        self._mode.__exit__(*exc)
        self.peak_bytes = self._mode.peak
        self.saw_inductor = self._mode.saw_inductor
        if self.saw_inductor:
            warnings.warn(
                f"remat.StepMemoryMeter: peak_bytes may be short: {INDUCTOR_UNSEEN}",
                RuntimeWarning,
                stacklevel=2,
            )

    @property
    def current_bytes(self) -> int:
        """The bytes held now (on the CPU, of what the meter has seen)."""
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        return 0 if self._mode is None else self._mode.current
