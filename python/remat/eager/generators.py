"""Random number generators besides torch's default ones, kept right under measuring and
checkpointing: generators a model keeps (``torch.randn(..., generator=self.gen)``, a
``numpy.random.default_rng()``, ``random.Random()`` or NumPy ``RandomState`` held by a module),
and Python's and NumPy's global generators (a drop-path drawn with ``random.random()``).

torch.utils.checkpoint preserves the default CPU and CUDA generators around a re-run, not these.
Here:

- measuring (which runs blocks more often than training would) puts each back as it found it,
  as it does the default ones;
- a checkpoint region's re-run in backward starts each from the state its forward found, so it
  draws the same numbers, and leaves it as it was before the re-run.

A module's generators are its attributes that are generators, and the torch generators its calls
were seen passing to ops while measured (given as an argument, or reached through a global). A
torch generator reached only through a global and never seen while measured is not known, nor
is a host generator (NumPy's or Python's) reached other than as a module's attribute or the
global one. The first step measures a block inside the region that trains it: a torch generator
first seen there is noted by that region's replay before it draws (see note_draws).
"""

from __future__ import annotations

import random
import sys
import weakref
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from ..saved_memory import torch_checkpoint_packs
from .numpy_state import NUMPY_STATE
from .op_facts import OpFacts, facts_of, generators_given


class GeneratorLedger:
    """Per module: the generators its calls were seen drawing from. Its attributes that are
    generators are looked up on every call (a model may assign a new one, reseeded, each epoch)."""

    def __init__(self) -> None:
        self._seen: weakref.WeakKeyDictionary[nn.Module, list[torch.Generator]] = (
            weakref.WeakKeyDictionary()
        )

    def of(self, modules: Iterable[nn.Module]) -> list[Any]:
        found: dict[int, Any] = {}
        known = _ACCESS  # every attribute of every submodule, at every call: kept lean
        for module in modules:
            for value in vars(module).values():
                access = known.get(type(value))
                if access is None:
                    access = _access_of(type(value))
                if access:
                    found.setdefault(id(value), value)
            for generator in self._seen.get(module, ()):
                found.setdefault(id(generator), generator)
        return list(found.values())

    def record(self, modules: Iterable[nn.Module], generator: torch.Generator) -> None:
        for module in modules:
            seen = self._seen.setdefault(module, [])
            if all(g is not generator for g in seen):
                seen.append(generator)


LEDGER = GeneratorLedger()

# How a generator's state is read and set.
_Access = tuple[Callable[[Any], Any], Callable[[Any, Any], None]]

# By type: how its values' state is read and set, or () for a type that is no generator.
# isinstance goes through a Python metaclass check, and every attribute of every submodule is
# asked at every measuring run.
_ACCESS: dict[type, _Access | tuple[()]] = {}


def _access_of(kind: type) -> _Access | None:
    found = _ACCESS.get(kind)
    if found is None:
        found = _ACCESS[kind] = _find_access(kind) or ()
    return found or None


def _find_access(kind: type) -> _Access | None:
    if issubclass(kind, (torch.Generator, _HostGenerators)):
        return (lambda g: g.get_state()), (lambda g, state: g.set_state(state))
    if issubclass(kind, random.Random):
        # SystemRandom draws from the operating system: it has no state to replay.
        if issubclass(kind, random.SystemRandom):
            return None
        return (lambda g: g.getstate()), (lambda g, state: g.setstate(state))
    numpy = sys.modules.get("numpy")  # a NumPy type exists only once NumPy is imported
    if numpy is None:
        return None
    if issubclass(kind, numpy.random.RandomState):
        return (lambda g: g.get_state()), (lambda g, state: g.set_state(state))
    if issubclass(kind, numpy.random.Generator):
        return _bit_generator_state, _set_bit_generator_state
    if issubclass(kind, numpy.random.BitGenerator):
        return (lambda g: g.state), _set_numpy_state
    return None


def _bit_generator_state(generator: Any) -> Any:
    return generator.bit_generator.state


def _set_bit_generator_state(generator: Any, state: Any) -> None:
    generator.bit_generator.state = state


def _set_numpy_state(bit_generator: Any, state: Any) -> None:
    bit_generator.state = state


# The scopes (_PreservedState) open now, innermost last: a generator first seen inside them is
# noted by each, with its state from before its first draw.
_OPEN: list["GeneratorStates"] = []


