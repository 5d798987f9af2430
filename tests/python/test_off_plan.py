"""Calls off the plan: each falls back to a checkpoint region, stays exact and warns once; and
what the handle says when a step breaks its assumptions (inputs or buffers changed in place,
calls outside the forward, a model called twice before its backward)."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest
import torch
from torch import nn

import remat
import remat.eager
import remat.torch as rt
from exact_training import _warned, assert_same, loss_of, train
from zoo.shapes import (
    MLPBlock,
    ResidualOutside,
)


class ScalesItsInput(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.mlp = MLPBlock(width)

    def forward(self, x, mask):
        mask.mul_(0.5)  # legal without checkpointing: nothing saved either tensor
        x.mul_(0.5)
        return self.mlp(x * mask)


@pytest.mark.parametrize("granularity", ["op", "block"])
def test_a_block_that_changes_its_input_in_place_is_named(granularity):
    # Measuring gave autograd's "a leaf Variable that requires grad is being used in an
    # in-place operation", naming nothing (and a region cannot re-run such a block).
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(ScalesItsInput() for _ in range(2))

        def forward(self, x):
            x = x * 1.0
            for layer in self.layers:
                x = layer(x, torch.ones(32))
            return x

    model = Model()
    rt.auto_checkpoint(model, activation_budget="1GiB", granularity=granularity)
    with pytest.raises(ValueError, match="ScalesItsInput changes an input in place"):
        model(torch.randn(4, 32)).sum().backward()


class Encoder(nn.Module):
    def __init__(self, chain: bool):
        super().__init__()
        blocks = [MLPBlock(32) for _ in range(3)]
        self.layers = nn.Sequential(*blocks) if chain else nn.ModuleList(blocks)

    def encode(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x

    def forward(self, x):
        if isinstance(self.layers, nn.Sequential):
            return self.layers(x)
        return self.encode(x)


def test_ways_the_budget_is_not_kept_are_said():
    # Each held up to twice the budget, or ran without checkpointing, and said nothing.
    x = torch.randn(8, 32)
    model = Encoder(chain=False)
    rt.auto_checkpoint(model, activation_budget="1GiB")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model(x).sum().backward()
        model.encode(x).sum().backward()  # not through forward
        (model(x) - model(x)).sum().backward()  # two calls, one backward
    assert _warned(record, "called while the model's forward was not running")
    assert _warned(record, "called again before the backward of its previous call")

    # The usual loss pattern drops each output at once; only its graph lives on.
    model = Encoder(chain=False)
    handle = rt.auto_checkpoint(model, activation_budget="1GiB")
    model(x).sum().backward()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        first = model(x).sum()
        second = model(x).square().sum()
        (first + second).backward()
    assert _warned(record, "called again before the backward of its previous call")
    handle.remove()

    siamese = nn.Module()
    siamese.encoder = Encoder(chain=True)
    siamese.forward = lambda a, b: siamese.encoder(a) - siamese.encoder(b)
    rt.auto_checkpoint(siamese, activation_budget="1GiB", blocks=siamese.encoder.layers)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        siamese(x, x).sum().backward()
    assert _warned(record, "called twice in one step")


def test_the_budget_warnings_stay_quiet_on_ordinary_training():
    x = torch.randn(8, 32)
    model = Encoder(chain=False)
    rt.auto_checkpoint(model, activation_budget="1GiB")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):  # gradient accumulation: forward, backward, forward, backward
            model(x).sum().backward()
        kept = model(x)  # an output kept after its backward
        kept.sum().backward()
        model(x).sum().backward()
        model(x).sum()  # a loss dropped without a backward: its graph is gone
        model(x).sum().backward()
        with torch.no_grad():
            model.encode(x)  # evaluation outside forward
        rt.plan(list(model.layers), x, activation_budget="1GiB")  # measuring runs the blocks


def test_a_call_off_the_plan_falls_back_exactly_with_a_warning():
    class Switch(ResidualOutside):
        extra = False

        def forward(self, x):
            x = super().forward(x)
            return x + self.layers[0](x) if self.extra else x

    torch.manual_seed(0)
    reference = Switch()
    x = torch.randn(16, 32)
    model = copy.deepcopy(reference)
    handle = rt.auto_checkpoint(model, activation_budget=1)  # below anything: raises at planning
    with pytest.raises(remat.InputError, match="^activation_budget: 1 byte .* least peak any plan"):
        model(x)
    handle.remove()
    handle = rt.auto_checkpoint(model, activation_budget=2**30)
    assert_same(train(model, (x,), {}, steps=1), train(reference, (x,), {}, steps=1))
    model.extra = reference.extra = True  # the same inputs, one block call more than planned
    with pytest.warns(RuntimeWarning, match=r"does not match the plan.*\(more block calls than"):
        got = train(model, (x,), {}, steps=2)
    assert_same(got, train(reference, (x,), {}, steps=2))
    assert any("does not match" in w for w in handle.warnings)


@dataclasses.dataclass
class Masks:
    causal: torch.Tensor
    window: int


@pytest.mark.parametrize(
    "planned, got, said",
    [
        ((torch.randn(2, 3, requires_grad=True),), (torch.randn(2, 3),), "[0]: requires_grad"),
        ((torch.randn(2, 3),), (torch.randn(4, 3),), "[0]: shape (4, 3), planned (2, 3)"),
        ((torch.randn(2), 3), (torch.randn(2), 4), "[1]: int value 4, planned 3"),
        ((torch.randn(2),), (torch.randn(2), 1.0), "2 items, planned 1"),
        (({"mask": torch.ones(2)},), ({"mask": None},), "[0]['mask']: None, planned a tensor"),
        (
            (Masks(torch.ones(2), 4),),
            (Masks(torch.ones(2), 8),),
            "[0].window: int value 8, planned 4",
        ),
        ((Masks(torch.ones(2), 4),), ((torch.ones(2), 4),), "[0]: a tuple of 2, planned a "),
    ],
)
def test_a_call_off_the_plan_is_told_where_it_differs(planned, got, said):
    from remat.eager._runtime import _signature, signature_difference

    found = signature_difference(_signature(planned, ints=True), _signature(got, ints=True), "")
    assert said in found, found
    assert signature_difference(_signature(got), _signature(got), "") is None


def test_a_plan_is_not_reused_after_unfreezing_or_under_autocast():
    """Which parameters train and autocast change what backward saves: a plan made with the
    blocks frozen, or in float32, must not be followed once they train or under bfloat16
    autocast (it held 1.6x and 1.4x the budget); each gets its own plan, which fits."""
    torch.manual_seed(0)
    model = ResidualOutside(dropout=0.0)
    x = torch.randn(16, 32)
    measured = rt.measure(model, x, verbose=False)
    budget = (measured.least_activation_budget_bytes + measured.no_checkpoint_bytes) // 2

    def peak():
        with rt.SavedTensorMeter(model) as meter:
            out = model(x)
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                loss = loss_of(out)
            loss.backward()
        return meter.peak_bytes

    handle = rt.auto_checkpoint(model, activation_budget=budget)
    for p in model.parameters():
        p.requires_grad_(False)
    x.requires_grad_(True)
    loss_of(model(x)).backward()  # measures and plans, frozen
    assert peak() <= budget
    for p in model.parameters():
        p.requires_grad_(True)
    loss_of(model(x)).backward()  # measures again: other parameters train
    assert len(handle.plans) == 2
    assert peak() <= handle.plan.predicted_peak_bytes <= budget
    with torch.autocast("cpu", torch.bfloat16):
        loss_of(model(x)).backward()
        assert len(handle.plans) == 3
        assert peak() <= budget
    handle.remove()


def test_a_first_step_that_raises_plans_nothing():
    """A first step cut short by an exception measured only some blocks: no plan is made from
    it, and the next step measures all of them (it once planned 2 of 4 blocks and ran the rest
    off-plan, checkpointed, for good)."""

    class Failing(ResidualOutside):
        fail = True

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                if i == 2 and self.fail:
                    raise RuntimeError("a bad batch")
                x = x + layer(x)
            return x

    torch.manual_seed(0)
    reference = Failing()
    model = copy.deepcopy(reference)
    x = torch.randn(16, 32)
    handle = rt.auto_checkpoint(model, activation_budget="1GiB")
    with pytest.raises(RuntimeError, match="a bad batch"):
        model(x)
    assert not handle.plans
    model.fail = reference.fail = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = train(model, (x,), {})
    assert_same(got, train(reference, (x,), {}))
    assert len(handle.plan.profile.layers) == len(model.layers) and handle.plan.regions == ()


def test_a_buffer_that_first_changes_later_is_said_and_still_ends_right():
    """A block that starts counting only from a later step (in place, so its version counter
    moves): that step's re-runs cannot start from the old count, which is said; the count still
    ends as without checkpointing, and the next step keeps it like the others."""

    class LateCounter(MLPBlock):
        counting = False

        def __init__(self, width):
            super().__init__(width)
            self.register_buffer("count", torch.zeros(()))

        def forward(self, x, scale=1.0):
            if self.counting:
                with torch.no_grad():
                    self.count += 1
            return super().forward(x) + self.count

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(LateCounter(32) for _ in range(6))

        def forward(self, x):
            for layer in self.layers:
                x = x + layer(x)
            return x

    torch.manual_seed(0)
    reference = Model()
    x = torch.randn(16, 32)
    measured = rt.measure(copy.deepcopy(reference), x, verbose=False)
    model = copy.deepcopy(reference)
    handle = rt.auto_checkpoint(model, activation_budget=measured.least_activation_budget_bytes)
    assert_same(train(model, (x,), {}, steps=1), train(reference, (x,), {}, steps=1))
    assert handle.plan.regions
    for m in (model, reference):
        for layer in m.layers:
            layer.counting = True
    with pytest.warns(RuntimeWarning, match="count in forward for the first time"):
        assert_same(train(model, (x,), {}, steps=1), train(reference, (x,), {}, steps=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_same(train(model, (x,), {}, steps=2), train(reference, (x,), {}, steps=2))
    assert [float(layer.count) for layer in model.layers] == [3.0] * 6


def test_an_input_changed_in_place_after_its_region_is_named():
    """x += block(x): a region's re-run needs x as the block got it. The first step runs every
    block as a region, so its backward fails in autograd, naming no block; a warning names the
    blocks and the fix first. Measured outside training (example_inputs=), a budget that needs no
    region trains exactly."""

    class Doubling(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(16, 16)

        def forward(self, x):
            return torch.tanh(self.linear(x * 2.0))

    class InPlaceResidual(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Doubling() for _ in range(4))

        def forward(self, x):
            x = x * 1.0
            for layer in self.layers:
                x += layer(x)
            return x

    torch.manual_seed(0)
    reference = InPlaceResidual()
    x = torch.randn(8, 16)
    model = copy.deepcopy(reference)
    handle = rt.auto_checkpoint(model, activation_budget="1GiB")
    with pytest.warns(RuntimeWarning, match=r"model.layers.0.*changed in place after the block"):
        out = model(x)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss_of(out).backward()
    handle.remove()
    model = copy.deepcopy(reference)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rt.auto_checkpoint(model, activation_budget="1GiB", example_inputs=(x,))
        assert_same(train(model, (x,), {}), train(reference, (x,), {}))


class RouterBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(32, 4)
        self.mlp = MLPBlock(32)

    def forward(self, x):
        weights = torch.softmax(self.router(x), dim=-1)
        return x + self.mlp(x) * weights[..., :1]


def _record_output(module, inputs, output):
    module.sink.append(output)


class RecordsRouterLogits(nn.Module):
    """As Hugging Face's MoE models with output_router_logits=True: a forward hook on each
    router appends its logits to a list the loss reads (an auxiliary loss)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(RouterBlock() for _ in range(4))
        self.recorded: list[torch.Tensor] = []
        for layer in self.layers:
            layer.router.sink = self.recorded
            layer.router.register_forward_hook(_record_output)

    def forward(self, x):
        self.recorded.clear()
        for layer in self.layers:
            x = layer(x)
        aux = sum(logits.logsumexp(-1).mean() for logits in self.recorded)
        return x + aux, len(self.recorded)


def test_hooks_that_record_inside_blocks_see_the_training_runs_only():
    # The runs that only measure a block's ops fired them too: the loss read tensors of a graph
    # never back-propagated ("a graph built while measuring was back-propagated").
    torch.manual_seed(0)
    model, x = RecordsRouterLogits(), torch.randn(16, 32)
    reference = copy.deepcopy(model)
    measured = rt.measure(copy.deepcopy(model), x, loss_fn=lambda out: out[0].sum(), verbose=False)
    handle = rt.auto_checkpoint(model, activation_budget=measured.least_activation_budget_bytes)
    for _ in range(2):
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
            out, recorded = m(x)
            assert recorded == 4
            loss_of(out).backward()
        for a, b in zip(model.parameters(), reference.parameters()):
            assert torch.equal(a.grad, b.grad)
    assert handle.plan.regions
