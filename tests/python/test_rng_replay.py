"""auto_checkpoint's re-runs replay the random generators a block's forward drew from (torch's,
Python's, NumPy's, and generators a model keeps), and only those, so dropout re-runs exactly."""

from __future__ import annotations

import copy
import random

import numpy
import pytest
import torch
from torch import nn

import remat.torch as rt
from exact_training import loss_of
from zoo.shapes import NoisyModel


def test_a_rerun_sets_only_the_generators_its_forward_drew_from(monkeypatch):
    """Setting NumPy's global state costs about as much as a small block's ops: a re-run
    replays a generator only when its state moved since the forward began, and then it
    re-draws what the forward drew and leaves the state where it found it."""
    from remat.eager import generators

    set_calls = []
    original = generators._set_state
    monkeypatch.setattr(
        generators, "_set_state", lambda g, state: set_calls.append(g) or original(g, state)
    )
    own = torch.Generator().manual_seed(3)

    class Owner(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gen = own

    quiet = generators.GeneratorReplay([Owner()])
    assert quiet.run(lambda: 1.0) == 1.0
    assert quiet.run(lambda: 1.0) == 1.0 and set_calls == []  # nothing drew: nothing set

    noisy = generators.GeneratorReplay([Owner()])
    drawn = noisy.run(
        lambda: (random.random(), float(numpy.random.rand()), torch.rand(1, generator=own))
    )
    after = (random.getstate(), own.get_state())
    again = noisy.run(
        lambda: (random.random(), float(numpy.random.rand()), torch.rand(1, generator=own))
    )
    assert drawn[:2] == again[:2] and torch.equal(drawn[2], again[2])
    assert set_calls.count(generators._HOST) == 2 and set_calls.count(own) == 2  # set, put back
    assert random.getstate() == after[0] and torch.equal(own.get_state(), after[1])


def _same_numpy_state(a, b) -> bool:
    return a[0] == b[0] and numpy.array_equal(a[1], b[1]) and tuple(a[2:]) == tuple(b[2:])


def test_numpy_s_state_is_read_cheaply_only_where_that_is_exact(monkeypatch):
    """NumPy's global state is read from its MT19937 struct when that shows nothing moved
    since the last full read, which had no cached Gaussian; a state with one (a legacy
    Gaussian drawn an odd number of times) is always read and put back in full, since taking
    the cached Gaussian moves no other byte."""
    from remat.eager.numpy_state import NumpyState

    state = NumpyState()
    numpy.random.seed(5)
    first = state.snapshot()
    reads = state.full_reads
    assert state.snapshot() is first and state.full_reads == reads  # nothing moved: no read
    sets = []
    original = numpy.random.set_state
    monkeypatch.setattr(numpy.random, "set_state", lambda s: sets.append(s) or original(s))
    state.restore(first)
    assert sets == []  # already there
    drawn = numpy.random.rand(3)
    state.restore(first)
    assert len(sets) == 1 and numpy.array_equal(numpy.random.rand(3), drawn)

    numpy.random.standard_normal()  # one legacy Gaussian: the next one is cached
    cached = state.snapshot()
    assert cached[3] == 1
    numpy.random.standard_normal()  # takes the cached one: the key and position stay
    again = state.snapshot()
    assert again[3] == 0 and not _same_numpy_state(cached, again)
    state.restore(cached)
    assert _same_numpy_state(numpy.random.get_state(), cached)


def test_a_generator_assigned_anew_every_step_is_replayed():
    # Generator attributes were looked up once per module: one reseeded by assignment each step
    # was not replayed, and the re-runs drew other noise (gradients differed).
    def steps(model):
        grads = []
        for step in range(3):
            for i, layer in enumerate(model.layers):
                layer.gen = torch.Generator().manual_seed(100 * step + i)
            loss_of(model(x)).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            model.zero_grad()
        return grads

    torch.manual_seed(0)
    reference, x = NoisyModel(), torch.randn(16, 32)
    least = rt.measure(copy.deepcopy(reference), x, verbose=False).least_activation_budget_bytes
    model = copy.deepcopy(reference)
    handle = rt.auto_checkpoint(model, activation_budget=least)
    expected, got = steps(copy.deepcopy(reference)), steps(model)
    assert len(handle.plan.regions) >= 2
    assert all(torch.equal(a, b) for ga, gb in zip(got, expected) for a, b in zip(ga, gb))


_NOISE = torch.Generator()  # reached only through this global: no module holds it


class _GlobalNoise(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x)) * torch.rand(x.shape, generator=_NOISE)