class _HostGenerators:
    """Python's global generator, and NumPy's once it is imported, as one generator (NumPy's
    read and put back cheaply where that is exact: see numpy_state.py)."""

    def get_state(self) -> Any:
        return random.getstate(), NUMPY_STATE.snapshot()

    def set_state(self, state: Any) -> None:
        python, numpy_state = state
        random.setstate(python)
        NUMPY_STATE.restore(numpy_state)


_HOST = _HostGenerators()


def _state(generator: Any) -> Any:
    get, _ = _access(generator)
    with _disable_current_modes():
        return get(generator)


def _set_state(generator: Any, state: Any) -> None:
    _, put = _access(generator)
    with _disable_current_modes():
        put(generator, state)


def _access(generator: Any) -> _Access:
    access = _access_of(type(generator))
    assert access is not None, f"{type(generator).__name__} is no generator"
    return access


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


# The checkpoint regions whose forward runs now, innermost last: a generator first seen in it
# (the first step measures inside the region) is replayed from its state before its first draw.
_FORWARDS: list["GeneratorReplay"] = []


def note_draws(modules: Sequence[nn.Module], facts: OpFacts, args: Any, kwargs: dict) -> None:
    """Called before an op with its arguments: a generator among them is recorded for `modules`
    and noted, before it draws, by the open scopes and the regions whose forward runs."""
    for generator in generators_given(facts, args, kwargs):
        LEDGER.record(modules, generator)
        for scope in _OPEN:
            scope.note(generator)
        for replay in _FORWARDS:
            replay.note(generator)


class GeneratorWatch(TorchDispatchMode):
    """While a measured call runs: which generators its ops are given."""

    def __init__(self, modules: Sequence[nn.Module]) -> None:
        super().__init__()
        self._modules = modules
        self.dispatched = 0  # ops seen
        # The measuring pack hook (set by CallWatch), and whether some op's saves went to a
        # torch.utils.checkpoint region's hooks instead (a checkpoint inside the call).
        self.own_pack: Any = None
        self.inner_checkpoint = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        self.dispatched += 1
        if self.own_pack is not None and not self.inner_checkpoint:
            self.inner_checkpoint = torch_checkpoint_packs(self.own_pack)
        note_draws(self._modules, facts_of(func), args, kwargs)
        return func(*args, **kwargs)


class GeneratorReplay:
    """The generators of one checkpoint call's modules. Its first run is the forward; every
    later run is a re-run in backward, which starts from the forward's states.

    A re-run sets (and afterwards puts back) only the generators whose state moved since the
    forward began: one that did not move was not drawn from by the forward, so the re-run,
    which repeats the forward, draws nothing from it either. NumPy's global state costs about
    as much to read and set in full as the block's small ops (tens of microseconds, each way),
    and almost no block draws from it (numpy_state.py reads it cheaply where that is exact)."""

    def __init__(self, modules: Sequence[nn.Module], ledger: GeneratorLedger = LEDGER) -> None:
        self._generators: list[Any] = [_HOST, *ledger.of(modules)]
        self._forward: list[Any] | None = None

    def note(self, generator: Any) -> None:
        """A generator its forward draws from, seen before the draw (see note_draws)."""
        assert self._forward is not None
        if all(g is not generator for g in self._generators):
            self._generators.append(generator)
            self._forward.append(_state(generator))

    def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._forward is None:
            self._forward = [_state(g) for g in self._generators]
            _FORWARDS.append(self)
            try:
                return function(*args, **kwargs)
            finally:
                _FORWARDS.remove(self)
        moved = []
        for generator, state in zip(self._generators, self._forward):
            current = _state(generator)
            with _disable_current_modes():  # a re-run under SAC: not one of the block's ops
                same = _same_state(current, state)
            if not same:
                moved.append((generator, current))
                _set_state(generator, state)
        try:
            return function(*args, **kwargs)
        finally:  # a re-run may stop early
            for generator, current in moved:
                _set_state(generator, current)


def _same_state(a: Any, b: Any) -> bool:
    """Whether two generator states are equal (tensors, NumPy arrays, tuples of them; False
    when they cannot be compared, so that the state is set)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    try:
        return bool(a == b)
    except (ValueError, RuntimeError):  # containers of arrays or tensors
        if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)) and len(a) == len(b):
            return all(_same_state(x, y) for x, y in zip(a, b))
        if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
            return all(_same_state(a[key], b[key]) for key in a)
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(a, numpy.ndarray):
            return isinstance(b, numpy.ndarray) and bool(numpy.array_equal(a, b))
        return False
