"""What auto_checkpoint's first step does, and does not do again: blocks of one kind are
profiled once, SAC's modes are measured only where they could pay, and a chain's plan is tuned
on the training steps that follow, each step exact and within the budget."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn

import remat.torch as rt
from remat.eager.measuring import ops as measure_ops
from remat.eager.measuring.calls import CallMeasurement, measure_call
from remat.eager.measuring.menu import with_menus
from remat.eager.run import recorder, tuning
from remat.eager.types import LayerProfile, Profile


class _Block(nn.Module):
    """A pre-norm MLP block with dropout and a residual, called with a keyword mask."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
        h = self.down(torch.relu(self.up(self.norm(x)))) * scale
        return x + self.drop(h)


class _Stack(nn.Module):
    def __init__(self, depth: int = 4, width: int = 32) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.ones(x.shape[-1])
        for layer in self.layers:
            x = layer(x, scale=scale)
        return self.head(x).pow(2).mean()


def _counting(monkeypatch, owner, name: str) -> list[int]:
    calls = [0]
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def _steps_equal(model: nn.Module, plain: nn.Module, x: torch.Tensor, steps: int) -> None:
    for step in range(steps):
        for net in (plain, model):
            net.zero_grad(set_to_none=True)
            torch.manual_seed(step)
            net(x).backward()
        for a, b in zip(plain.parameters(), model.parameters()):
            assert torch.equal(a.grad, b.grad), step


def test_blocks_of_one_kind_are_recorded_and_their_modes_measured_once(monkeypatch):
    torch.manual_seed(0)
    plain = _Stack()
    model = copy.deepcopy(plain)
    x = torch.randn(8, 16, 32)
    modes = _counting(monkeypatch, measure_ops, "measure_modes")
    recorded = _counting(monkeypatch, recorder, "op_recorder")
    recorded_later = _counting(monkeypatch, measure_ops, "record_ops")
    measured = rt.measure(copy.deepcopy(model), x, blocks="layers", verbose=False)
    modes[0] = recorded[0] = recorded_later[0] = 0
    rt.auto_checkpoint(
        model, activation_budget=measured.no_checkpoint_bytes - 1, blocks="layers", granularity="op"
    )
    _steps_equal(model, plain, x, 3)
    # The first block records its ops in its region's forward and calibrates the modes. Its
    # input, the model's, needs no gradient: the second is of another kind but of the same
    # classes, recorded as it runs too (unless the modes' per-op cost rules it out), and the
    # last two are of the second's kind: nothing is recorded in a run of its own.
    assert 1 <= recorded[0] <= 2 and recorded_later[0] == 0
    assert modes[0] <= 2


def test_a_step_for_new_shapes_reuses_the_modes_measured_for_the_same_ops(monkeypatch):
    """Each new input signature measures a step of its own. The handle keeps what SAC's modes
    cost across those steps: blocks dispatching the same ops at other sizes are priced from the
    first measurement (rebased to their own forward time), not measured again, and the plans
    stay exact."""
    torch.manual_seed(0)
    plain = _Stack()
    model = copy.deepcopy(plain)
    short, long = torch.randn(8, 16, 32), torch.randn(8, 24, 32)
    measured = rt.measure(copy.deepcopy(model), short, blocks="layers", verbose=False)
    handle = rt.auto_checkpoint(
        model, activation_budget=measured.no_checkpoint_bytes - 1, blocks="layers", granularity="op"
    )
    modes = _counting(monkeypatch, measure_ops, "measure_modes")
    _steps_equal(model, plain, short, 2)
    first = modes[0]
    assert first >= 1
    _steps_equal(model, plain, long, 2)  # a second measuring step, for the longer sequence
    assert modes[0] == first, "the modes were measured again for the same ops"
    assert len(handle.plans) == 2


def _plain_runs_take(monkeypatch, seconds: float) -> list[int]:
    """ModesCache's plain timing runs take `seconds` (counted): the rule is checked at both
    sides of its threshold without depending on this machine's timings."""
    calls = [0]

    def plain(function, args, kwargs, forward_seconds, plain_seconds):
        if plain_seconds is None:  # else the caller ran it already
            calls[0] += 1
            plain_seconds = seconds
        return min(forward_seconds, plain_seconds)

    monkeypatch.setattr(measure_ops.ModesCache, "_plain_forward", staticmethod(plain))
    return calls


