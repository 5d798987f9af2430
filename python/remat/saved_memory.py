"""Measures the bytes of tensors saved for backward, through torch.utils.checkpoint included.

    with SavedTensorMeter(model) as meter:
        loss = model(x).sum()
        loss.backward()
    meter.peak_bytes

Selective (op-level) regions that remat runs keep a cache of op outputs; the meter counts each
cached output while it is held (remat builds those caches through :func:`sac_storage`).

An outer ``saved_tensors_hooks`` sees what plain layers save and the inputs each checkpoint
region keeps, but not what a region saves while it re-runs in backward: non-reentrant
checkpoint pushes its own hooks there and keeps the re-computed tensors in its frame. The meter
therefore also watches the frames (it wraps ``_CheckpointFrame.__init__`` while it is active, so
that each frame's re-computed tensors are counted from the moment they are stored to the moment
backward releases them).

Bytes are counted per storage, once however many tensors view it; storages of the excluded
modules' parameters and buffers (and of any nn.Parameter) are not counted.
Saved bytes only grow when something is saved, so the peak is taken at those moments exactly.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections import defaultdict
from typing import Any, Iterable, Iterator

import torch
import torch.utils.checkpoint as torch_checkpoint

_patch_lock = threading.Lock()
_active_meters: list["SavedTensorMeter"] = []
_original_frame_init = torch_checkpoint._CheckpointFrame.__init__


def _metered_frame_init(frame: Any, *args: Any, **kwargs: Any) -> None:
    _original_frame_init(frame, *args, **kwargs)
    meters = list(_active_meters)
    if meters:
        frame.recomputed = defaultdict(lambda: _MeteredRecomputed(meters))


class _MeteredRecomputed(weakref.WeakKeyDictionary):  # type: ignore[type-arg]
    """A frame's store of re-computed tensors; an entry lives as long as its handle."""

    def __init__(self, meters: list["SavedTensorMeter"]) -> None:
        super().__init__()
        self._meters = meters

    def __setitem__(self, handle: Any, tensor: torch.Tensor) -> None:
        super().__setitem__(handle, tensor)
        for meter in self._meters:
            meter._hold(handle, tensor)


class _MeteredSACStore(dict):  # type: ignore[type-arg]
    """One op's entries in selective checkpointing's cache: each cached output is counted from
    the moment it is stored until its entry is consumed by the re-run (torch replaces it)."""

    def __init__(self, meters: list["SavedTensorMeter"]) -> None:
        super().__init__()
        self._meters = meters

    def __setitem__(self, index: Any, entry: Any) -> None:
        super().__setitem__(index, entry)
        for wrapper in entry if isinstance(entry, (list, tuple)) else [entry]:
            value = getattr(wrapper, "val", None)
            # Under torch.compile the modes run while AOTAutograd traces, on fake tensors that
            # own no memory; what the compiled step saves, the meter's pack hook sees.
            if isinstance(value, torch.Tensor) and not is_traced(value):
                for meter in self._meters:
                    meter._hold(wrapper, value)


def sac_storage() -> Any:
    """The cache torch's selective checkpointing modes share, metered while meters are active."""
    meters = list(_active_meters)
    if not meters:
        return defaultdict(dict)
    return defaultdict(lambda: _MeteredSACStore(meters))


def hold_for_meters(owner: Any, tensor: torch.Tensor) -> None:
    """Counts `tensor`'s storage in every active meter until `owner` is garbage. remat's
    offloaded block calls keep what they save in their own saved-tensor hooks, which no outer
    hook sees: they report the storages they hold on the device here."""
    for meter in list(_active_meters):
        meter._hold(owner, tensor)


class _Saved:
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


# Reads the saved-tensor hooks in force (torch 2.8 and newer): how a measurement inside a
# checkpoint region hands each save on to the region's own hooks.
_TOP_SAVE_HOOKS = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)


