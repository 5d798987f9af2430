"""remat.torch.measure: what a model's blocks save, before choosing a budget."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ...units import format_bytes, format_seconds
from .._runtime import _PreservedState, _synchronize, _tensors, clock
from ..blocks import Blocks, find_blocks
from ..planning.offload import plan_with_offload
from ..types import Plan, Profile
from .auto import AutoCheckpoint


def _exactly(count: int) -> str:
    """A byte count in binary units, and in whole bytes too from 1 KiB on: a rounded least
    budget read back ("59.1 KiB") can fall under the least and be refused."""
    return format_bytes(count) + ("" if count < 1024 else f" = {count} bytes")


@dataclass(frozen=True)
class Measurement:
    """One training step of a model, measured block by block.

    Attributes:
        blocks: the blocks measured (found as auto_checkpoint finds them, or given).
        profile: per block (per call: a block called twice appears twice) the bytes autograd
            saves inside it, the activation it passes on and its forward time.
        no_checkpoint_bytes: the blocks' saved bytes at their peak without checkpointing.
        least_budget_bytes: the least budget auto_checkpoint accepts for these inputs.
        least_offload_budget_bytes: the least with ``offload=`` (regions' inputs moved to host
            memory; at most least_budget_bytes). The property plans it on first use.
        step_seconds: the measured step (forward and backward, every block checkpointed while
            it was measured, so this overstates a plain step).
        on_cuda: the blocks ran on CUDA, where ``offload="auto"`` may offload (the table states
            least_offload_budget_bytes there only).
    """

    blocks: Blocks
    profile: Profile
    no_checkpoint_bytes: int
    least_budget_bytes: int
    step_seconds: float
    on_cuda: bool = False

    @property
    def least_offload_budget_bytes(self) -> int:
        # As auto_checkpoint(offload=...) plans: the least peak does not depend on the
        # bandwidth, only on what may move.
        found = plan_with_offload(
            self.profile, self.no_checkpoint_bytes, bandwidth=1.0, host_budget=None
        )
        return min(self.least_budget_bytes, found.minimum_budget_bytes)

    def table(self) -> str:
        p = self.profile
        width = max([len(layer.name) for layer in p.layers] + [5])
        lines = [
            f"remat.measure: {self.blocks.describe()}",
            f"  budget without checkpointing {format_bytes(self.no_checkpoint_bytes)}; least "
            f"possible {_exactly(self.least_budget_bytes)}"
            + (
                f" (with offload= {_exactly(self.least_offload_budget_bytes)})"
                if self.on_cuda
                else ""
            ),
            f"  forward of the blocks {format_seconds(p.forward_seconds)}; measured step "
            f"{format_seconds(self.step_seconds)}",
            "",
            f"  {'#':>4}  {'block':<{width}}  {'saves':>10} {'passes on':>10} {'forward':>9}",
            f"  {'':>4}  {'(held all step)':<{width}}  {format_bytes(p.input_bytes):>10}",
        ]
        for i, layer in enumerate(p.layers):
            lines.append(
                f"  {i:>4}  {layer.name:<{width}}  {format_bytes(layer.saved_bytes):>10} "
                f"{format_bytes(layer.output_bytes):>10} {format_seconds(layer.forward_seconds):>9}"
            )
        total = p.input_bytes + sum(l.saved_bytes + l.output_bytes for l in p.layers)
        lines += [
            f"  {'':>4}  {'total':<{width}}  {format_bytes(total):>10}",
            "",
            "  saves: bytes autograd keeps inside the block besides its inputs; passes on: the new",
            "  activation the next block takes (after any code between blocks); held all step:",
            "  inputs several blocks share (masks, positions) and the first block's input.",
            "  Bytes outside the blocks (embeddings, head, code between blocks) are not counted.",
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _default_loss(output: Any) -> torch.Tensor:
    tensors = [t for t in _tensors(output) if t.requires_grad and t.is_floating_point()]
    if not tensors:
        raise ValueError("output: has no floating tensor that requires grad; pass loss_fn=")
    return sum(t.float().sum() for t in tensors)  # type: ignore[return-value]


def measure(
    model: nn.Module,
    *args: Any,
    blocks: str | nn.Module | Sequence[nn.Module] | None = None,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    verbose: bool = False,
    plan_group: Any = None,
    **kwargs: Any,
) -> Measurement:
    """Runs one training step of `model(*args, **kwargs)` and measures its blocks: what each
    saves for backward, what it passes on, its forward time, and the budgets that bound a plan.

    Gradients are returned, not accumulated (``.grad`` stays as it was); module buffers
    (BatchNorm statistics) and the RNG are restored. Measuring holds one block's activations at
    a time beyond the least-memory plan.

    Args:
        model: the model, called as in training.
        *args: its positional arguments.
        blocks: which blocks, as :func:`auto_checkpoint` takes them (default: found).
        loss_fn: turns the model's output into the loss (default: its mean, or the ``loss``
            of a Hugging Face output).
        verbose: print the table as well (``print(measured)`` prints it too).
        plan_group: under a process group, the ranks that report one agreed profile
            ("local": this rank's).
        **kwargs: its keyword arguments.

    Returns:
        The measurement: per block bytes and times, ``least_budget_bytes`` and
        ``no_checkpoint_bytes`` (the range of budgets worth giving auto_checkpoint).

    Example:
        ```python
        measured = remat.torch.measure(model, batch)
        remat.torch.auto_checkpoint(model, memory_budget=measured.least_budget_bytes)
        ```
    """
    chosen = find_blocks(model, blocks)
    # Planned as auto_checkpoint plans it (call by call, or a stock nn.Sequential as one chain
    # with nested regions), so the budgets reported are the ones it accepts.
    handle = AutoCheckpoint(
        model, chosen, 2**60, None, False, plan_group=plan_group, measuring=True
    )
    # Measuring drops a cache passed to the blocks as a training step does, but the user's
    # training is not affected: auto_checkpoint or enable() says what it does there.
    handle.warn_on_dropped_caches = False
    try:
        devices = {t.device for t in _tensors((args, kwargs))}
        parameters = [p for p in model.parameters() if p.requires_grad]
        with _PreservedState([model], devices), torch.enable_grad():
            _synchronize((args, kwargs))
            now = clock()
            start = now()
            out = model(*args, **kwargs)
            loss = (loss_fn or _default_loss)(out)
            if parameters:
                try:
                    torch.autograd.grad(loss, parameters, allow_unused=True)
                except RuntimeError as error:
                    if "use_reentrant=True" not in str(error):
                        raise
                    # torch's message speaks of .grad() and `inputs`, which the user never called.
                    raise RuntimeError(
                        "remat.measure: the model runs torch.utils.checkpoint with "
                        "use_reentrant=True (as Hugging Face's gradient checkpointing once did), "
                        "which cannot run under torch.autograd.grad, which measure uses to leave "
                        ".grad as it was. Turn the model's own checkpointing off (remat plans the "
                        "checkpointing) or pass use_reentrant=False"
                    ) from error
            _synchronize(loss)
            seconds = now() - start
        made: Plan | None = handle.plan
    finally:
        handle.remove()
    if made is None:
        raise ValueError(f"blocks: none of {chosen.path} was called by the model's forward")
    result = Measurement(
        chosen,
        made.profile,
        made.no_checkpoint_bytes,
        made.minimum_budget_bytes,
        seconds,
        on_cuda=any(device.type == "cuda" for device in devices),
    )
    if verbose:
        print(result.table())
    return result