def test_a_layer_whose_modes_cannot_pay_is_planned_whole(monkeypatch):
    layer = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
    x = torch.randn(4, 16, requires_grad=True)
    cache = measure_ops.ModesCache()
    assert cache.floor_seconds(10**6) == 0.0  # nothing measured: every first kind is measured
    call, ops = measure_ops.measure_with_ops(layer, (x,), {}, set())
    assert ops.dispatched == call.dispatched > 0
    kind = cache.kind(layer, ("x",))
    assert cache.records(kind)
    found = cache.ops_of(kind, layer, (x,), {}, set(), call, ops)
    assert found.replays and found.worth_it and found.modes_seconds is not None
    assert not cache.records(cache.kind(nn.Linear(4, 4), ("y",)))  # the rate is known now

    # A layer of another kind, whose forward the modes' per-op cost at FLOOR_SHARE exceeds.
    rate = cache.floor_seconds(1)
    assert rate > 0
    other = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
    quick = dataclasses.replace(call, forward_seconds=rate * call.dispatched / 2)
    plain_runs = _plain_runs_take(monkeypatch, 1.0)
    skipped = cache.ops_of(cache.kind(other, ("x",)), other, (x,), {}, set(), quick, None)
    assert not skipped.worth_it and not skipped.ops and plain_runs[0] == 0
    slow = dataclasses.replace(call, forward_seconds=1.0)
    kept = cache.ops_of(cache.kind(other, ("z",)), other, (x,), {}, set(), slow, None)
    assert kept.worth_it and kept.ops and kept.replays and plain_runs[0] == 1

    # Planned as a block: no options for it, while the measured one keeps its menu.
    base = LayerProfile("layer", 1024, 256, False, 1e-3)
    profile = with_menus(Profile(256, (base, base)), [skipped, found])
    assert profile.layers[0].options == () and profile.layers[1].options != ()


def test_the_floor_is_weighed_against_a_plain_run(monkeypatch):
    """A first step times a layer as a region under the measuring mode, slower than the layer
    alone: a layer timed slow there but quick alone is not profiled."""
    layer = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
    x = torch.randn(4, 16, requires_grad=True)
    cache = measure_ops.ModesCache()
    call, ops = measure_ops.measure_with_ops(layer, (x,), {}, set())
    cache.ops_of(cache.kind(layer, ("x",)), layer, (x,), {}, set(), call, ops)
    floor = cache.floor_seconds(call.dispatched)
    other = nn.Sequential(nn.Linear(16, 16), nn.Tanh())
    recorded = _counting(monkeypatch, measure_ops, "record_ops")
    inflated = dataclasses.replace(call, forward_seconds=4 * floor)
    plain_runs = _plain_runs_take(monkeypatch, floor / 2)
    found = cache.ops_of(cache.kind(other, ("x",)), other, (x,), {}, set(), inflated, None)
    assert plain_runs[0] == 1 and recorded[0] == 0 and not found.worth_it


def test_the_plain_timing_run_keeps_none_of_the_tensors_autograd_saves():
    """The plain run that weighs the modes builds a graph it never back-propagates. Kept,
    what autograd saved there (a block's activations) added to the first step's peak: the
    zoo's Llama went from 0.64 to 0.90 MiB (bench/zoo_first_step_peak.py). Its saves must not
    reach the hooks around it: the run drops them itself."""
    layer = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16))
    x = torch.randn(4, 16, requires_grad=True)
    reached = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        reached.append(tensor.shape)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x)  # what the hooks see from a run that keeps its saves
        kept = len(reached)
        reached.clear()
        seconds = measure_ops.ModesCache._plain_forward(layer, (x,), {}, 1.0, None)
    assert kept > 0 and reached == [] and 0 < seconds <= 1.0


def test_layers_of_the_same_ops_at_other_sizes_share_one_measuring_of_the_modes(monkeypatch):
    modes = _counting(monkeypatch, measure_ops, "measure_modes")
    _plain_runs_take(monkeypatch, 1.0)  # every layer worth weighing
    cache = measure_ops.ModesCache()
    found = []
    for width in (16, 48):
        layer = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
        x = torch.randn(4, width, requires_grad=True)
        call, ops = measure_ops.measure_with_ops(layer, (x,), {}, set())
        forward = 1.0 + width  # in the planner's unit, whatever it measured
        found.append((cache.complete(layer, (x,), {}, ops, forward), forward))
    assert modes[0] == 1
    (small, small_forward), (large, large_forward) = found
    assert [o.new_bytes for o in small.ops] != [o.new_bytes for o in large.ops]
    # What the modes added to the first one's forward, on the second one's.
    added = small.modes_seconds[0] - small_forward
    assert large.modes_seconds[0] == large_forward + added
    assert large.modes_seconds[1] == small.modes_seconds[1] and large.replays

    other = nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16))
    x = torch.randn(4, 16, requires_grad=True)
    _, ops = measure_ops.measure_with_ops(other, (x,), {}, set())
    cache.complete(other, (x,), {}, ops, 1.0)
    assert modes[0] == 2  # other ops: measured


def test_a_new_kind_of_known_classes_records_as_it_is_measured():
    cache = measure_ops.ModesCache()
    layer = nn.Sequential(nn.Linear(16, 16), nn.ReLU())
    x = torch.randn(4, 16, requires_grad=True)
    call, ops = measure_ops.measure_with_ops(layer, (x,), {}, set())
    cache.ops_of(cache.kind(layer, ("x",)), layer, (x,), {}, set(), call, ops)
    wider = cache.kind(nn.Sequential(nn.Linear(32, 32), nn.ReLU()), ("x",))
    unseen = cache.kind(nn.Sequential(nn.Linear(16, 16), nn.Tanh()), ("x",))
    assert cache.records(wider) and not cache.records(unseen)


