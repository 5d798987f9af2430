"""remat.integrations.timm: the blocks it finds in each timm family its docstring names, and a
training step through enable() on each, bit for bit equal to plain training."""

from __future__ import annotations

import copy

import pytest
import torch

from zoo import torchvision_cpu  # noqa: F401  (before timm, which imports torchvision)

timm = pytest.importorskip("timm")

import remat.integrations.timm as remat_timm  # noqa: E402
import remat.torch  # noqa: E402


def _vit():
    from timm.models.vision_transformer import VisionTransformer

    model = VisionTransformer(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=2)
    return model, model.blocks


def _swin():
    from timm.models.swin_transformer import SwinTransformer

    model = SwinTransformer(
        img_size=32, patch_size=4, window_size=4, embed_dim=16, depths=(2, 2), num_heads=(1, 2)
    )
    return model, [b for layer in model.layers for b in layer.blocks]


def _swin_v2():
    from timm.models.swin_transformer_v2 import SwinTransformerV2

    model = SwinTransformerV2(
        img_size=32, patch_size=4, window_size=4, embed_dim=16, depths=(2, 2), num_heads=(1, 2)
    )
    return model, [b for layer in model.layers for b in layer.blocks]


def _convnext():
    from timm.models.convnext import ConvNeXt

    model = ConvNeXt(depths=(1, 2, 1, 1), dims=(16, 32, 32, 32))
    return model, [b for stage in model.stages for b in stage.blocks]


def _efficientnet():
    from timm.models.efficientnet import _gen_efficientnet

    model = _gen_efficientnet("efficientnet_b0", channel_multiplier=0.25, num_classes=10)
    return model, [b for stage in model.blocks for b in stage]


def _resnet():
    from timm.models.resnet import BasicBlock, ResNet

    model = ResNet(BasicBlock, [1, 2, 1, 1], num_classes=10)
    stages = (model.layer1, model.layer2, model.layer3, model.layer4)
    return model, [b for stage in stages for b in stage]


FAMILIES = {
    "vit": _vit,
    "swin": _swin,
    "swin_v2": _swin_v2,
    "convnext": _convnext,
    "efficientnet": _efficientnet,
    "resnet": _resnet,
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_enable_finds_each_familys_blocks_and_trains_bit_for_bit(family):
    torch.manual_seed(0)
    model, expected_blocks = FAMILIES[family]()
    found = remat_timm.find_blocks(model)
    assert list(found) == list(expected_blocks)
    if not isinstance(expected_blocks, list):  # a stock nn.Sequential stays one chain
        assert found is expected_blocks
    model.train()
    plain = copy.deepcopy(model)
    x = torch.randn(2, 3, 32, 32)
    handle = remat_timm.enable(model, activation_budget=1)  # below any plan: refused at step 0
    with pytest.raises(Exception, match="activation_budget: 1 byte is below"):
        model(x).sum().backward()
    handle.remove()
    model.zero_grad(set_to_none=True)
    # The least budget: the plan must re-run blocks.
    least = remat.torch.measure(model, x, blocks=found, verbose=False).least_activation_budget_bytes
    handle = remat_timm.enable(model, activation_budget=least)
    for _ in range(2):
        torch.manual_seed(1)
        model(x).square().mean().backward()
        torch.manual_seed(1)
        plain(x).square().mean().backward()
    assert handle.plan is not None and handle.plan.regions
    for (name, a), b in zip(model.named_parameters(), plain.parameters()):
        assert torch.equal(a.grad, b.grad), name


def test_a_model_without_known_blocks_is_refused_naming_what_was_looked_for():
    with pytest.raises(ValueError, match="none of `blocks`, `stages`, `layers`"):
        remat_timm.find_blocks(torch.nn.Linear(2, 2))
