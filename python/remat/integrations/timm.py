"""timm: ``enable(model, memory_budget=...)`` in place of ``model.set_grad_checkpointing()``.

The blocks are those timm's own checkpointing runs one by one: a model's ``blocks`` (a
VisionTransformer's: a stock ``nn.Sequential``, planned as one chain with regions that span
several blocks), else the ``blocks`` of each of its ``stages`` (ConvNeXt, Swin, EfficientNet
style), planned call by call, else its stages. The downsampling between stages runs outside the
blocks and saves the previous stage's last output: the first step notes that, and the plan
counts it.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..eager.run.auto import AutoCheckpoint, auto_checkpoint


def find_blocks(model: nn.Module) -> nn.Module | list[nn.Module]:
    """A container of blocks, or the list of every stage's blocks (else the stages)."""
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, (nn.Sequential, nn.ModuleList)) and len(blocks):
        return blocks
    stages = getattr(model, "stages", None)
    if isinstance(stages, (nn.Sequential, nn.ModuleList)) and len(stages):
        inner = [getattr(stage, "blocks", None) for stage in stages]
        if all(isinstance(b, (nn.Sequential, nn.ModuleList)) for b in inner):
            return [block for b in inner for block in b]
        return list(stages)
    raise ValueError(
        f"model: {type(model).__name__} has neither `blocks` nor `stages`; use "
        "remat.torch.auto_checkpoint(model, memory_budget=..., blocks=...) with its blocks"
    )


def _check_not_checkpointed(model: nn.Module) -> None:
    on = [name for name, m in model.named_modules() if getattr(m, "grad_checkpointing", False)]
    if on:
        raise ValueError(
            f"model: timm's own gradient checkpointing is on ({on[0] or 'the model'}); remat "
            "plans the checkpointing itself, and the two together would re-run every block "
            "twice. Call model.set_grad_checkpointing(False) first"
        )


def enable(model: nn.Module, *, memory_budget: int | float | str, **options: Any) -> AutoCheckpoint:
    """Checkpoints a timm model's blocks to `memory_budget`.

    Args:
        model: a timm model (its blocks are found as :func:`remat.torch.find_blocks` finds
            them: ``blocks`` of a ViT, each ConvNeXt stage's blocks).
        memory_budget: the peak of the blocks' saved activations, in bytes or with a unit.
        **options: :func:`remat.torch.auto_checkpoint`'s, except ``blocks``.

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
