"""What the auto_checkpoint handle's parts share while the model runs: the step under way, how
deep inside a block the call is, the plans made, and the warnings given.

Each part of the handle (block_calls, recorder, block_planner, chain_mode) takes these objects
in its constructor; nothing else passes between them.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import sys
import warnings
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Iterator

import torch
from torch import nn

from .._runtime import in_backward, run_context
from ..blocks import Blocks
from ..types import Plan
from .step import _Step


class Running:
    """The step under way: its record, whether a block (or the chain) runs now, the blocks'
    device, and the bytes the step held as it began."""

    def __init__(self) -> None:
        self.step: _Step | None = None
        self.inside = 0  # > 0 while a block (or the chain) runs: blocks inside it run plainly
        self.device = torch.device("cpu")  # the blocks' inputs', once seen
        self.start_bytes: int | None = None  # under memory_budget: what the step began holding
        self.forward_only = False  # example_inputs' forward: no backward follows

    def active(self) -> bool:
        """Whether a block called now is a training step's block call: grad on, not in
        backward, not inside another block. Under torch.compile's tracing the call is a forward
        one (a block called again in backward finds no step: the step ends with the model's
        forward), and asking autograd would break the graph."""
        backward = not torch.compiler.is_compiling() and in_backward()
        return torch.is_grad_enabled() and not backward and self.inside == 0

    @contextlib.contextmanager
    def inside_block(self) -> Iterator[None]:
        """Blocks called in here (by a block, or by the chain) run plainly."""
        self.inside += 1
        try:
            yield
        finally:
            self.inside -= 1


def step_context(model: nn.Module, blocks: Blocks) -> Any:
    """What besides its inputs a step's plan depends on: training mode and the run context of
    the blocks' own modules, not the model's tree (wrapping a block in torch.compile adds a
    module to that tree but changes nothing a plan depends on)."""
    return model.training, run_context(blocks.modules)


@dataclass
class PlanBook:
    """Every plan made, by input signature, and the plan the last step followed."""

    plans: dict[Any, Plan] = field(default_factory=dict)
    last: Plan | None = None


class Notices:
    """Warnings, each given once and kept in order (a message repeated every step would grow
    the list all training); `entry` begins each ("remat.auto_checkpoint", "remat.measure")."""

    def __init__(self, entry: str) -> None:
        self.entry = entry
        self.messages: list[str] = []
        self._given: set[str] = set()

    def warn(self, message: str, once_as: str | None = None) -> None:
        """`once_as`: what makes it the same message (one warning for every block it names)."""
        key = message if once_as is None else once_as
        if key not in self._given:
            self._given.add(key)
            self.messages.append(message)
            warnings.warn(f"{self.entry}: {message}", RuntimeWarning, stacklevel=_user_stacklevel())


_LIBRARIES = tuple(
    str(pathlib.Path(str(module.__file__)).parent) + os.sep
    for module in (torch, sys.modules["remat"])
)


def _user_stacklevel() -> int:
    """The stacklevel of warnings.warn, called from Notices.warn, that names the first frame
    outside torch and remat: the user's line (model(x), loss.backward()), not torch's module
    call."""
    frame: FrameType | None = sys._getframe(2)  # warn's caller
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARIES):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 2
