"""Hugging Face transformers: ``enable(model, memory_budget=...)`` in place of
``model.gradient_checkpointing_enable()``.

The blocks are the layers Hugging Face's own checkpointing wraps: every outermost
``GradientCheckpointingLayer`` (``model.layers``, ``transformer.h``, ``encoder.layer``, and both
stacks of an encoder-decoder such as T5, planned together as the calls of one step). Caches are
dropped from the blocks' calls in training, as Hugging Face's checkpointing does
(:mod:`remat.eager.caches`); ``model.config`` is not changed, so a saved model keeps its
``use_cache`` for generation.

It composes with the ``Trainer`` (which calls the model, so every training step follows the
plan) and is refused on a model whose own gradient checkpointing is on: two checkpointing
layers would re-run each block twice over.
"""

from __future__ import annotations

import logging
from typing import Any

from torch import nn

from ..eager.run.auto import AutoCheckpoint, auto_checkpoint
from ._common import outermost

_log = logging.getLogger("remat")


def _is_layer(module: nn.Module) -> bool:
    return any(
        cls.__name__ == "GradientCheckpointingLayer" and cls.__module__.startswith("transformers")
        for cls in type(module).__mro__
    )


def find_layers(model: nn.Module) -> list[nn.Module]:
    """The layers Hugging Face's gradient checkpointing would wrap, outermost first."""
    layers = outermost(model, _is_layer)
    if not layers:
        raise ValueError(
            f"model: {type(model).__name__} has no transformers GradientCheckpointingLayer "
            "(a model written before transformers 4.50, or not a transformers model); use "
            "remat.torch.auto_checkpoint(model, memory_budget=..., blocks=...) with its blocks"
        )
    return layers


def _check_not_checkpointed(model: nn.Module) -> None:
    on = [name for name, m in model.named_modules() if getattr(m, "gradient_checkpointing", False)]
    if on:
        raise ValueError(
            f"model: Hugging Face's own gradient checkpointing is on ({on[0] or 'the model'}"
            f"{f' and {len(on) - 1} more' if len(on) > 1 else ''}); remat plans the "
            "checkpointing itself, and the two together would re-run every block twice. Call "
            f"model.{_disable_method(model)}() (or leave gradient_checkpointing=False in "
            "TrainingArguments) first"
        )


def _disable_method(model: nn.Module) -> str:
    """transformers 5 renamed gradient_checkpointing_disable, which it deprecates."""
    if hasattr(model, "activation_checkpointing_disable"):
        return "activation_checkpointing_disable"
    return "gradient_checkpointing_disable"


def enable(
    model: nn.Module, *, memory_budget: int | float | str | None = None, **options: Any
) -> AutoCheckpoint:
    """Checkpoints a Hugging Face model's layers to `memory_budget`.

    The layers are found (``model.model.layers``, ``transformer.h``, ``encoder.layer``; T5's
    encoder and decoder stacks together); caches passed to them in training are dropped, as HF's
    own gradient checkpointing does, without a warning at every model's first step.

    Args:
        model: a ``transformers`` PreTrainedModel.
        memory_budget: the peak of the whole training step on the device, in bytes or with
            a unit ("8GiB"), or "auto" on CUDA. Give ``activation_budget=`` instead (among
            the options) to bound the layers' saved activations alone.
        **options: the options of :class:`remat.torch.CheckpointOptions` (``optimizer``,
            ``granularity``, ``plan_group``, ``offload``, ...), except ``blocks``, which this
            finds.

    Returns:
        The auto_checkpoint handle; ``handle.remove()`` undoes it.

    Raises:
        ValueError: the model has HF's own gradient checkpointing enabled.
        TypeError: ``blocks`` was given (auto_checkpoint takes them).

    Example:
        ```python
        handle = remat.integrations.transformers.enable(model, memory_budget="8GiB")
        model(input_ids, labels=input_ids).loss.backward()  # measures, plans, trains
        ```
    """
    if "blocks" in options:
        raise TypeError(
            "enable(): blocks are found from the model; use auto_checkpoint to give them"
        )
    _check_not_checkpointed(model)
    layers = find_layers(model)
    handle = auto_checkpoint(model, memory_budget=memory_budget, blocks=layers, **options)
    # What enable() documents is not warned about at every model's first step.
    handle.warn_on_dropped_caches = False
    _log.info(
        "remat.integrations.transformers: %d layers; caches are dropped in training steps",
        len(layers),
    )
    return handle