def top_save_hooks() -> Any:
    """The (pack, unpack) hooks in force, None when autograd keeps saved tensors itself."""
    require_save_hooks()
    assert _TOP_SAVE_HOOKS is not None  # require_save_hooks raised otherwise
    return _TOP_SAVE_HOOKS(False)


def require_save_hooks() -> None:
    """Raises, naming the torch it needs, where torch does not report its saved-tensor hooks."""
    if _TOP_SAVE_HOOKS is None:
        raise RuntimeError(
            "remat.auto_checkpoint and remat.torch.measure on blocks need a torch that reports "
            "its saved-tensor hooks (torch._C._autograd._top_saved_tensors_default_hooks, torch "
            f"2.8 and newer); this is torch {torch.__version__}. checkpoint_sequential, plan and "
            "a stock nn.Sequential work on it"
        )


def torch_checkpoint_packs(own_pack: Any) -> bool:
    """Whether what autograd saves right now goes to a torch.utils.checkpoint region's hooks
    pushed after `own_pack` (a checkpoint inside a measured block), instead of to `own_pack`."""
    if _TOP_SAVE_HOOKS is None:
        return False
    top = _TOP_SAVE_HOOKS(False)
    return (
        top is not None
        and top[0] is not own_pack
        and getattr(top[0], "__module__", None) == torch_checkpoint.__name__
    )


# > 0 while remat.torch.estimate runs a step on fake tensors, which stand for real memory there.
_estimating = 0


@contextlib.contextmanager
def estimating() -> Iterator[None]:
    """Fake tensors made in here are an estimated step's, counted as real ones would be."""
    global _estimating
    _estimating += 1
    try:
        yield
    finally:
        _estimating -= 1


def estimating_now() -> bool:
    """Whether an estimated step runs now: its CUDA tensors are fake, counted as storages (the
    allocator sees none of them) and never synchronized."""
    return _estimating > 0


def is_traced(tensor: torch.Tensor) -> bool:
    """A tensor of torch.compile's tracing (fake, or functional over fake): it has no storage.
    An estimated step's fake tensors are not (see estimating)."""
    from torch._subclasses.fake_tensor import is_fake

    return not _estimating and is_fake(tensor)


def storage_of(tensor: torch.Tensor) -> torch.UntypedStorage:
    """The storage that holds `tensor`'s data (a DTensor's: its local shard's)."""
    local = getattr(tensor, "_local_tensor", None)  # a DTensor (FSDP2's sharded parameters)
    return (local if isinstance(local, torch.Tensor) else tensor).untyped_storage()


def storage_address(storage: torch.UntypedStorage) -> int:
    """Where a storage's data lies. A storage on the meta device (a fake tensor's) has no
    address (0 for all of them): its StorageImpl's stands in, unique while it is alive."""
    return storage._cdata if storage.device.type == "meta" else storage.data_ptr()


def storage_key(tensor: torch.Tensor) -> tuple[str, int, int]:
    """A storage's name while it is alive: its device, address and size."""
    storage = storage_of(tensor)
    return (str(storage.device), storage_address(storage), storage.nbytes())


def excluded_storages(objects: Iterable[Any]) -> set[tuple[str, int, int]]:
    """Storages of the parameters and buffers of modules (and of tensors) in `objects`."""
    keys = set()
    for obj in objects:
        if isinstance(obj, torch.nn.Module):
            for tensor in list(obj.parameters()) + list(obj.buffers()):
                keys.add(storage_key(tensor))
        elif isinstance(obj, torch.Tensor):
            keys.add(storage_key(obj))
    return keys


def is_persistent(tensor: torch.Tensor, excluded: set[tuple[str, int, int]]) -> bool:
    """Parameters and their views: memory that exists whether or not anything is saved. A view is
    known by its base too: FSDP2 gathers a block's full parameters into fresh storage before
    its forward, which `excluded` (taken from the sharded parameters) cannot name."""
    return (
        isinstance(tensor, torch.nn.Parameter)
        or isinstance(tensor._base, torch.nn.Parameter)
        or storage_key(tensor) in excluded
    )


