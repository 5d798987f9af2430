"""remat.torch.measure: what a model's blocks save, before choosing a budget."""

from __future__ import annotations

import dataclasses
import inspect
import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn

from ... import _distributed
from ...step_memory import HostCopy
from ...units import format_bytes, format_seconds
from .._runtime import _PreservedState, _synchronize, _tensors, clock, default_loss
from ..blocks import Blocks, find_blocks
from ..measuring.step_segments import StepSegments
from ..planning.offload import plan_with_offload
from ..planning.planner import plan_profile
from ..planning.step_budget import (
    StepFigures,
    figures_json,
    figures_of,
    least_step_peak,
    predicted_step,
)
from ..types import Plan, Profile
from .block_planner import Calls
from .measured_step import MeasuredStep


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
        least_activation_budget_bytes: the least ``activation_budget`` auto_checkpoint accepts
            for these inputs.
        least_budget_bytes: the least ``memory_budget`` (the whole step's peak) at which every
            step fits, the first (which measures) included, for a loop that keeps the loss,
            lets the rest of the model's output go before the backward and sets gradients to
            None between steps, as Hugging Face's Trainer does (a loop that holds the output,
            or accumulates gradients over steps, holds their bytes too); None under a process
            group.
        no_checkpoint_step_bytes: a ``memory_budget`` at which nothing is checkpointed: the
            step's predicted peak without checkpointing, plus 0.5% and 64 KiB (such a step
            runs its backward otherwise than the measured one); None where least_budget_bytes
            is.
        measured_step_bytes: the measured step's own peak (None likewise). Without an
            optimizer given, the step has no optimizer step.
        optimizer_state_bytes: the state the optimizer's first step created (0 without an
            optimizer, or under a process group).
        least_offload_budget_bytes: the least activation budget with ``offload=`` (regions'
            inputs moved to host memory; at most least_activation_budget_bytes). The property
            plans it on first use.
        step_seconds: the measured step (forward and backward, every block checkpointed while
            it was measured, so this overstates a plain step).
        on_cuda: the blocks ran on CUDA, where ``offload="auto"`` may offload (the table states
            least_offload_budget_bytes there only).
    """

    blocks: Blocks
    profile: Profile
    no_checkpoint_bytes: int
    least_activation_budget_bytes: int
    step_seconds: float
    on_cuda: bool = False
    least_budget_bytes: int | None = None
    no_checkpoint_step_bytes: int | None = None
    measured_step_bytes: int | None = None
    optimizer_state_bytes: int = 0
    # What plans to the step's peak (see to_json); its start_bytes is what a later step begins
    # holding, the optimizer's state included, not what the measured step held.
    step_figures: StepFigures | None = None

    @property
    def least_offload_budget_bytes(self) -> int:
        # As auto_checkpoint(offload=...) plans: the least peak does not depend on the
        # bandwidth, only on what may move.
        found = plan_with_offload(
            self.profile, self.no_checkpoint_bytes, bandwidth=1.0, host_budget=None
        )
        return min(self.least_activation_budget_bytes, found.minimum_budget_bytes)

    def table(self) -> str:
        p = self.profile
        width = max([len(layer.name) for layer in p.layers] + [5])
        lines = [f"remat.measure: {self.blocks.describe()}"]
        if self.least_budget_bytes is not None:
            lines.append(
                f"  memory_budget (the step's peak): least {_exactly(self.least_budget_bytes)}; "
                f"without checkpointing {format_bytes(self.no_checkpoint_step_bytes or 0)}"
            )
        lines += [
            f"  activation_budget (the blocks' activations): least "
            f"{_exactly(self.least_activation_budget_bytes)}"
            + (
                f" (with offload= {_exactly(self.least_offload_budget_bytes)})"
                if self.on_cuda
                else ""
            )
            + f"; without checkpointing {format_bytes(self.no_checkpoint_bytes)}",
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

    def to_json(self) -> str:
        """The profile as `remat eager PROFILE.json` reads it, with the measured step's figures
        (``"step"``) when it has them, so that ``remat eager --budget`` plans to the step's
        peak as ``auto_checkpoint(memory_budget=)`` does."""
        data = json.loads(self.profile.to_json())
        if self.step_figures is not None:
            data["step"] = figures_json(self.step_figures)
        return json.dumps(data, indent=1)


def measure(
    model: nn.Module,
    *args: Any,
    blocks: str | nn.Module | Sequence[nn.Module] | None = None,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
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
        loss_fn: turns the model's output into the loss (default: the sum of its floating
            tensors that need gradients; pass ``lambda out: out.loss`` for a Hugging Face
            output).
        optimizer: the optimizer that will train the model, whose step (and the state it
            creates) is measured with the rest of the step, then undone: the parameters,
            their gradients and its state are left as they were.
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
    result, _ = measure_with_calls(model, args, kwargs, blocks, loss_fn, optimizer, plan_group)
    if verbose:
        print(result.table())
    return result


def measure_with_calls(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    blocks: str | nn.Module | Sequence[nn.Module] | None = None,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    plan_group: Any = None,
    granularity: str = "op",
) -> tuple[Measurement, Calls]:
    """measure(), with the block calls a plan from its profile is made for (each with its
    module, signature and the positions of its arguments a region may move to the host).
    `granularity` "block": no block's ops are profiled, and the plans re-run whole blocks."""
    if optimizer is not None and _needs_a_closure(optimizer):
        raise ValueError(
            f"optimizer: {type(optimizer).__name__}.step() takes a closure that runs the model, "
            "which measure() cannot give it; measure without optimizer= (its state is then not "
            "counted), or with the optimizer you will train with if its step takes no closure"
        )
    chosen = find_blocks(model, blocks)
    # Planned as auto_checkpoint plans it (call by call, or a stock nn.Sequential as one chain
    # with nested regions), so the budgets reported are the ones it accepts.
    # Measured part by part, call by call, as auto_checkpoint(memory_budget=) plans (a stock
    # nn.Sequential too); under a process group, as a chain where it is one.
    by_parts = not _distributed.active(plan_group)
    if by_parts and chosen.chain is not None:
        chosen = dataclasses.replace(chosen, chain=None)
    measured = MeasuredStep(model, chosen, plan_group, optimizer, by_parts, granularity)
    undo: Callable[[], None] = lambda: None  # noqa: E731  (an optimizer step to undo)
    record = None
    try:
        devices = {t.device for t in _tensors((args, kwargs))}
        parameters = [p for p in model.parameters() if p.requires_grad]
        state_bytes, grads = 0, None
        with measured, _PreservedState([model], devices), torch.enable_grad():
            _synchronize((args, kwargs))
            now = clock()
            start = now()
            # Only the loss is kept, through the optimizer step, as Hugging Face's Trainer and
            # `loss = model(batch).loss` keep it: the output (the logits) goes before backward.
            loss = (loss_fn or default_loss)(model(*args, **kwargs))
            if parameters:
                grads = _gradients(loss, parameters)
            _synchronize(loss)
            seconds = now() - start
            segments = measured.segments
            if segments is not None:
                segments.blocks_done()
                if optimizer is not None and parameters:
                    state_bytes, undo = _optimizer_step(optimizer, parameters, grads, segments)
            del loss, grads
            record = measured.finish()
        made = measured.plan()
    finally:
        undo()
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
    if record is not None and record.parts:
        figures = figures_of(record, made.profile)
        result = _with_step_figures(result, figures, state_bytes, alone=by_parts)
    return result, measured.calls


