"""Measuring a chain: what each layer saves for backward, its output, and its forward time.

Layers run one at a time on a detached copy of the previous output, so measuring holds one
layer's activations at a time; the RNG state and module buffers are restored afterwards.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.utils.checkpoint import checkpoint

from ..saved_memory import excluded_storages, is_persistent, storage_key
from ._runtime import (
    _PreservedState,
    _detached,
    _modules_of,
    _storage_bytes,
    _synchronize,
    _tensors,
)


@dataclass(frozen=True)
class LayerProfile:
    name: str
    saved_bytes: int  # saved for backward, not counting the layer's input or output
    output_bytes: int
    saves_output: bool  # whether the layer's saved tensors include its output
    forward_seconds: float  # median, with autograd recording (as when it is re-run)


@dataclass(frozen=True)
class Profile:
    input_bytes: int
    layers: tuple[LayerProfile, ...]
    region_overhead_seconds: float = 0.0  # what one checkpoint region costs besides its re-run

    def core_layers(self) -> list[tuple[int, int, bool, float]]:
        return [
            (l.saved_bytes, l.output_bytes, l.saves_output, l.forward_seconds) for l in self.layers
        ]

    @property
    def forward_seconds(self) -> float:
        return sum(l.forward_seconds for l in self.layers)

    def to_json(self) -> str:
        """The profile as `remat eager PROFILE.json` reads it (times in seconds)."""
        return json.dumps(
            {
                "input_bytes": self.input_bytes,
                "region_overhead": self.region_overhead_seconds,
                "layers": [
                    {
                        "name": l.name,
                        "saved_bytes": l.saved_bytes,
                        "output_bytes": l.output_bytes,
                        "saves_output": l.saves_output,
                        "forward_time": l.forward_seconds,
                    }
                    for l in self.layers
                ],
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
            )
            for i, l in enumerate(data["layers"])
        )
        return cls(int(data["input_bytes"]), layers, float(data.get("region_overhead", 0.0)))


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
    repeats: int = 3,
    exclude: Iterable[Any] = (),
) -> Profile:
    """Measures what each layer saves for backward and its forward time on `input`.

    Layers run one at a time on a detached copy of the previous output, so profiling holds one
    layer's activations at a time. Storages of parameters and buffers (of the modules among
    `functions` and in `exclude`) are not activations and are not counted. The RNG state and
    module buffers are restored afterwards."""
    functions = list(functions)
    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    modules = [m for f in functions for m in _modules_of(f)]
    excluded = excluded_storages(modules + list(exclude))
    devices = {t.device for t in _tensors(input)}
    layers = []
    with _PreservedState(modules, devices):
        _, input_bytes = _storage_bytes(input)
        h = input
        for index, function in enumerate(functions):
            x = _detached(h)
            saved: set[tuple[str, int, int]] = set()

            def pack(tensor: torch.Tensor) -> torch.Tensor:
                if not is_persistent(tensor, excluded):
                    saved.add(storage_key(tensor))
                return tensor

            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = function(x)
            in_keys, _ = _storage_bytes(x)
            out_keys, out_bytes = _storage_bytes(out)
            own = sum(key[2] for key in saved - in_keys - out_keys)
            seconds = []
            for _ in range(repeats):
                _synchronize(x)
                start = time.perf_counter()
                with torch.enable_grad():
                    again = function(x)
                _synchronize(again)
                seconds.append(time.perf_counter() - start)
                del again
            layers.append(
                LayerProfile(
                    name=_name(function),
                    saved_bytes=own,
                    output_bytes=out_bytes,
                    saves_output=bool(saved & out_keys),
                    forward_seconds=statistics.median(seconds),
                )
            )
            h = _detached(out)
            del out, x
            if not _tensors(h):
                raise TypeError(
                    f"functions[{index}]: returned {type(h).__name__}; every layer must return "
                    "a tensor (or a tuple of tensors) for the next one"
                )
    return Profile(input_bytes, tuple(layers), _region_overhead(input, repeats))


def _region_overhead(input: Any, repeats: int) -> float:
    """Seconds one checkpoint region adds to a step besides re-running its layers: a region
    around a single cheap op, forward and backward, against the op alone."""
    device = next(iter(_tensors(input))).device if _tensors(input) else torch.device("cpu")
    x = torch.ones(8, device=device, requires_grad=True)

    def op(t: torch.Tensor) -> torch.Tensor:
        return t * 2.0

    def step(wrapped: bool) -> float:
        _synchronize(x)
        start = time.perf_counter()
        y = checkpoint(op, x, use_reentrant=False, preserve_rng_state=True) if wrapped else op(x)
        y.sum().backward()
        _synchronize(x)
        return time.perf_counter() - start

    rng = torch.random.get_rng_state()
    for wrapped in (False, True):
        step(wrapped)  # warm-up
    samples = [step(True) - step(False) for _ in range(max(5, 3 * repeats))]
    torch.random.set_rng_state(rng)
    return max(0.0, statistics.median(samples))