def is_parameter_cast(tensor: torch.Tensor) -> bool:
    """A cast of a parameter that autograd records (autocast's weight casts, which its cache
    keeps for the whole autocast region): memory no block frees by offloading it."""
    base = tensor._base if tensor._base is not None else tensor  # a view of it, as its t()
    function = base.grad_fn
    if function is None or type(function).__name__ != "ToCopyBackward0":
        return False
    return any(
        isinstance(getattr(following, "variable", None), torch.nn.Parameter)
        for following, _ in function.next_functions
    )


def has_fsdp_modules(module: torch.nn.Module) -> bool:
    """Whether `module` is or holds a module under FSDP2's fully_shard."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch built without distributed
        return False
    return any(isinstance(m, FSDPModule) for m in module.modules())


class SavedTensorMeter:
    """Counts saved-for-backward bytes while active; ``peak_bytes`` is the highest count.

    Each storage counts once while any saved tensor holds it, parameters and buffers of the
    given modules aside; tensors non-reentrant checkpoint re-makes in backward and the cache of
    torch's selective checkpointing count too.

    Args:
        *exclude: modules (or lists of them) whose parameters and buffers are not activations.

    Example:
        ```python
        with remat.torch.SavedTensorMeter(model) as meter:
            model(x).sum().backward()
        print(meter.peak_bytes)
        ```
    """

    def __init__(self, *exclude: Any) -> None:
        items = [
            item for obj in exclude for item in (obj if isinstance(obj, (list, tuple)) else [obj])
        ]
        self._excluded = excluded_storages(items)
        # FSDP2 registers a block's gathered (unsharded) parameters only while it runs, in
        # storage allocated then and freed after: they are looked up when a tensor is saved.
        self._sharded = [m for m in items if isinstance(m, torch.nn.Module) and has_fsdp_modules(m)]
        self._counts: dict[tuple[str, int, int], int] = {}
        self.current_bytes = 0
        self.peak_bytes = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)

    def __enter__(self) -> "SavedTensorMeter":
        with _patch_lock:
            if not _active_meters:
                torch_checkpoint._CheckpointFrame.__init__ = _metered_frame_init  # type: ignore[method-assign,assignment]
            _active_meters.append(self)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)
        with _patch_lock:
            _active_meters.remove(self)
            if not _active_meters:
                torch_checkpoint._CheckpointFrame.__init__ = _original_frame_init  # type: ignore[method-assign]

    def _persistent(self, tensor: torch.Tensor) -> bool:
        if is_persistent(tensor, self._excluded):
            return True
        return bool(self._sharded) and storage_key(tensor) in excluded_storages(self._sharded)

    def _pack(self, tensor: torch.Tensor) -> Any:
        if self._persistent(tensor):
            return tensor
        saved = _Saved(tensor.detach())
        self._count(saved, tensor)
        return saved

    @staticmethod
    def _unpack(saved: Any) -> torch.Tensor:
        return saved.tensor if isinstance(saved, _Saved) else saved

    def _hold(self, owner: Any, tensor: torch.Tensor) -> None:
        """Counts `tensor`'s storage until `owner` is garbage, unless it is a parameter's."""
        if not self._persistent(tensor):
            self._count(owner, tensor)

    def _count(self, owner: Any, tensor: torch.Tensor) -> None:
        key = storage_key(tensor)
        count = self._counts.get(key, 0)
        self._counts[key] = count + 1
        if count == 0:
            self.current_bytes += key[2]
            self.peak_bytes = max(self.peak_bytes, self.current_bytes)
        weakref.finalize(owner, self._release, key)

    def _release(self, key: tuple[str, int, int]) -> None:
        count = self._counts[key] - 1
        if count:
            self._counts[key] = count
        else:
            del self._counts[key]
            self.current_bytes -= key[2]
