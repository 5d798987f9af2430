"""What the library integrations share: the blocks that are not inside another block."""

from __future__ import annotations

from typing import Callable

from torch import nn


def outermost(model: nn.Module, is_block: Callable[[nn.Module], bool]) -> list[nn.Module]:
    """The modules of `model` for which `is_block` holds and that no such module contains, in
    the order `model.modules()` visits them (the order of definition, not necessarily of calls:
    auto_checkpoint follows the calls)."""
    found: list[nn.Module] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside or module is model:
            continue
        if is_block(module):
            found.append(module)
            inside.update(id(m) for m in module.modules())
    return found
