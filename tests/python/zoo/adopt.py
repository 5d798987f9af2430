"""How each zoo model is handed to remat: the library's integration, or its blocks."""

from __future__ import annotations

from typing import Any

from torch import nn

import remat.integrations.timm
import remat.integrations.transformers
import remat.torch as rt

from .models import ZooModel


def blocks_of(zoo: ZooModel, model: nn.Module) -> Any:
    if zoo.library == "transformers":
        return remat.integrations.transformers.find_layers(model)
    if zoo.library == "timm":
        return remat.integrations.timm.find_blocks(model)
    return [b for stage in (model.layer1, model.layer2, model.layer3, model.layer4) for b in stage]


def block_list(zoo: ZooModel, model: nn.Module) -> list[nn.Module]:
    found = blocks_of(zoo, model)
    return list(found)


def enable(zoo: ZooModel, model: nn.Module, budget: int, **options: Any) -> rt.AutoCheckpoint:
    if zoo.library == "transformers":
        return remat.integrations.transformers.enable(model, activation_budget=budget, **options)
    if zoo.library == "timm":
        return remat.integrations.timm.enable(model, activation_budget=budget, **options)
    return rt.auto_checkpoint(
        model, activation_budget=budget, blocks=blocks_of(zoo, model), **options
    )


def enable_step(zoo: ZooModel, model: nn.Module, budget: int, **options: Any) -> rt.AutoCheckpoint:
    """As enable, with a budget on the whole step's peak."""
    if zoo.library == "transformers":
        return remat.integrations.transformers.enable(model, memory_budget=budget, **options)
    if zoo.library == "timm":
        return remat.integrations.timm.enable(model, memory_budget=budget, **options)
    return rt.auto_checkpoint(model, memory_budget=budget, blocks=blocks_of(zoo, model), **options)


def measure(zoo: ZooModel, model: nn.Module) -> Any:
    args, kwargs = zoo.batch()
    return rt.measure(
        model, *args, blocks=blocks_of(zoo, model), loss_fn=zoo.loss, verbose=False, **kwargs
    )
