"""What auto_checkpoint keeps about a step: the step under way, what the model's own code saves
while the first step measures, whether the last step awaits its backward, and a per-block plan.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from ...saved_memory import (
    excluded_storages,
    has_fsdp_modules,
    storage_key,
    storage_of,
    top_save_hooks,
)
from .._runtime import _tensors
from ..measuring.blocks import RecordedCall
from ..measuring.calls import keep_versioned, unpack_versioned
from ..measuring.ops import ModesCache
from ..types import Plan
from .offload import OffloadedCall


@dataclass
class _Step:
    """One call of the model: which plan it follows, and the block calls made so far."""

    key: Any  # what the step is called with (input signatures and run context)
    plan_key: Any  # what its plan is kept under: key, or every rank's in a process group
    plan: Plan | None  # None: this step measures
    calls: list[RecordedCall] = field(default_factory=list)
    position: int = 0
    off_plan: bool = False
    # A block call the plan has no place for (more calls than it was made for, or a block its
    # measured step never called): the plan is measured again at the next step.
    outgrew_plan: bool = False
    outside: _OutsideSaves | None = None  # while this step measures
    # While measuring, the last block's real outputs are held until the next call has read its
    # inputs, so that no new tensor can take their address (storage keys stay unique).
    last_outputs: Any = None
    # While measuring: the last block call's output storages, by key. Those that the model's
    # code drops before its forward returns (GPT-Neo's attention weights) are not what the
    # call passes on (see chain_profile's `dropped`).
    last_output_storages: list[tuple[tuple[str, int, int], StorageWeakRef]] = field(
        default_factory=list
    )
    # Per block call run as a region: its name and its tensor inputs with their versions.
    region_inputs: list[tuple[str, list[tuple[torch.Tensor, int]]]] = field(default_factory=list)
    chain_calls: int = 0  # calls of a stock nn.Sequential chain in this step
    # While measuring: what SAC's modes cost, and the op profiles of each kind of block (see
    # ModesCache; without its shortcuts under a process group).
    modes: ModesCache | None = None
    # While measuring: the storages of the model's parameters and buffers (see _excluded), and
    # whether the model holds FSDP2 modules.
    excluded: set[tuple[str, int, int]] | None = None
    sharded: bool = False
    # Following a plan that offloads: the last offloaded call, until the next call's forward
    # has run (see run/offload.py).
    pending_offload: OffloadedCall | None = None
    # Following a plan traced on fake tensors (first_step="trace"): each block call's forward
    # seconds by its position, timed to plan again from them (see run/traced_plan.py).
    times: dict[int, float] | None = None

    def parameter_storages(self, model: torch.nn.Module) -> set[tuple[str, int, int]]:
        """The storages of the model's parameters and buffers, read once a step: a walk of the
        model a block cost a real share of a small block's measuring. Under FSDP2 they are read
        at every block, whose parameters are gathered into fresh storage for its forward and
        freed after (a stale key could name an activation allocated there later)."""
        if self.excluded is None:
            self.sharded = has_fsdp_modules(model)
        if self.excluded is None or self.sharded:
            self.excluded = excluded_storages([model])
        return self.excluded


class _OutsideSaves:
    """While the first step measures: the storages that the model's code outside the blocks
    saves for backward (a final norm saves the last block's output, T5's encoder norm the last
    encoder block's, a downsampling conv the previous stage's).

    Each save goes on to the saved-tensor hooks in force when the step began (the user's
    ``save_on_cpu``, an offload or compression hook, a meter), which keep it as they would in
    plain training. Where there are none, this hook keeps the tensor and makes autograd's own
    check that it was not changed in place, which any saved-tensor hook turns off: each save
    keeps the tensor's version and unpacking compares it. It keeps a detached tensor (sharing
    the version counter), as SavedTensorMeter does: the saved tensor itself would make an
    output saved by its own node a reference cycle. Under torch.compile's tracing it records
    nothing.

    Only saves of a block call's output whose storage is still alive at the save are noted, with
    that call's position (`note_outputs` registers each call's outputs): a storage key names an
    address, and a block output the model's code does not keep (x = x + block(x) frees
    block(x)) leaves its address to a later tensor, as the head's input, whose save was taken
    for that block's output (a flaky extra output's bytes in the profile)."""

    def __init__(self, inside_a_block: Callable[[], bool]) -> None:
        # (call position, storage key) of each block output the model's code saved
        self.keys: set[tuple[int, tuple[str, int, int]]] = set()
        self._inside_a_block = inside_a_block
        # Block outputs by storage key: the call that returned it, and a weak reference to its
        # storage. A key counts only while the storage that had it is alive.
        self._outputs: dict[tuple[str, int, int], tuple[int, StorageWeakRef]] = {}
        outer = top_save_hooks()
        self._outer_pack = None if outer is None else outer[0]
        unpack = self._unpack if outer is None else outer[1]
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, unpack)

    def note_outputs(self, position: int, tensors: Any) -> None:
        """Registers the output tensors of the block call at `position`: saves of their
        storages are noted while those storages live (an address freed and reused names
        another tensor)."""
        for tensor in tensors:
            reference = StorageWeakRef(storage_of(tensor))
            self._outputs[storage_key(tensor)] = (position, reference)

    def _pack(self, tensor: torch.Tensor) -> Any:
        if not torch.compiler.is_compiling() and not self._inside_a_block():
            key = storage_key(tensor)
            found = self._outputs.get(key)
            if found is not None and not found[1].expired():
                self.keys.add((found[0], key))
        if self._outer_pack is not None:
            return self._outer_pack(tensor)
        return tensor if torch.compiler.is_compiling() else keep_versioned(tensor)

    @staticmethod
    def _unpack(packed: Any) -> torch.Tensor:
        return packed if isinstance(packed, torch.Tensor) else unpack_versioned(packed)

    def __enter__(self) -> "_OutsideSaves":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)
        self._outputs.clear()


class _GraphAlive:
    """Held by a gradient hook, which autograd keeps on the output's graph node: it lives as
    long as the graph does (a loss computed from the output keeps it), however soon the output
    tensor itself goes (loss = f(model(x)) drops it at once)."""

    __slots__ = ("__weakref__",)


class _PendingBackward:
    """Whether the last step's output still awaits its backward: its graph alive, and no
    gradient has reached it."""

    def __init__(self) -> None:
        self._graphs: list[weakref.ref[_GraphAlive]] = []
        self._reached = True

    def watch(self, output: Any) -> None:
        tensors = [t for t in _tensors(output) if t.requires_grad and t.grad_fn is not None]
        self._reached = not tensors
        self._graphs = []
        for tensor in tensors:
            alive = _GraphAlive()
            tensor.register_hook(functools.partial(self._on_gradient, alive))
            self._graphs.append(weakref.ref(alive))

    def _on_gradient(self, _alive: _GraphAlive, grad: torch.Tensor) -> None:
        self._reached = True

    def waiting(self) -> bool:
        return not self._reached and any(ref() is not None for ref in self._graphs)


@dataclass(frozen=True)
class _BlockPlan:
    """A per-block plan: the calls it was made for, and which of them are checkpoint regions."""

    plan: Plan
    # (module, signature, positions of the arguments a moved input would send) per call
    calls: tuple[tuple[Any, Any, tuple[int, ...]], ...]
    # Call position -> how it runs as a region: None re-runs everything, else the
    # torch.utils.checkpoint context_fn of its selective (op-level) policy.
    regions: dict[int, Callable[[], Any] | None]
    offloaded: frozenset[int] = frozenset()  # call positions whose saved tensors go to the host
    # Call position -> the positions of its arguments that go to the host, for a region whose
    # input moves.
    inputs_offloaded: dict[int, tuple[int, ...]] = field(default_factory=dict)
