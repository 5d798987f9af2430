"""Putting remat's wrapper in place of modules' forward methods, and their own back."""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from torch import nn

# Marks a forward method that is remat's wrapper (a module under a handle, or being measured).
_MARK = "_remat_auto_checkpoint"

Patched = list[tuple[nn.Module, Any]]  # each module with the forward its __dict__ held before


def wrap_forwards(targets: Sequence[tuple[nn.Module, Callable[..., Any]]]) -> Patched:
    """Each module's forward becomes `wrapper(module, its forward, *args, **kwargs)`. Raises,
    having wrapped none, when a module's forward is already remat's."""
    patched: Patched = []
    for index, (module, wrapper) in enumerate(targets):
        if getattr(module.__dict__.get("forward"), _MARK, False):
            restore_forwards(patched)
            raise ValueError(
                f"blocks[{index}]: already under auto_checkpoint (call remove() on its handle "
                "first)"
            )
        original = module.__dict__.get("forward")
        wrapped = functools.partial(wrapper, module, module.forward)
        setattr(wrapped, _MARK, True)
        module.forward = wrapped
        patched.append((module, original))
    return patched


def restore_forwards(patched: Patched) -> None:
    """Puts back the forward methods `wrap_forwards` replaced."""
    for module, original in patched:
        if original is None:
            del module.forward
        else:
            module.forward = original
