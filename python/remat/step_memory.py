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

A storage counts once however many tensors view it. Storages created outside torch's
dispatcher while the meter is active (a tensor made from a NumPy array) are not seen.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storages(value: Any) -> list[torch.UntypedStorage]:
    found = []
    for item in tree_flatten(value)[0]:
        if isinstance(item, torch.Tensor):
            try:
                found.append(item.untyped_storage())
            except (RuntimeError, NotImplementedError):  # a tensor without storage
                continue
    return found


class _LiveStorages(TorchDispatchMode):
    """Counts the bytes of live storages on one device type, from their creation (or the
    meter's entry) to their release."""

    def __init__(self, device_type: str) -> None:
        super().__init__()
        self._device_type = device_type
        self._alive: dict[int, tuple[int, Any]] = {}
        self.current = 0
        self.peak = 0
        self.counting = True  # False: passes ops through (releases are still counted)

    def hold(self, storage: torch.UntypedStorage) -> None:
        if storage.device.type != self._device_type:
            return
        key = storage._cdata
        if key in self._alive:
            return
        size = storage.nbytes()
        reference = weakref.ref(storage, lambda _, key=key: self._release(key))
        self._alive[key] = (size, reference)
        self.current += size
        self.peak = max(self.peak, self.current)

    def hold_all(self, objects: tuple[Any, ...]) -> None:
        """Holds the storages of what a step holds before it starts (see _held_tensors)."""
        for tensor in _held_tensors(objects):
            for storage in _storages(tensor):
                self.hold(storage)

    def _release(self, key: int) -> None:
        entry = self._alive.pop(key, None)
        if entry is not None:
            self.current -= entry[0]

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.counting:
            for storage in _storages(out):
                self.hold(storage)
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

    @property
    def current_bytes(self) -> int:
        """The bytes held now (on the CPU, of what the meter has seen)."""
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        return 0 if self._mode is None else self._mode.current
