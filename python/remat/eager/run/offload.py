"""Offloaded block calls: what a block saves for backward is copied to host memory after its
forward and copied back before its backward (the model: remat/offload.hpp, docs/offload.md).

- Saved tensors are grouped by storage. A storage is copied once, whole, and each saved tensor
  is rebuilt on the copy with its own dtype, size, strides and offset: backward reads the same
  bytes in the same layout, so gradients are bitwise those of keeping them.
- The call's tensor inputs and outputs stay on the device (the previous block's output and the
  next block's input are held anyway), as do parameters and buffers.
- On CUDA the copy out runs on a side stream once the forward's kernels are queued; the device
  storage is let go at the end of the next block's forward, after the compute stream has waited
  for the copy. The copy in runs on another side stream as soon as the gradient reaches the next
  block's output (prefetched one block ahead); the compute stream waits for it when backward
  first unpacks a tensor of the storage.
- On other devices (the CPU) the same steps run with synchronous copies, so what is let go and
  when, and the gradients, are tested without a GPU.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

import torch

from ...saved_memory import hold_for_meters, is_parameter_cast, is_persistent, storage_key
from ...units import format_bytes
from .._runtime import _tensors

Key = tuple[str, int, int]

_STREAMS: dict[torch.device, tuple[Any, Any]] = {}


def _copy_streams(device: torch.device) -> tuple[Any, Any] | None:
    """The side streams (out, in) of a CUDA device, made once per process; None elsewhere."""
    if device.type != "cuda":
        return None
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    found = _STREAMS.get(device)
    if found is None:
        found = _STREAMS[device] = (torch.cuda.Stream(device), torch.cuda.Stream(device))
    return found


def _movable(tensor: torch.Tensor) -> bool:
    """Whether a tensor can be rebuilt from its storage's bytes: a plain dense tensor."""
    return (
        type(tensor) in (torch.Tensor, torch.nn.Parameter)
        and tensor.layout == torch.strided
        and not tensor.is_conj()
        and not tensor.is_neg()
        and not tensor.is_quantized
        and not tensor.is_nested
        and tensor.device.type != "meta"
    )


class _Resident:
    """A storage on the device, counted by the active SavedTensorMeters while this lives."""

    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        hold_for_meters(self, tensor)


def _storage_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A uint8 tensor over the whole storage of `tensor`."""
    return torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())


class _Stored:
    """One storage a call saved: on the device; then, when moved, on the host until it is
    copied back."""

    __slots__ = (
        "device",
        "resident",
        "moved",
        "host",
        "back",
        "streams",
        "out_event",
        "in_event",
        "__weakref__",
    )

    def __init__(self, tensor: torch.Tensor) -> None:
        self.device = tensor.device
        self.resident: _Resident | None = _Resident(tensor.detach())
        self.moved = False
        self.host: torch.Tensor | None = None
        self.back: _Resident | None = None  # the copy back on the device
        self.streams = _copy_streams(tensor.device)
        self.out_event: Any = None
        self.in_event: Any = None

    def copy_out(self) -> None:
        assert self.resident is not None
        source = _storage_bytes(self.resident.tensor)
        self.moved = True
        if self.streams is None:
            self.host = source.to("cpu", copy=True)
            return
        out_stream, _ = self.streams
        host = torch.empty(source.numel(), dtype=torch.uint8, pin_memory=True)
        out_stream.wait_stream(torch.cuda.current_stream(source.device))
        with torch.cuda.stream(out_stream):
            host.copy_(source, non_blocking=True)
            self.out_event = torch.cuda.Event()
            self.out_event.record(out_stream)
        self.host = host

    @property
    def resident_bytes(self) -> int:
        return 0 if self.resident is None else self.resident.tensor.untyped_storage().nbytes()

    def release(self) -> None:
        """Lets the device storage go (the compute stream first waits for the copy out)."""
        if not self.moved or self.resident is None:
            return
        if self.out_event is not None:
            torch.cuda.current_stream(self.device).wait_event(self.out_event)
        self.resident = None

    def prefetch(self) -> None:
        """Starts the copy back (once)."""
        if not self.moved or self.resident is not None or self.back is not None:
            return
        host = self.host
        assert host is not None
        if self.streams is None:
            self.back = _Resident(host.to(self.device, copy=True))
            self.host = None
            return
        _, in_stream = self.streams
        in_stream.wait_event(self.out_event)
        with torch.cuda.stream(in_stream):
            buffer = torch.empty(host.numel(), dtype=torch.uint8, device=self.device)
            buffer.copy_(host, non_blocking=True)
            self.in_event = torch.cuda.Event()
            self.in_event.record(in_stream)
        self.back = _Resident(buffer)
        # The host allocator keeps the pinned block until the copy that reads it is done.
        self.host = None

    def on_device(self) -> torch.Tensor:
        """The storage's bytes on the device, for backward (copied back now if not prefetched;
        the current stream waits for the copy)."""
        if self.resident is not None:
            return self.resident.tensor
        self.prefetch()
        assert self.back is not None
        if self.in_event is not None:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(self.in_event)
            self.back.tensor.record_stream(stream)  # allocated on the side stream
            self.in_event = None
        return self.back.tensor


class _Packed:
    """What autograd keeps for one saved tensor of an offloaded call."""

    __slots__ = ("stored", "alias", "version", "dtype", "size", "stride", "offset", "changed")

    def __init__(self, stored: _Stored, tensor: torch.Tensor) -> None:
        self.stored = stored
        self.alias: torch.Tensor | None = tensor.detach()  # shares the version counter
        self.version = tensor._version
        self.dtype, self.size, self.stride = tensor.dtype, tensor.size(), tensor.stride()
        self.offset = tensor.storage_offset()
        self.changed = False


def _held_elsewhere(stored: _Stored, packed: list[_Packed]) -> bool:
    """Whether a moved storage is referenced by more tensors than offloading's own."""
    use_count = getattr(torch._C, "_storage_Use_Count", None)
    if stored.resident is None or use_count is None:
        return False
    storage = stored.resident.tensor.untyped_storage()
    own = 1 + sum(1 for p in packed if p.stored is stored and p.alias is not None)
    return use_count(storage._cdata) > own + 1  # + 1: `storage` itself


