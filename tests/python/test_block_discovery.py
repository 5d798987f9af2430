"""Which blocks auto_checkpoint finds or is given, and blocks it cannot plan as found: blocks that
checkpoint inside themselves, skip themselves, or are called in other numbers than planned."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import remat.torch as rt
from exact_training import _warned, loss_of
from zoo.shapes import (
    HFModel,
    MLPBlock,
    NestedStages,
)


def test_discovery_says_which_stack_of_an_encoder_decoder_it_left_out():
    # It picked the decoder's blocks (the most parameters) and left the encoder's out of the
    # checkpointing and the budget, silently: T5's step saved 1.21 MB at a 0.34 MB budget.
    class Stack(nn.Module):
        def __init__(self, depth, width):
            super().__init__()
            self.block = nn.ModuleList(MLPBlock(width) for _ in range(depth))

        def forward(self, x):
            for block in self.block:
                x = x + block(x)
            return x

    class EncoderDecoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.decoder = Stack(2, 32), Stack(3, 32)

        def forward(self, x):
            return self.decoder(self.encoder(x))

    model = EncoderDecoder()
    with pytest.warns(RuntimeWarning, match=r"left out model.encoder.block \(2 × MLPBlock\)"):
        handle = rt.auto_checkpoint(model, activation_budget="1GiB")
    assert "model.decoder.block" in str(handle.blocks)
    handle.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        both = [*model.encoder.block, *model.decoder.block]
        rt.auto_checkpoint(model, activation_budget="1GiB", blocks=both).remove()


def test_discovery_picks_the_repeated_blocks_not_an_inner_mlp():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.Linear(32, 8), nn.Dropout())
            self.attn = nn.Linear(8, 8)

        def forward(self, x):
            return x + self.mlp(self.attn(x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Block() for _ in range(3))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    net = Net()
    found = rt.find_blocks(net)
    assert found.path == "model.layers" and list(found.modules) == list(net.layers)
    assert "3 × Block" in found.describe()
    assert rt.find_blocks(net, "layers").modules == found.modules
    assert rt.find_blocks(net, "model.layers.1.mlp").names[0] == "model.layers.1.mlp.0"
    with pytest.raises(ValueError, match="has no member 'nope'"):
        rt.find_blocks(net, "layers.nope")
    nested = rt.find_blocks(NestedStages())
    assert nested.path == "model.stages" and len(nested.modules) == 6
    assert nested.names[3] == "model.stages.1.1"
    hf = rt.find_blocks(HFModel())
    assert hf.path == "model.layers" and hf.chain is None
    handle = rt.auto_checkpoint(HFModel(), activation_budget="1GiB", verbose=True)
    assert "model.layers (4 × HFDecoderLayer), checkpointed each block on its own" in str(
        handle.blocks
    )
    with pytest.raises(ValueError, match="blocks="):
        rt.find_blocks(nn.Linear(3, 3))


def test_measure_names_a_reentrant_checkpoint_inside_a_block():
    # torch's own message spoke of .grad() and an `inputs` argument the user never passed.
    class Reentrant(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = MLPBlock(32)

        def forward(self, x):
            return torch.utils.checkpoint.checkpoint(self.mlp, x, use_reentrant=True)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Linear(32, 32)
            self.layers = nn.ModuleList(Reentrant() for _ in range(3))

        def forward(self, x):
            x = self.embed(x)
            for layer in self.layers:
                x = x + layer(x)
            return x

    with pytest.raises(RuntimeError, match="layers.0 runs torch.utils.checkpoint inside"):
        rt.measure(Model(), torch.randn(8, 32), verbose=False)


@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("granularity", ["op", "block"])
def test_a_block_that_checkpoints_inside_is_refused_at_the_first_step(reentrant, granularity):
    # Its checkpoint's saves went to the checkpoint's hooks, unseen: the plan predicted the
    # region's input alone, and a step measured 2.6 times the budget.
    class CheckpointsInside(nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = MLPBlock(32)

        def forward(self, x):
            return x + torch.utils.checkpoint.checkpoint(self.mlp, x, use_reentrant=reentrant)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(CheckpointsInside() for _ in range(3))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    model = Model()
    rt.auto_checkpoint(model, activation_budget="1GiB", granularity=granularity)
    with pytest.raises(
        RuntimeError,
        match=r"layers.0 runs torch.utils.checkpoint inside.*"
        r"gradient_checkpointing_disable",
    ):
        model(torch.randn(8, 32, requires_grad=True)).sum().backward()


class SkipsItself(nn.Module):
    """A block that may return its input untouched (LayerDrop inside the block)."""

    def __init__(self):
        super().__init__()
        self.mlp = MLPBlock(32)
        self.skip = False

    def forward(self, x):
        return x if self.skip else x + self.mlp(x)


class LayerDropModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(SkipsItself() for _ in range(6))
        self.head = nn.Linear(32, 32)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


@pytest.mark.parametrize("granularity", ["op", "block"])
def test_a_block_that_skipped_itself_in_the_first_step_is_planned_as_its_kind(granularity):
    # Planned as saving nothing, it ran plainly once it worked: 3.5 times the budget.
    torch.manual_seed(0)
    model, x = LayerDropModel(), torch.randn(16, 32)
    measured = rt.measure(copy.deepcopy(model), x, verbose=False)
    handle = rt.auto_checkpoint(
        model, activation_budget=measured.least_activation_budget_bytes, granularity=granularity
    )
    for layer in model.layers[1:5]:
        layer.skip = True  # skipped in the measured step only
    loss_of(model(x)).backward()
    for layer in model.layers:
        layer.skip = False
    with rt.SavedTensorMeter(model) as meter:
        out = model(x)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
            loss = loss_of(out)
        loss.backward()
    plan = handle.plan
    assert (
        meter.peak_bytes <= plan.predicted_peak_bytes <= measured.least_activation_budget_bytes
    ), plan
    assert len(plan.regions) == 6


class DropsLayersInItsLoop(nn.Module):
    """Hugging Face's LayerDrop: the model's loop skips the layers in `skipped`."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(MLPBlock(32) for _ in range(4))
        self.skipped: set[int] = set()

    def forward(self, x):
        for index, layer in enumerate(self.layers):
            if index not in self.skipped:
                x = x + layer(x)
        return x


