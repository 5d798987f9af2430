"""Key-value caches in training: dropped from block calls, as Hugging Face's checkpointing does.

A decoder layer given a cache appends its keys and values to it, and a checkpoint region re-runs
the layer in backward, appending again (mutation.py). Training has no use for the cache: Hugging
Face's own gradient checkpointing (`GradientCheckpointingLayer` in transformers) sets
`use_cache=False` and passes `cache=None` (`layer_past`, `past_key_value(s)` in other models) to
every checkpointed layer of a model in training with gradients enabled, and warns. remat does
the same to every block it wraps: in the first step each block is measured by running it
several times, so a layer left plain by the plan would append too. A layer class that declares
`_can_checkpoint_with_cache = True` only reads the cache (Hugging Face's convention) and keeps it.
"""

from __future__ import annotations

from typing import Any

from torch import nn

_CACHE_ARGUMENTS = ("cache", "past_key_value", "past_key_values", "layer_past")


def _is_cache(value: Any) -> bool:
    """A Hugging Face `Cache` (DynamicCache, EncoderDecoderCache, ...), known by its class."""
    return any(
        cls.__name__ == "Cache" and cls.__module__.startswith("transformers")
        for cls in type(value).__mro__
    )


def without_caches(
    module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any], list[str]]:
    """The call's arguments with every cache set to None (a keyword one, or a positional one as
    GPT-2 passes it) and `use_cache` to False, and the names of those changed (none: the
    arguments themselves)."""
    if getattr(module, "_can_checkpoint_with_cache", False):
        return args, kwargs, []
    positional = [i for i, value in enumerate(args) if _is_cache(value)]
    keywords = [name for name in _CACHE_ARGUMENTS if name in kwargs and _is_cache(kwargs[name])]
    dropped = [f"args[{i}]" for i in positional] + keywords
    if not dropped:
        return args, kwargs, []
    args = tuple(None if i in positional else value for i, value in enumerate(args))
    kwargs = {**kwargs, **{name: None for name in keywords}}
    if kwargs.get("use_cache"):
        kwargs["use_cache"] = False
        dropped.append("use_cache")
    return args, kwargs, dropped
