"""Putting remat's wrapper in place of modules' forward methods, and their own back."""

from __future__ import annotations

import copy
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


# The model's hook tables that may hold a handle's step hooks (keyed by the hooks' ids).
_HOOK_TABLES = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
)


class UnwrappedCopy:
    """Seeds and mends ``copy.deepcopy(model, memo)`` of a model under remat's wrappers
    (`patched`) and step hooks (`hooks`), whose copy has neither: its blocks run their own
    forwards and the model keeps only the user's hooks. The wrappers and hooks reach the handle,
    which cannot be copied; the model itself is left as it is."""

    def __init__(self, model: nn.Module, patched: Patched, hooks: Sequence[Any]) -> None:
        self.model = model
        self.patched = patched
        self.ours = {hook.id for hook in hooks}

    def seed(self, memo: dict[int, Any]) -> None:
        for module, _ in self.patched:
            memo[id(module.__dict__["forward"])] = None  # set by mend()
        for name in _HOOK_TABLES:
            table = getattr(self.model, name, None)
            if isinstance(table, dict):
                kept = ((k, copy.deepcopy(v, memo)) for k, v in table.items() if k not in self.ours)
                memo[id(table)] = type(table)(kept)

    def mend(self, memo: dict[int, Any]) -> None:
        for module, original in self.patched:
            twin = memo[id(module)]
            if original is None:
                twin.__dict__.pop("forward", None)
            else:
                twin.forward = copy.deepcopy(original, memo)
