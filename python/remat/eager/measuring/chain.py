"""Measuring a chain: what each layer saves for backward, its output, and its forward time.

Layers run one at a time on a detached copy of the previous output, so measuring holds one
layer's activations at a time; the RNG state and module buffers are restored afterwards.
"""

from __future__ import annotations

import statistics
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.utils.checkpoint import checkpoint

from ... import _distributed
from ...saved_memory import excluded_storages
from .._runtime import (
    _modules_of,
    _PreservedState,
    _signature,
    _storage_bytes,
    _synchronize,
    _tensors,
    clock,
)
from ..types import LayerProfile, Profile
from .calls import layer_name, measure_call, saves_kept_apart
from .menu import with_menus
from .ops import ModesCache, measure_with_ops


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
    `granularity="op"` that first run also records the layer's ops (ops.measure_with_ops),
    and SAC's modes are measured once per kind of layer (ops.ModesCache). The RNG state and
    module buffers are restored afterwards.

    Args:
        functions: the layers, each taking the previous one's output.
        input: the first layer's input.
        repeats: timed runs of each layer besides the first.
        exclude: modules whose parameters and buffers are not activations (those of the
            modules among `functions` never are).
        names: the layers' names (default: their modules' classes).
        granularity: "block" (the default here) or "op", which also records each layer's ops
            and menu for op-level plans.
        alone: False when ranks plan together (the default under a process group): none of
            ModesCache's shortcuts, which timings decide, so every rank runs each layer as
            often.

    Returns:
        The profile: per layer its saved bytes, output bytes and forward seconds; its JSON
        (``to_json()``) is what ``remat eager`` reads.
    """
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
    if alone is None:  # under a process group its ranks may agree on this profile
        alone = not _distributed.active()
    modes = ModesCache(shortcuts=alone)
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
                call, ops = measure_with_ops(function, (h,), {}, excluded, repeats)
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
                    name=names[index] if names else layer_name(function),
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
        with saves_kept_apart():
            y = (
                checkpoint(op, x, use_reentrant=False, preserve_rng_state=True)
                if wrapped
                else op(x)
            )
            y.sum().backward()
        _synchronize(x)
        return now() - start

    rng = torch.random.get_rng_state()
    for wrapped in (False, True):
        step(wrapped)  # warm-up
    samples = [step(True) - step(False) for _ in range(5 + 2 * repeats)]
    torch.random.set_rng_state(rng)
    return max(0.0, statistics.median(samples))
