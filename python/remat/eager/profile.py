"""Measuring a chain: what each layer saves for backward, its output, and its forward time.

Layers run one at a time on a detached copy of the previous output, so measuring holds one
layer's activations at a time; the RNG state and module buffers are restored afterwards.
"""

from __future__ import annotations

import functools
import json
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.utils.checkpoint import checkpoint

from ..saved_memory import excluded_storages, is_persistent, storage_key
from ._runtime import (
    _PreservedState,
    _detached,
    _modules_of,
    _signature,
    _storage_bytes,
    _synchronize,
    _tensors,
    clock,
)
from .generators import GeneratorWatch
from .mutation import argument_states, check_unchanged


@dataclass(frozen=True)
class LayerProfile:
    name: str
    saved_bytes: int  # saved for backward, not counting the layer's input or output
    output_bytes: int
    saves_output: bool  # whether the layer's saved tensors include its output
    forward_seconds: float  # median, with autograd recording (as when it is re-run)
    # Selective checkpoint options, (held_bytes, recompute_seconds) each: run as a single-layer
    # region outside every other region, the layer may keep held_bytes of its ops' outputs until
    # its re-run and re-run in recompute_seconds instead of forward_seconds.
    options: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Profile:
    input_bytes: int
    layers: tuple[LayerProfile, ...]
    region_overhead_seconds: float = 0.0  # what one checkpoint region costs besides its re-run
    # The most layers one region may span (0: any). 1 for blocks that are not proven to form a
    # chain: auto_checkpoint on a model whose own code runs between its blocks.
    max_region_layers: int = 0
    # Whether the last layer's output is held after the forward until backward reaches the code
    # after the chain, which frees it before the last layer's backward (auto_checkpoint: a
    # model's final norm saves its last block's output). The planner sees that code as one
    # more, empty layer: the output counts in the forward's peak, and the last layer may be a
    # region whose re-run comes once the output is gone.
    output_held: bool = False
    # Per layer, for op-level plans: its ops and its menu (each LayerProfile's options are the
    # menu's (held bytes, re-run seconds)); empty for block-level plans.
    selective: tuple[Any, ...] = field(default=(), repr=False, compare=False)

    def core_layers(self) -> list[tuple[int, int, bool, float, tuple[tuple[int, float], ...]]]:
        return [
            (
                l.saved_bytes,
                l.output_bytes,
                l.saves_output,
                l.forward_seconds,
                tuple((int(held), float(seconds)) for held, seconds in l.options),
            )
            for l in self.layers
        ]

    def planned_layers(self) -> list[tuple[int, int, bool, float, tuple[tuple[int, float], ...]]]:
        """core_layers as the planner takes them: with output_held, the code after the chain as
        an empty last layer (it saves and passes on nothing, takes no time)."""
        return self.core_layers() + ([(0, 0, False, 0.0, ())] if self.output_held else [])

    @property
    def forward_seconds(self) -> float:
        return sum(l.forward_seconds for l in self.layers)

    def to_json(self) -> str:
        """The profile as `remat eager PROFILE.json` reads it (times in seconds). Layers' options
        (their selective-checkpoint menus as bytes and times) are kept; which ops each option
        keeps is not, so a profile read back plans but cannot run op-level regions."""
        return json.dumps(
            {
                "input_bytes": self.input_bytes,
                "region_overhead": self.region_overhead_seconds,
                "max_region_layers": self.max_region_layers,
                "layers": [
                    {
                        "name": l.name,
                        "saved_bytes": l.saved_bytes,
                        "output_bytes": l.output_bytes,
                        "saves_output": l.saves_output,
                        "forward_time": l.forward_seconds,
                        "options": [
                            {"held_bytes": held, "recompute_time": seconds}
                            for held, seconds in l.options
                        ],
                    }
                    for l in self.layers
                ]
                + ([_AFTER_THE_CHAIN] if self.output_held else []),
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> "Profile":
        data = json.loads(text)
        layers = tuple(
            LayerProfile(
                name=str(l.get("name", f"layer{i}")),
                saved_bytes=int(l["saved_bytes"]),
                output_bytes=int(l["output_bytes"]),
                saves_output=bool(l.get("saves_output", False)),
                forward_seconds=float(l["forward_time"]),
                options=tuple(
                    (int(o["held_bytes"]), float(o["recompute_time"])) for o in l.get("options", ())
                ),
            )
            for i, l in enumerate(data["layers"])
        )
        return cls(
            int(data["input_bytes"]),
            layers,
            float(data.get("region_overhead", 0.0)),
            int(data.get("max_region_layers", 0)),
        )


# The code after the chain, written out as the empty layer the planner sees (remat eager reads
# no output_held flag).
_AFTER_THE_CHAIN = {
    "name": "(after the chain)",
    "saved_bytes": 0,
    "output_bytes": 0,
    "saves_output": False,
    "forward_time": 0.0,
    "options": [],
}


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


class SaveRecorder:
    """While active, records the storages autograd saves (activations: not those in `excluded`,
    nor parameters), calling `on_save` at every save. The measured graph is never
    back-propagated; saved tensors are held until the block ends, as they would be for backward:
    freed earlier, their memory could be reused and two of them share one storage key. They are
    let go on exit: the hooks live in the graph and reach this object, a reference cycle through
    C++ that Python's collector cannot see."""

    def __init__(
        self, excluded: set[tuple[str, int, int]], on_save: Callable[[], None] | None = None
    ) -> None:
        self.keys: set[tuple[str, int, int]] = set()
        self._excluded = excluded
        self._on_save = on_save
        self._alive: list[torch.Tensor] = []
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _never_unpacked)

    def _pack(self, tensor: torch.Tensor) -> Any:
        if self._on_save is not None:
            self._on_save()
        if not is_persistent(tensor, self._excluded):
            self.keys.add(storage_key(tensor))
            self._alive.append(tensor)
        return _NotKept()

    def __enter__(self) -> "SaveRecorder":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hooks.__exit__(*exc)
        self._alive.clear()


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


def _changes_its_input(function: Callable[..., Any]) -> ValueError:
    return ValueError(
        f"remat: {_name(function)} changes an input in place (as x.mul_(0.5) or x += ...): a "
        "checkpoint region re-runs a layer from its inputs as they were, so it cannot hold this "
        "layer, and measuring (which runs it more than once) would change the input again. "
        "Write the change out of place (x = x * 0.5), or leave this layer out of the blocks"
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
    place of GeneratorWatch, noting the generators ops draw from itself; its note_save() is
    called at every save (selective.measure_with_ops records the ops in the same run)."""
    args, kwargs = _detached(args), _detached(kwargs)
    states = argument_states(args, kwargs)
    versions = [(t, t._version) for t in _tensors((args, kwargs))]

    def activations(value: Any) -> frozenset[tuple[str, int, int]]:
        keys, _ = _storage_bytes([t for t in _tensors(value) if not is_persistent(t, excluded)])
        return frozenset(keys)

    seconds = []
    now = clock()
    _synchronize((args, kwargs))
    start = now()
    # The first run also learns which generators of the model's own the call draws from (the
    # watch's per-op cost is left out of the time: the least of the runs counts).
    try:
        watch = GeneratorWatch(_modules_of(function)) if recorder is None else recorder
        on_save = None if recorder is None else recorder.note_save
        with torch.enable_grad(), SaveRecorder(excluded, on_save) as saved, watch:
            out = function(*args, **kwargs)
    except RuntimeError as error:  # measured inputs are leaves: autograd refuses in-place ops
        if "leaf Variable that requires grad" in str(error):
            raise _changes_its_input(function) from error
        raise
    if any(t._version != v for t, v in versions):
        raise _changes_its_input(function)
    check_unchanged(name or _name(function), states, argument_states(args, kwargs))
    _synchronize(out)
    seconds.append(now() - start)
    input_keys, output_keys = activations((args, kwargs)), activations(out)
    out = _detached(out)
    for _ in range(repeats):
        start = now()
        with torch.enable_grad():
            again = function(*args, **kwargs)
        _synchronize(again)
        seconds.append(now() - start)
        del again
    return CallMeasurement(
        input_keys, frozenset(saved.keys), output_keys, min(seconds), out, watch.dispatched
    )


def with_menus(profile: Profile, ops: Sequence[Any]) -> Profile:
    """`profile` with each layer's menu (from its op profile, None for none) as its options.

    Op times are measured one op at a time under a dispatch mode, which adds overhead per op;
    they are scaled so that a layer's ops add up to its measured forward time, the unit every
    other time in the profile is in. An option that keeps ops runs under SAC's modes: on CPU it
    pays what they were measured to take on this layer (`selective.measure_modes`: the caching
    forward over the layer's forward time, and a re-run that finds every cacheable op cached)
    plus the ops it re-runs besides; one that keeps none runs as a plain region."""
    from .selective import menu

    if not any(o is not None for o in ops):
        return profile
    layers, selective = [], []
    for layer, op_profile in zip(profile.layers, ops):
        if op_profile is None or not (op_profile.replays and op_profile.worth_it):
            # planned as a block (see OpProfile.replays and worth_it)
            layers.append(layer)
            selective.append(None)
            continue
        scale = time_scale(op_profile, layer.forward_seconds)
        entries = tuple(menu(op_profile))
        options = tuple(
            (e.held_bytes, option_seconds(op_profile, e, scale, layer.forward_seconds))
            for e in entries
        )
        layers.append(replace(layer, options=options))
        selective.append((op_profile, entries))
    return replace(profile, layers=tuple(layers), selective=tuple(selective))


def time_scale(op_profile: Any, forward_seconds: float) -> float:
    """What turns the layer's op times (measured one by one) into its forward time's unit."""
    total = sum(op.seconds for op in op_profile.ops)
    return forward_seconds / total if total > 0 else 1.0


def option_seconds(op_profile: Any, entry: Any, scale: float, forward_seconds: float) -> float:
    """The re-run time of one menu entry, in the profile's unit (see with_menus): an entry that
    keeps ops pays its caching forward's time over the plain forward (`forward_seconds`) too."""
    if not entry.cached or op_profile.modes_seconds is None:
        return entry.recompute_seconds * scale
    caching_forward, cached_rerun = op_profile.modes_seconds
    rerun_ops = entry.recompute_seconds - op_profile.uncached_floor_seconds
    forward_extra = max(0.0, caching_forward - forward_seconds)
    return max(0.0, rerun_ops) * scale + forward_extra + cached_rerun


def _name(function: Callable[..., Any]) -> str:
    """The layer's name in a plan's table: its module's class where there is one (also inside
    a functools.partial, as auto_checkpoint wraps blocks), else the function's name."""
    modules = _modules_of(function)
    if modules:
        return type(modules[0]).__name__
    if isinstance(function, functools.partial):
        return _name(function.func)
    return getattr(function, "__name__", type(function).__name__)


def profile_layers(
    functions: Sequence[Callable[[Any], Any]],
    input: Any,
    *,
    repeats: int = 1,
    exclude: Iterable[Any] = (),
    names: Sequence[str] | None = None,
    granularity: str = "block",
    alone: bool | None = None,
) -> Profile:
    """Measures what each layer saves for backward and its forward time on `input`.

    Layers run one at a time on a detached copy of the previous output, so profiling holds one
    layer's activations at a time; each runs 1 + `repeats` times and its forward time is the
    least of them (the first run, which also records what is saved, includes warm-up). With
    `granularity="op"` that first run also records the layer's ops (selective.measure_with_ops),
    and SAC's modes are measured once per kind of layer (selective.ModesCache). Storages of
    parameters and buffers (of the modules among `functions` and in `exclude`) are not
    activations and are not counted. The RNG state and module buffers are restored afterwards.
    `alone=False` (ranks planning together; the default under a process group) takes none of
    ModesCache's shortcuts, which timings decide: every rank runs each layer as often."""
    functions = list(functions)
    if repeats < 0:
        raise ValueError(f"repeats: must be >= 0, got {repeats}")
    if names is not None and len(names) != len(functions):
        raise ValueError(f"names: has {len(names)} entries, functions has {len(functions)}")
    modules = [m for f in functions for m in _modules_of(f)]
    excluded = excluded_storages(modules + list(exclude))
    devices = {t.device for t in _tensors(input)}
    if granularity not in ("op", "block"):
        raise ValueError(f"granularity: expected 'op' or 'block', got {granularity!r}")
    from . import distributed, selective  # both import this module

    if alone is None:  # under a process group its ranks may agree on this profile
        alone = not distributed.active()
    modes = selective.ModesCache(shortcuts=alone)
    layers, op_profiles = [], []
    with _PreservedState(modules, devices):
        _, input_bytes = _storage_bytes(input)
        h = input
        for index, function in enumerate(functions):
            # The first run names a layer that changes its input in place.
            modules_here = _modules_of(function)
            kind = None
            if granularity == "op" and len(modules_here) == 1 and repeats:
                kind = modes.kind(modules_here[0], _signature((h,), ints=True))
            if granularity == "op" and (kind is None or modes.records(kind)):
                call, ops = selective.measure_with_ops(function, (h,), {}, excluded, repeats)
            else:
                call, ops = measure_call(function, (h,), {}, excluded, repeats), None
            if kind is not None:  # the modes are weighed against the timed forward
                op_profiles.append(modes.ops_of(kind, function, (h,), {}, excluded, call, ops))
            elif ops is not None:  # no plain timing run (repeats=0): nothing to weigh against
                op_profiles.append(modes.complete(function, (h,), {}, ops, None, repeats))
            in_keys, _ = _storage_bytes(h)
            out_keys, out_bytes = _storage_bytes(call.output)
            layers.append(
                LayerProfile(
                    name=names[index] if names else _name(function),
                    saved_bytes=sum(key[2] for key in call.saved_keys - in_keys - out_keys),
                    output_bytes=out_bytes,
                    # The chain's output is held once its forward is done: it is returned,
                    # and the caller's code after the chain (a norm, a head) saves it.
                    saves_output=bool(call.saved_keys & out_keys) or index + 1 == len(functions),
                    forward_seconds=call.forward_seconds,
                )
            )
            h = call.output
            del call
            if not _tensors(h):
                raise TypeError(
                    f"functions[{index}]: returned {type(h).__name__}; every layer must return "
                    "a tensor (or a tuple of tensors) for the next one"
                )
    profile = Profile(input_bytes, tuple(layers), _region_overhead(input, repeats))
    return with_menus(profile, op_profiles) if op_profiles else profile


# Measured region overheads, by device, thread count and repeats: a property of the machine
# and of torch, not of the model, so a process measures it once.
_REGION_OVERHEADS: dict[tuple[str, int, int], float] = {}


def _region_overhead(input: Any, repeats: int) -> float:
    """Seconds one checkpoint region adds to a step besides re-running its layers: a region
    around a single cheap op, forward and backward, against the op alone."""
    device = next(iter(_tensors(input))).device if _tensors(input) else torch.device("cpu")
    key = (str(device), torch.get_num_threads(), repeats)
    if key not in _REGION_OVERHEADS:
        _REGION_OVERHEADS[key] = _measure_region_overhead(device, repeats)
    return _REGION_OVERHEADS[key]


def _measure_region_overhead(device: torch.device, repeats: int) -> float:
    x = torch.ones(8, device=device, requires_grad=True)

    def op(t: torch.Tensor) -> torch.Tensor:
        return t * 2.0

    def step(wrapped: bool) -> float:
        now = clock()
        _synchronize(x)
        start = now()
        y = checkpoint(op, x, use_reentrant=False, preserve_rng_state=True) if wrapped else op(x)
        y.sum().backward()
        _synchronize(x)
        return now() - start

    rng = torch.random.get_rng_state()
    for wrapped in (False, True):
        step(wrapped)  # warm-up
    samples = [step(True) - step(False) for _ in range(5 + 2 * repeats)]
    torch.random.set_rng_state(rng)
    return max(0.0, statistics.median(samples))