def test_a_step_that_calls_blocks_its_plan_never_saw_makes_the_next_one_measure():
    # Planned from a first step that ran one layer, every later step ran the others as regions
    # beside that plan: a helper's Wav2Vec2 held 1.94 times the budget, step after step.
    torch.manual_seed(0)
    model, x = DropsLayersInItsLoop(), torch.randn(16, 32)
    reference = copy.deepcopy(model)
    budget = rt.measure(copy.deepcopy(model), x, verbose=False).least_activation_budget_bytes
    handle = rt.auto_checkpoint(model, activation_budget=budget)
    peaks = []
    for skipped in ({1, 2, 3}, set(), set(), set(), {2}):
        model.skipped = reference.skipped = skipped
        for m in (model, reference):
            m.zero_grad(set_to_none=True)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            with rt.SavedTensorMeter(model) as meter:
                loss_of(model(x)).backward()
        peaks.append(meter.peak_bytes)
        loss_of(reference(x)).backward()
        for a, b in zip(model.parameters(), reference.parameters()):
            assert a.grad is b.grad is None or torch.equal(a.grad, b.grad)
        if skipped == set() and len(peaks) == 2:  # the step that outgrew the plan
            assert _warned(record, "measures again, to plan for every call it makes")
    assert len(handle.plan.profile.layers) == 4
    assert max(peaks[2:]) <= handle.plan.predicted_peak_bytes <= budget, peaks