def _unpack(packed: Any) -> torch.Tensor:
    if isinstance(packed, torch.Tensor):
        return packed
    alias = packed.alias
    if packed.changed or (alias is not None and alias._version != packed.version):
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: a {tuple(packed.size)} tensor saved by an offloaded block was "
            f"changed in place after it was saved (checked by remat's offloading, which copies "
            "saved tensors to host memory)"
        )
    if alias is not None:  # kept on the device
        return alias
    storage = packed.stored.on_device()
    return torch.empty(0, dtype=packed.dtype, device=storage.device).set_(
        storage.untyped_storage(), packed.offset, packed.size, packed.stride
    )


class OffloadedCall:
    """One block call whose saved activations go to host memory. Run the block under hooks(),
    then finish(outputs); release() once the next block's forward has run; prefetch_at(outputs)
    on that block's outputs."""

    def __init__(
        self,
        name: str,
        kept: Any,
        excluded: set[Key],
        warn: Callable[[str], None],
        only: set[Key] | None = None,
    ) -> None:
        """`kept`: what stays on the device whatever it saves (the call's inputs); `only`: when
        given, the storages that may move (a region's input), all others staying."""
        self._name = name
        self._excluded = excluded
        self._warn = warn
        self._kept = {storage_key(t) for t in _tensors(kept)}
        self._only = only
        self._stored: dict[Key, _Stored] = {}
        self._packed: list[_Packed] = []
        self._moved: list[_Stored] = []
        self._unmovable: list[str] = []

    def hooks(self) -> Any:
        return torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)

    def _pack(self, tensor: torch.Tensor) -> Any:
        if is_persistent(tensor, self._excluded):
            return tensor
        key = storage_key(tensor)
        stored = self._stored.get(key)
        if stored is None:
            stored = self._stored[key] = _Stored(tensor)
        if is_parameter_cast(tensor):  # autocast's cache holds it: moving it frees nothing
            self._kept.add(key)
        elif not _movable(tensor):
            self._kept.add(key)
            self._unmovable.append(f"a {type(tensor).__name__} of {format_bytes(key[2])}")
        packed = _Packed(stored, tensor)
        self._packed.append(packed)
        return packed

    def finish(self, outputs: Any) -> None:
        """The block returned `outputs`: copies out every storage it saved but the kept ones,
        its outputs' and those that cannot be rebuilt from bytes."""
        kept = self._kept | {storage_key(t) for t in _tensors(outputs)}
        self._check_versions()
        for key, stored in self._stored.items():
            if key not in kept and (self._only is None or key in self._only):
                stored.copy_out()
                self._moved.append(stored)
        self._packed = [packed for packed in self._packed if packed.stored.moved]
        if self._unmovable:
            self._warn(
                f"{self._name} is offloaded, but it saves tensors that cannot be copied to host "
                f"memory as bytes ({', '.join(sorted(set(self._unmovable)))}): they stay on the "
                "device, above the plan's prediction by up to their size"
            )

    def _check_versions(self) -> None:
        for packed in self._packed:
            alias = packed.alias
            packed.changed |= alias is not None and alias._version != packed.version

    def release(self) -> None:
        """The next block's forward has run: the moved storages leave the device (a saved
        tensor changed in place since it was saved raises when backward unpacks it)."""
        self._check_versions()
        held = [stored for stored in self._moved if _held_elsewhere(stored, self._packed)]
        size = sum(stored.resident_bytes for stored in held)
        for packed in self._packed:
            # A storage held elsewhere stays on the device anyway, and something may still
            # change it in place: its saved tensors keep their aliases, whose versions unpacking
            # checks. The others have no reference left but offloading's.
            if packed.stored not in held:
                packed.alias = None
        self._packed = []
        for stored in self._moved:
            stored.release()
        if held:
            self._warn(
                f"{self._name}: {format_bytes(size)} it sends to host memory is still referenced "
                "elsewhere (by the model's code, another block's saved tensors or a cache), so "
                "offloading it frees no device memory and the step holds more than the plan "
                "predicts"
            )

    def prefetch_at(self, outputs: Any) -> None:
        """Copies the moved storages back as soon as a gradient reaches one of `outputs` (the
        next block's), one block ahead of their use. Without one, backward copies them back
        when it first needs them."""
        stores = [weakref.ref(s) for s in self._moved]
        if not stores:
            return
        fired = [False]

        def prefetch(_: torch.Tensor) -> None:
            if not fired[0]:
                fired[0] = True
                for ref in stores:
                    stored = ref()
                    if stored is not None:
                        stored.prefetch()

        for tensor in _tensors(outputs):
            if tensor.requires_grad and tensor.grad_fn is not None:
                tensor.register_hook(prefetch)
