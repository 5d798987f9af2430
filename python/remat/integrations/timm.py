"""timm: ``enable(model, memory_budget=...)`` in place of ``model.set_grad_checkpointing()``.

The blocks are a model's ``blocks`` (a VisionTransformer's: a stock ``nn.Sequential``, planned
as one chain with regions that span several blocks), else its ``stages`` (ConvNeXt, Swin,
EfficientNet style), each stage one block with its downsampling inside: a downsampling conv
between blocks saves the previous block's output, which remat's prediction would not count
(timm's own checkpointing runs each stage's blocks one by one, with the same gap).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ..eager.auto import AutoCheckpoint, auto_checkpoint


def find_blocks(model: nn.Module) -> nn.Module | list[nn.Module]:
    """The model's blocks, or its stages."""
    for name in ("blocks", "stages"):
        found = getattr(model, name, None)
        if isinstance(found, (nn.Sequential, nn.ModuleList)) and len(found):
            return found if isinstance(found, nn.Sequential) and name == "blocks" else list(found)
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
    """Checkpoints `model`'s blocks to `memory_budget`; `options` are auto_checkpoint's.

    Example:
        >>> handle = remat.integrations.timm.enable(model, memory_budget="4GiB")
    """
    if "blocks" in options:
        raise TypeError("enable(): blocks are found from the model; use auto_checkpoint to give them")
    _check_not_checkpointed(model)
    return auto_checkpoint(model, memory_budget=memory_budget, blocks=find_blocks(model), **options)
