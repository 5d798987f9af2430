"""auto_checkpoint: every training step of a model's blocks follows a plan for its input shape."""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ..units import parse_bytes
from .execution import Execution
from .planning import Plan, plan_profile, tune_plan
from .profile import profile_layers
from .sequential import _signature


def _find_blocks(model: nn.Module) -> nn.Module:
    if isinstance(model, (nn.Sequential, nn.ModuleList)):
        return model
    lists = [
        m for m in model.modules() if isinstance(m, (nn.Sequential, nn.ModuleList)) and len(m) >= 2
    ]
    if not lists:
        raise ValueError(
            "model: found no nn.Sequential or nn.ModuleList of blocks to checkpoint; pass blocks="
        )
    return max(lists, key=len)  # the first of the longest, in module order


class AutoCheckpoint:
    """The handle :func:`auto_checkpoint` returns: the plans made so far, and ``remove()``.

    Block 0's call runs the whole chain through the plan for its input's shape; the calls of
    blocks 1..n-1 that follow (the model's own loop) pass that output through. The blocks must
    be applied in order, each to the previous one's output, with the same extra arguments."""

    def __init__(
        self, model: nn.Module, blocks: nn.Module, memory_budget: int, slots: int | None, tune: bool
    ) -> None:
        self.model = model
        self.blocks = list(blocks)
        if len(self.blocks) < 1:
            raise ValueError("blocks: empty")
        self.memory_budget = memory_budget
        self.slots = slots
        self.tune = tune
        self.plans: dict[Any, Plan] = {}
        self.last_plan: Plan | None = None
        self.last_execution: Execution | None = None
        self._inside = 0
        self._expect = 0
        self._output: Any = None
        self._originals = []
        for index, block in enumerate(self.blocks):
            if getattr(block.__dict__.get("forward"), "_remat_auto_checkpoint", False) or any(
                block is other for other in self.blocks[:index]
            ):
                self.remove()
                raise ValueError(
                    f"blocks[{index}]: already under auto_checkpoint (call remove() on its "
                    "handle first) or listed twice"
                )
            self._originals.append(block.__dict__.get("forward"))
            patched = types.MethodType(self._forward_of(index, block.forward), block)
            block.forward = patched

    def remove(self) -> None:
        """Restores the blocks' own forward methods."""
        for block, original in zip(self.blocks, self._originals):
            if original is None:
                del block.forward
            else:
                block.forward = original
        self._originals = []

    def _forward_of(self, index: int, original: Callable[..., Any]) -> Callable[..., Any]:
        def forward(_module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if self._inside or not torch.is_grad_enabled():
                return original(*args, **kwargs)
            if not args:
                raise TypeError(
                    "auto_checkpoint: a block's input must be its first positional argument"
                )
            if index == 0:
                return self._run_chain(args[0], args[1:], kwargs)
            if self._expect != index or args[0] is not self._output:
                self._expect, self._output = 0, None
                raise RuntimeError(
                    f"auto_checkpoint: block {index} was called out of order or on another "
                    "tensor; the blocks must be applied in sequence, x = block(x, ...)"
                )
            self._expect = index + 1 if index + 1 < len(self.blocks) else 0
            out = self._output
            if self._expect == 0:
                self._output = None
            return out

        forward._remat_auto_checkpoint = True  # type: ignore[attr-defined]
        return forward

    def _call_block(
        self, block: nn.Module, extra: tuple[Any, ...], kwargs: dict[str, Any], h: Any
    ) -> Any:
        self._inside += 1
        try:
            return block(h, *extra, **kwargs)
        finally:
            self._inside -= 1

    def _run_chain(self, x: Any, extra: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        functions = [functools.partial(self._call_block, b, extra, kwargs) for b in self.blocks]
        key = (_signature(x), _signature(extra), _signature(kwargs), self.model.training)
        found = self.plans.get(key)
        if found is None:
            profile = profile_layers(functions, x, exclude=[self.model])
            found = plan_profile(profile, self.memory_budget, slots=self.slots)
            if self.tune:
                found = tune_plan(functions, x, found)
            self.plans[key] = found
        self.last_plan = found
        self.last_execution = Execution(functions, found.regions)
        out = self.last_execution(x)
        self._expect = 1 if len(self.blocks) > 1 else 0
        self._output = out if len(self.blocks) > 1 else None
        return out


def auto_checkpoint(
    model: nn.Module,
    *,
    memory_budget: int | float | str,
    blocks: nn.Module | Sequence[nn.Module] | None = None,
    slots: int | None = None,
    tune: bool = True,
) -> AutoCheckpoint:
    """Makes every training step of `model` follow a checkpoint plan for `memory_budget`.

    `blocks` defaults to the model itself when it is an nn.Sequential, else its longest
    nn.ModuleList (transformer blocks, ResNet stages). The blocks' forward methods are replaced
    on the instances (parameters, state_dict and hooks are untouched); a new input shape is
    measured and planned (and tuned, see :func:`plan`) on first sight. ``remove()`` on the
    returned handle undoes it."""
    budget = parse_bytes(memory_budget)
    chosen = _find_blocks(model) if blocks is None else blocks
    return AutoCheckpoint(model, chosen, budget, slots, tune)
