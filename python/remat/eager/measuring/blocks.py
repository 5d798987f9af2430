"""Blocks called by a model's own code, measured call by call, as a chain the planner reads.

auto_checkpoint cannot assume that block k's output is block k+1's input: models add residuals
outside blocks, pass masks and positions, return tuples, call a block twice. So it records each
block call of one training step (its tensor inputs, what autograd saves inside it, its outputs,
as storages) and derives the chain from what was seen:

- tensors that several calls take, or that the first call takes (masks, positions, the stream's
  input), are held for the whole step: the chain's input;
- what a call takes that no earlier call took is the activation between it and the previous call
  (the residual stream after the model's own code ran);
- what a call saves beyond its inputs and that activation is its own saved bytes;
- the last call's outputs are held until backward reaches the model's code after the blocks, as
  a final norm or a head keeps them (`Profile.output_held`), except those the model's code had
  dropped when its forward returned while keeping another (GPT-Neo's loop drops the attention
  weights each block returns);

- so are a call's outputs that the model's code between calls saves for its backward (T5's
  encoder norm saves the last encoder block's output, a downsampling conv the previous stage's):
  the measuring step notes what that code saves.

Every call is planned as its own region or none (``max_region_layers=1``): the model's code
between calls cannot be re-run by a region that spans two of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..types import Key, LayerProfile, OpProfile, Profile
from .calls import CallMeasurement
from .menu import with_menus


@dataclass(frozen=True)
class RecordedCall:
    """One block call of the measured step: which block, how it was called, what it held.

    Storage keys are compared only among tensors alive at the same time (an address freed and
    reused would make two tensors one): the call's inputs with what it saved and returned, and
    across calls the inputs and outputs, which the measuring step keeps alive (every block is a
    checkpoint region then, holding its inputs; an output is held until the next call has read
    its inputs)."""

    module: Any  # the nn.Module (compared by identity)
    name: str
    signature: Any  # shapes, dtypes and values of its arguments
    input_keys: frozenset[Key]  # its real tensor inputs (activations)
    output_keys: frozenset[Key]  # its real outputs
    own_bytes: int  # saved inside it, neither an input nor an output
    saved_outputs: frozenset[Key]  # its outputs it saved itself
    forward_seconds: float
    ops: OpProfile | None = None  # its ops, for selective checkpointing
    # The storage of each of its arguments (positional, then keyword), None where it is not an
    # activation tensor: a region's checkpoint holds these.
    input_order: tuple[Key | None, ...] = ()
    # Whether it saved casts of parameters (autocast's, which its cache holds): offloading
    # would not free them.
    saves_parameter_casts: bool = False

    @classmethod
    def of(
        cls,
        module: Any,
        name: str,
        signature: Any,
        measured: CallMeasurement,
        ops: OpProfile | None = None,
        input_order: tuple[Key | None, ...] = (),
    ) -> "RecordedCall":
        """The call as `measured` inside the region that ran it (its real inputs and outputs)."""
        saved = measured.saved_keys
        return cls(
            module,
            name,
            signature,
            measured.input_keys,
            measured.output_keys,
            _bytes(saved - measured.input_keys - measured.output_keys),
            saved & measured.output_keys,
            measured.forward_seconds,
            ops,
            input_order,
            bool(measured.cast_keys),
        )


def _bytes(keys: set[Key] | frozenset[Key]) -> int:
    return sum(key[2] for key in keys)


@dataclass(frozen=True)
class _Boundary:
    """What one call passes on: `passed` (what the next call takes first), `keys` (with what
    the model's code saves of its outputs: its output_bytes), and `movable`, the storages an
    offload plan may move with the next call (empty: none)."""

    passed: frozenset[Key]
    keys: frozenset[Key]
    movable: frozenset[Key]


def _shared(calls: list[RecordedCall]) -> set[Key]:
    """The first call's inputs, and every input that more than one call takes: held all step."""
    seen_once: set[Key] = set()
    shared: set[Key] = set(calls[0].input_keys)
    for call in calls:
        shared |= call.input_keys & seen_once
        seen_once |= call.input_keys
    return shared


def _boundaries(
    calls: list[RecordedCall],
    held_outside: frozenset[tuple[int, Key]],
    shared: set[Key],
    dropped: frozenset[Key] = frozenset(),
) -> list[_Boundary]:
    inputs = [c.input_keys for c in calls]
    taken_before: set[Key] = set()
    found = []
    for k, call in enumerate(calls):
        taken_before |= inputs[k]
        if k + 1 < len(calls):
            boundary = set(inputs[k + 1]) - shared - taken_before
        else:
            boundary = set(call.output_keys) - shared - dropped
        # An output the model's own code saves (T5's encoder norm, a downsampling conv between
        # stages) stays in memory, region or not, until that code's backward.
        outside = {key for key in call.output_keys if (k, key) in held_outside} - shared
        # The next call's region may send its input to the host when that input is this call's
        # output, passed as an argument of its own, and nothing outside the blocks saves it.
        movable = (
            k + 1 < len(calls)
            and bool(boundary)
            and not outside
            and boundary <= call.output_keys
            and boundary <= set(calls[k + 1].input_order)
        )
        found.append(
            _Boundary(
                frozenset(boundary),
                frozenset(boundary | outside),
                frozenset(boundary if movable else ()),
            )
        )
    return found


def moved_input_positions(
    calls: list[RecordedCall], held_outside: frozenset[tuple[int, Key]] = frozenset()
) -> list[tuple[int, ...]]:
    """Per call: the positions, among its arguments (positional, then keyword), of the inputs an
    offload plan may move when that call runs as a region whose input moves (empty: none)."""
    boundaries = _boundaries(calls, held_outside, _shared(calls))
    found: list[tuple[int, ...]] = [()]
    for k in range(1, len(calls)):
        movable = boundaries[k - 1].movable
        found.append(tuple(p for p, key in enumerate(calls[k].input_order) if key in movable))
    return found


def _idle(call: RecordedCall) -> bool:
    """Whether a call did no work: it saved nothing and returned one of its inputs."""
    return not call.own_bytes and not call.saved_outputs and call.output_keys <= call.input_keys


def _stand_ins(calls: list[RecordedCall]) -> dict[int, int]:
    """For each idle call (see _idle): the busiest call of the same module class and signature
    that did work, where there is one.

    A block that skipped itself in the measured step (LayerDrop, stochastic depth, an early
    exit inside the block) would otherwise be planned as saving and passing on nothing, and run
    plainly in a later step that does not skip it: a helper's step measured 3.5 times the
    budget. Planned as its kind's busiest block, a later skip only holds less."""
    busiest: dict[tuple[type, Any], int] = {}
    for k, call in enumerate(calls):
        kind = (type(call.module), call.signature)
        best = busiest.get(kind)
        if not _idle(call) and (best is None or call.own_bytes > calls[best].own_bytes):
            busiest[kind] = k
    found = {}
    for k, call in enumerate(calls):
        best = busiest.get((type(call.module), call.signature))
        if _idle(call) and best is not None:
            found[k] = best
    return found


def _as_busy_as(layer: LayerProfile, model: LayerProfile) -> LayerProfile:
    return replace(
        layer,
        saved_bytes=max(layer.saved_bytes, model.saved_bytes),
        output_bytes=max(layer.output_bytes, model.output_bytes),
        saves_output=layer.saves_output or model.saves_output,
        forward_seconds=max(layer.forward_seconds, model.forward_seconds),
        offloadable=layer.offloadable and model.offloadable,
    )


def chain_profile(
    calls: list[RecordedCall],
    region_overhead: float,
    held_outside: frozenset[tuple[int, Key]] = frozenset(),
    dropped: frozenset[Key] = frozenset(),
) -> Profile:
    """The per-call chain of a measured step (see the module's docstring). `held_outside`: the
    block outputs the model's code outside the blocks saved for backward in that step, as
    (call position, storage key). `dropped`: the last call's outputs that no longer lived when
    the model's forward returned while another did (GPT-Neo's attention weights, which its loop
    drops). They are no activation of a region's; a block that saves them counts them among its
    saves."""
    if not calls:
        raise ValueError("blocks: none of the blocks was called in the model's forward")
    shared = _shared(calls)
    boundaries = _boundaries(calls, held_outside, shared, dropped)
    names: dict[str, int] = {}
    layers = []
    selective_layers = []
    for k, call in enumerate(calls):
        boundary, passed = boundaries[k].keys, boundaries[k].passed
        # A saved output that the next call takes (x = block(x)) is the boundary, counted once,
        # as its output. Any other saved output (x = x + block(x), or a tuple's other members,
        # as the gate of x, gate = block(x)) is the block's own.
        saves_boundary = bool(call.saved_outputs & passed)
        saved_bytes = call.own_bytes + _bytes(call.saved_outputs - passed)
        names[call.name] = names.get(call.name, 0) + 1
        label = call.name if names[call.name] == 1 else f"{call.name} (call {names[call.name]})"
        layers.append(
            LayerProfile(
                name=label,
                saved_bytes=saved_bytes,
                output_bytes=_bytes(boundary),
                saves_output=saves_boundary,
                forward_seconds=call.forward_seconds,
                # An offloaded call keeps its outputs and parameter casts on the device: only
                # the rest of its own bytes move.
                offloadable=not call.saved_outputs - passed and not call.saves_parameter_casts,
                input_offloadable=k > 0 and bool(boundaries[k - 1].movable),
            )
        )
        selective_layers.append(call.ops)
    # An idle call's ops are not its kind's: it gets no selective options.
    for k, model in _stand_ins(calls).items():
        layers[k] = _as_busy_as(layers[k], layers[model])
        selective_layers[k] = None
    return with_menus(
        Profile(
            _bytes(shared),
            tuple(layers),
            region_overhead,
            max_region_layers=1,
            output_held=True,
        ),
        selective_layers,
    )