def test_measuring_with_ops_matches_measuring_and_profiling_apart():
    torch.manual_seed(0)
    block = _Block(32)
    x = torch.randn(4, 8, 32, requires_grad=True)
    kwargs = {"scale": torch.ones(32)}
    rng = torch.random.get_rng_state()
    call, ops = measure_ops.measure_with_ops(block, (x,), kwargs, set())
    torch.random.set_rng_state(rng)
    alone = measure_call(block, (x,), kwargs, set(), repeats=0)
    torch.random.set_rng_state(rng)
    apart = measure_ops.profile_ops(block, (x,), kwargs, set(), repeats=0)
    assert isinstance(call, CallMeasurement)
    assert _sizes(call.saved_keys) == _sizes(alone.saved_keys)
    assert _sizes(call.output_keys) == _sizes(alone.output_keys)
    assert [(o.name, o.new_bytes, o.cacheable, o.why_not) for o in ops.ops] == [
        (o.name, o.new_bytes, o.cacheable, o.why_not) for o in apart.ops
    ]
    assert ops.last_needed == apart.last_needed and ops.dispatched == apart.dispatched


def test_an_op_whose_storage_address_is_taken_again_keeps_its_own_bytes():
    """The recorder keeps no op's output alive, so a temporary's address can be taken by a
    later storage of the same size, here the layer's output. Each op keeps the bytes it made
    (the temporary's maker is not "returned"), and the output's maker is the one returned."""
    addresses = {}

    def layer(x):
        doubled = x * 2  # not saved: dies once exp has run
        addresses["doubled"] = doubled.untyped_storage().data_ptr()
        grown = torch.exp(doubled)
        del doubled
        out = grown * 3
        addresses["out"] = out.untyped_storage().data_ptr()
        return out

    for width in (24, 32, 48, 64):
        ops = measure_ops.record_ops(
            layer, (torch.randn(width, width, requires_grad=True),), {}, set()
        )
        if addresses["doubled"] == addresses["out"]:
            break
    else:
        pytest.skip("the allocator gave the output a fresh address at every size")
    found = [(o.name, o.new_bytes, o.why_not) for o in ops.ops]
    size = 4 * width * width
    assert found == [
        ("aten.mul.Tensor", size, ""),
        ("aten.exp.default", size, ""),
        ("aten.mul.Tensor", 0, "returned"),
    ], found


def _sizes(keys) -> list[int]:
    """Storage sizes: addresses differ from run to run."""
    return sorted(key[2] for key in keys)


class _Chain(nn.Module):
    def __init__(self, depth: int = 6, width: int = 32) -> None:
        super().__init__()
        self.body = nn.Sequential(
            *(
                nn.Sequential(
                    nn.Linear(width, 2 * width),
                    nn.GELU(),
                    nn.Dropout(0.1),
                    nn.Linear(2 * width, width),
                )
                for _ in range(depth)
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def test_a_chain_is_tuned_on_the_steps_after_the_first_and_each_step_is_exact(monkeypatch):
    torch.manual_seed(0)
    plain = _Chain()
    model = copy.deepcopy(plain)
    x = torch.randn(16, 32)

    def no_timing_in_a_step(*args, **kwargs):
        raise AssertionError("a candidate plan was timed inside a step")

    monkeypatch.setattr(tuning, "_time_step", no_timing_in_a_step)
    measured = rt.measure(copy.deepcopy(model), x, blocks="body", verbose=False)
    handle = rt.auto_checkpoint(
        model,
        activation_budget=measured.no_checkpoint_bytes - 1,
        blocks="body",
        granularity="block",
    )
    peaks = []
    for step in range(8):
        plain.zero_grad(set_to_none=True)
        torch.manual_seed(step)
        _loss(plain(x)).backward()
        model.zero_grad(set_to_none=True)
        torch.manual_seed(step)
        with rt.SavedTensorMeter(model) as meter:
            out = model(x)
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                loss = _loss(out)  # the loss's saves are not the chain's
            loss.backward()
        peaks.append((meter.peak_bytes, handle.plan.predicted_peak_bytes))
        for a, b in zip(plain.parameters(), model.parameters()):
            assert torch.equal(a.grad, b.grad), step
    (plan,) = handle.plans.values()
    labels = [label for label, _ in plan.timings]
    assert "planner" in labels and len(labels) >= 2, plan.timings
    assert plan.choice in labels and not handle.chain.tunings
    assert handle.plan == plan
    for measured_peak, predicted in peaks[1:]:  # every candidate a step ran fits
        assert measured_peak <= predicted <= measured.no_checkpoint_bytes - 1