class _GlobalNoiseStack(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_GlobalNoise(width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def test_a_generator_first_seen_in_the_first_step_is_replayed_from_before_its_draw():
    """The first step measures each block inside the region that trains it: a generator that
    only the block's ops are seen drawing from (no module holds it) is learned during that
    forward. The region's re-run in backward must start it from its state before that draw,
    as it does for the generators it knew, or the first step's gradients differ."""

    def steps(model):
        grads = []
        for step in range(3):
            _NOISE.manual_seed(step)
            loss_of(model(x)).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            model.zero_grad()
        return grads

    torch.manual_seed(0)
    reference = _GlobalNoiseStack(32, 4)
    x = torch.randn(16, 32)
    least = rt.measure(copy.deepcopy(reference), x, verbose=False).least_activation_budget_bytes
    model = copy.deepcopy(reference)  # a copy measure() never ran: its generator is unknown
    handle = rt.auto_checkpoint(model, activation_budget=least)
    expected, got = steps(copy.deepcopy(reference)), steps(model)
    assert len(handle.plan.regions) >= 2
    for ga, gb in zip(got, expected):
        assert all(torch.equal(a, b) for a, b in zip(ga, gb))


def _host_generator(kind: str, seed: int):
    if kind == "numpy Generator":
        return numpy.random.default_rng(seed)
    if kind == "numpy BitGenerator":
        return numpy.random.PCG64(seed)
    if kind == "numpy RandomState":
        return numpy.random.RandomState(seed)
    return random.Random(seed)


def _draw(generator) -> float:
    if isinstance(generator, numpy.random.BitGenerator):
        return float(numpy.random.Generator(generator).random())
    if isinstance(generator, numpy.random.RandomState):
        return float(generator.rand())
    return float(generator.random())


class _HostNoise(nn.Module):
    """Scales its branch by a number drawn from a generator it holds (a drop-path's coin)."""

    def __init__(self, width: int, kind: str, seed: int) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.rng = _host_generator(kind, seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.linear(x)) * _draw(self.rng)


class _HostNoiseStack(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_HostNoise(32, kind, seed) for seed in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


@pytest.mark.parametrize(
    "kind", ["numpy Generator", "numpy BitGenerator", "numpy RandomState", "random.Random"]
)
def test_a_host_generator_a_block_holds_is_replayed(kind):
    # Only torch generators were replayed: a block's re-run drew the next number from a NumPy
    # or Python generator it held, and the gradients differed with no word.
    torch.manual_seed(0)
    reference, x = _HostNoiseStack(kind), torch.randn(16, 32)
    least = rt.measure(copy.deepcopy(reference), x, verbose=False).least_activation_budget_bytes

    def steps(model):
        grads = []
        for _ in range(3):
            loss_of(model(x)).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
            model.zero_grad()
        return grads

    model, plain = copy.deepcopy(reference), copy.deepcopy(reference)
    handle = rt.auto_checkpoint(model, activation_budget=least)
    expected, got = steps(plain), steps(model)
    assert len(handle.plan.regions) >= 2
    for ga, gb in zip(got, expected):
        assert all(torch.equal(a, b) for a, b in zip(ga, gb))
    # Each generator is left where plain training left it: the re-runs put it back.
    assert [_draw(b.rng) for b in model.blocks] == [_draw(b.rng) for b in plain.blocks]
