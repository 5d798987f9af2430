"""Random number generators besides torch's default ones, kept right under measuring and
checkpointing: torch.Generator objects of the model's own (``torch.randn(..., generator=
self.gen)``), and Python's and NumPy's global generators (a drop-path drawn with
``random.random()``).

torch.utils.checkpoint preserves the default CPU and CUDA generators around a re-run, not these.
Here:

- measuring (which runs blocks more often than training would) puts each back as it found it,
  as it does the default ones;
- a checkpoint region's re-run in backward starts each from the state its forward found, so it
  draws the same numbers, and leaves it as it was before the re-run.

A module's generators are its attributes that are generators, and those its calls were seen
passing to ops while measured (a generator given as an argument, or reached through a global).
One reached only through a global and never seen while measured is not known.
"""

from __future__ import annotations

import random
import sys
import weakref
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes


class GeneratorLedger:
    """Per module: the generators its calls were seen drawing from. Its attributes that are
    generators are looked up on every call (a model may assign a new one, reseeded, each epoch)."""

    def __init__(self) -> None:
        self._seen: weakref.WeakKeyDictionary[nn.Module, list[torch.Generator]] = (
            weakref.WeakKeyDictionary()
        )

    def of(self, modules: Iterable[nn.Module]) -> list[torch.Generator]:
        found: dict[int, torch.Generator] = {}
        for module in modules:
            attributes = [v for v in vars(module).values() if isinstance(v, torch.Generator)]
            for generator in (*attributes, *self._seen.get(module, ())):
                found.setdefault(id(generator), generator)
        return list(found.values())

    def record(self, modules: Iterable[nn.Module], generator: torch.Generator) -> None:
        for module in modules:
            seen = self._seen.setdefault(module, [])
            if all(g is not generator for g in seen):
                seen.append(generator)


LEDGER = GeneratorLedger()

# The scopes (_PreservedState) open now, innermost last: a generator first seen inside them is
# noted by each, with its state from before its first draw.
_OPEN: list["GeneratorStates"] = []


class _HostGenerators:
    """Python's global generator, and NumPy's once it is imported, as one generator."""

    def get_state(self) -> Any:
        numpy = sys.modules.get("numpy")
        return random.getstate(), None if numpy is None else numpy.random.get_state()

    def set_state(self, state: Any) -> None:
        python, numpy_state = state
        random.setstate(python)
        numpy = sys.modules.get("numpy")
        if numpy is not None and numpy_state is not None:
            numpy.random.set_state(numpy_state)


_HOST = _HostGenerators()


def _state(generator: Any) -> Any:
    with _disable_current_modes():
        return generator.get_state()


def _set_state(generator: Any, state: Any) -> None:
    with _disable_current_modes():
        generator.set_state(state)


class GeneratorStates:
    """Puts back, on exit, every generator of `modules` (and every one first seen inside) as it
    was on entry."""

    def __init__(self, modules: Sequence[nn.Module], ledger: GeneratorLedger = LEDGER) -> None:
        self._modules, self._ledger = modules, ledger
        self._saved: dict[int, tuple[Any, Any]] = {}

    def note(self, generator: Any) -> None:
        if id(generator) not in self._saved:
            self._saved[id(generator)] = (generator, _state(generator))

    def __enter__(self) -> "GeneratorStates":
        for generator in (_HOST, *self._ledger.of(self._modules)):
            self.note(generator)
        _OPEN.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _OPEN.remove(self)
        for generator, state in self._saved.values():
            _set_state(generator, state)


def measuring_now() -> bool:
    """Whether remat is measuring (a _PreservedState is open)."""
    return bool(_OPEN)


def _generators_in(args: Any, kwargs: dict[str, Any]) -> list[torch.Generator]:
    values = list(args) + list(kwargs.values())
    return [v for v in values if isinstance(v, torch.Generator)]


def note_draws(modules: Sequence[nn.Module], args: Any, kwargs: dict[str, Any]) -> None:
    """Called before an op with its arguments: a generator among them is recorded for `modules`
    and noted, before it draws, by the open scopes."""
    for generator in _generators_in(args, kwargs):
        LEDGER.record(modules, generator)
        for scope in _OPEN:
            scope.note(generator)


class GeneratorWatch(TorchDispatchMode):
    """While a measured call runs: which generators its ops are given."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        super().__init__()
        self._modules = modules
        self.dispatched = 0  # ops seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        self.dispatched += 1
        note_draws(self._modules, args, kwargs)
        return func(*args, **kwargs)


class GeneratorReplay:
    """The generators of one checkpoint call's modules. Its first run is the forward; every
    later run is a re-run in backward, which starts from the forward's states."""

    def __init__(self, modules: Sequence[nn.Module], ledger: GeneratorLedger = LEDGER) -> None:
        self._generators: list[Any] = [_HOST, *ledger.of(modules)]
        self._forward: list[Any] | None = None

    def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._forward is None:
            self._forward = [_state(g) for g in self._generators]
            return function(*args, **kwargs)
        current = [_state(g) for g in self._generators]
        for generator, state in zip(self._generators, self._forward):
            _set_state(generator, state)
        try:
            return function(*args, **kwargs)
        finally:  # a re-run may stop early
            for generator, state in zip(self._generators, current):
                _set_state(generator, state)