# no_checkpoint_step_bytes adds 0.5% of the predicted peak and 64 KiB.
PLAIN_SHARE, PLAIN_SLACK = 200, 64 * 1024


def _with_step_figures(
    result: Measurement, figures: StepFigures, state: int, alone: bool
) -> Measurement:
    """The step's least and plain peaks, from the measured step's figures; `state`: the bytes
    of optimizer state its optimizer step created (held by every later step); `alone`: not
    under a process group."""
    start = figures.start_bytes + state

    def make_plan(budget: int) -> Plan:
        return plan_profile(result.profile, budget)

    # auto_checkpoint's first step leaves out a block's profiling runs where they would take
    # it past its budget (not under a process group, whose ranks must run alike).
    first = figures.first_step_least_bytes(profiling_fits_budget=alone)
    least = max(least_step_peak(make_plan, figures, start), first)
    plain = predicted_step(make_plan(2**60), figures, start, 0).predicted_peak_bytes
    # The least plan runs every block as a region, as the measured step did: its prediction is
    # exact. Without checkpointing the backward runs otherwise, and can hold a little more than
    # predicted (128 bytes on the zoo's ConvNeXt): that figure is stated with a margin.
    plain += plain // PLAIN_SHARE + PLAIN_SLACK
    return dataclasses.replace(
        result,
        least_budget_bytes=least,
        no_checkpoint_step_bytes=max(plain, least),
        measured_step_bytes=figures.measured_peak_bytes,
        optimizer_state_bytes=state,
        step_figures=dataclasses.replace(figures, start_bytes=start),
    )


def _gradients(loss: torch.Tensor, parameters: Sequence[torch.Tensor]) -> Any:
    """The parameters' gradients, returned rather than accumulated into .grad."""
    try:
        return torch.autograd.grad(loss, parameters, allow_unused=True)
    except RuntimeError as error:
        if "use_reentrant=True" not in str(error):
            raise
        # torch's message speaks of .grad() and `inputs`, which the user never called.
        raise RuntimeError(
            "remat.measure: the model runs torch.utils.checkpoint with use_reentrant=True (as "
            "Hugging Face's gradient checkpointing once did), which cannot run under "
            "torch.autograd.grad, which measure uses to leave .grad as it was. Turn the "
            "model's own checkpointing off (remat plans the checkpointing) or pass "
            "use_reentrant=False"
        ) from error


def _optimizer_step(
    optimizer: torch.optim.Optimizer,
    parameters: Sequence[torch.Tensor],
    grads: Any,
    segments: StepSegments,
) -> tuple[int, Callable[[], None]]:
    """Runs `optimizer`'s step on `grads` as a part of the measured step. Returns the bytes of
    state it created, and what undoes it (the parameters, their .grad and the optimizer's state
    as they were), to call once the step's measuring has ended."""
    with segments.uncounted():  # copies on the host, not the step's
        before = HostCopy(parameters, optimizer)
    own = [p.grad for p in parameters]
    state_before = _state_bytes(optimizer)
    segments.optimizer_begins()
    for p, grad in zip(parameters, grads):
        p.grad = grad
    try:
        optimizer.step()
        segments.leave()  # the step ends with its optimizer step
        created = _state_bytes(optimizer) - state_before
    finally:
        for p, grad in zip(parameters, own):
            p.grad = grad

    return created, lambda: before.restore(again=False)


def _needs_a_closure(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimizer's step() must be given a closure (LBFGS)."""
    try:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):  # no signature to read: taken as needing none
        return False
    return closure is not None and closure.default is inspect.Parameter.empty


def _state_bytes(optimizer: torch.optim.Optimizer) -> int:
    storages = {
        t.untyped_storage()._cdata: t.untyped_storage().nbytes()
        for state in optimizer.state.values()
        for t in state.values()
        if isinstance(t, torch.Tensor)
    }
    return sum(storages.values())
