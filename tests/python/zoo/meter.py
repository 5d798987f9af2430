"""What a budget counts, measured on a real model: saved bytes of the blocks, and their outputs
wherever they are saved.

remat's budget covers what autograd saves inside the blocks (through checkpoint regions and
their re-runs) and the activations the blocks pass on, the last block's outputs included, which
the model's code after the blocks keeps for its backward (a final norm saves its input). What
the embedding, the head and the loss save for themselves is not in the budget. A
SavedTensorMeter over the whole step counts those too; this one counts a tensor saved outside
the blocks only when it is a block's output.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch
from torch import nn

import remat.torch as rt
from remat.saved_memory import storage_key


class BlockMeter(rt.SavedTensorMeter):
    def __init__(self, model: nn.Module, blocks: Iterable[nn.Module]) -> None:
        super().__init__(model)
        self._blocks = list(dict.fromkeys(blocks))
        self._depth = 0
        self._outputs: set[tuple[str, int, int]] = set()
        self._handles: list[Any] = []

    def __enter__(self) -> "BlockMeter":
        for block in self._blocks:
            self._handles.append(block.register_forward_pre_hook(self._enter_block))
            self._handles.append(block.register_forward_hook(self._leave_block, always_call=True))
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for handle in self._handles:
            handle.remove()

    def _enter_block(self, *_: Any) -> None:
        self._depth += 1

    def _leave_block(self, _module: nn.Module, _args: Any, output: Any) -> None:
        self._depth -= 1
        from remat.eager._runtime import _tensors

        self._outputs.update(storage_key(t) for t in _tensors(output))

    def _pack(self, tensor: torch.Tensor) -> Any:
        if self._depth or storage_key(tensor) in self._outputs:
            return super()._pack(tensor)
        return tensor
