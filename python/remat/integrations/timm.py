"""timm: ``enable(model, memory_budget=...)`` in place of ``model.set_grad_checkpointing()``.

The blocks are those timm's own checkpointing runs one by one:

| model | blocks |
| --- | --- |
| ViT, DeiT, Hiera (``blocks`` holds blocks) | ``blocks`` (a stock ``nn.Sequential``: one chain) |
| EfficientNet, MobileNet (``blocks`` holds stages) | every stage's blocks, call by call |
| ConvNeXt, MaxViT, PVT (``stages[*].blocks``) | every stage's blocks, call by call |
| Swin, SwinV2 (``layers[*].blocks``) | every stage's blocks, call by call |
| ResNet, ResNeXt (``layer1`` to ``layer4``) | every stage's blocks, call by call |
| other ``stages`` | the stages |

The downsampling between stages runs outside the blocks and saves the previous stage's last
output: the first step notes that, and the plan counts it.
"""

from __future__ import annotations

from typing import Any, TypeGuard

from torch import nn

from ..eager.run.auto import AutoCheckpoint, auto_checkpoint

_CONTAINERS = (nn.Sequential, nn.ModuleList)


def _container(value: Any) -> TypeGuard[nn.Sequential | nn.ModuleList]:
    return isinstance(value, _CONTAINERS) and len(value) > 0


def _stages(model: nn.Module) -> list[nn.Module] | None:
    """The model's stages: ``stages`` (ConvNeXt), ``layers`` (Swin), ``layer1``..``layer4``
    (ResNet), or a ``blocks`` whose members are containers themselves (EfficientNet)."""
    for name in ("stages", "layers"):
        stages = getattr(model, name, None)
        if _container(stages):
            return list(stages)
    numbered = [getattr(model, f"layer{i}", None) for i in range(1, 5)]
    found = [stage for stage in numbered if _container(stage)]
    if len(found) == len(numbered):
        return list(found)
    blocks = getattr(model, "blocks", None)
    if _container(blocks) and all(_container(stage) for stage in blocks):
        return list(blocks)
    return None


def find_blocks(model: nn.Module) -> nn.Module | list[nn.Module]:
    """A container of blocks, or the list of every stage's blocks (else the stages)."""
    stages = _stages(model)
    if stages is None:
        blocks = getattr(model, "blocks", None)
        if _container(blocks):
            return blocks
        raise ValueError(
            f"model: {type(model).__name__} has none of `blocks`, `stages`, `layers` or "
            "`layer1`..`layer4`; use remat.torch.auto_checkpoint(model, memory_budget=..., "
            "blocks=...) with its blocks"
        )
    inner = [stage if _container(stage) else getattr(stage, "blocks", None) for stage in stages]
    containers = [b for b in inner if _container(b)]
    if len(containers) == len(inner):
        return [block for b in containers for block in b]
    return stages


def _check_not_checkpointed(model: nn.Module) -> None:
    on = [name for name, m in model.named_modules() if getattr(m, "grad_checkpointing", False)]
    if on:
        raise ValueError(
            f"model: timm's own gradient checkpointing is on ({on[0] or 'the model'}); remat "
            "plans the checkpointing itself, and the two together would re-run every block "
            "twice. Call model.set_grad_checkpointing(False) first"
        )


def enable(
    model: nn.Module, *, memory_budget: int | float | str | None = None, **options: Any
) -> AutoCheckpoint:
    """Checkpoints a timm model's blocks to `memory_budget`.

    Args:
        model: a timm model (its blocks are found as :func:`find_blocks` finds them: see
            the table above).
        memory_budget: the peak of the whole training step on the device, in bytes or with
            a unit, or "auto" on CUDA. Give ``activation_budget=`` instead (among the
            options) to bound the blocks' saved activations alone.
        **options: the options of :class:`remat.torch.CheckpointOptions`, except ``blocks``.

    Returns:
        The auto_checkpoint handle; ``handle.remove()`` undoes it.

    Raises:
        ValueError: the model already checkpoints its blocks (timm's ``set_grad_checkpointing``).
        TypeError: ``blocks`` was given (auto_checkpoint takes them).

    Example:
        ```python
        handle = remat.integrations.timm.enable(model, memory_budget="4GiB")
        ```
    """
    if "blocks" in options:
        raise TypeError(
            "enable(): blocks are found from the model; use auto_checkpoint to give them"
        )
    _check_not_checkpointed(model)
    return auto_checkpoint(model, memory_budget=memory_budget, blocks=find_blocks(model), **options)
