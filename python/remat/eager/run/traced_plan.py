"""auto_checkpoint(first_step="trace"): a new input signature's first step follows a plan made
from the step traced on fake tensors, instead of measuring its blocks.

A measuring first step runs every block inside its own checkpoint region while it records what
the block saves, which costs that step a second forward per block and more. Traced instead:

1. At the model's call, the step is traced on fake copies of the model and its inputs
   (``remat.torch.estimate``'s trace: no data and no device memory, the blocks' forwards their
   own) and measured as ``measure()`` measures a step, the optimizer's step included when the
   optimizer is known. The trace back-propagates the output's ``loss`` where it has one (a
   Hugging Face model given labels), else the sum of its tensors that need gradients; a loop
   whose loss holds more shows it in the first step's check. The plan for ``memory_budget``
   is made from that profile and the step's figures, with each op's time its roofline
   (``measuring/roofline.py``).
2. The first step follows that plan. It is checked as the first steps of every plan are (its
   peak measured; an excess is warned about and planned away), and each block call's forward
   is timed.
3. The next step follows a plan made again from the same profile with those times: a block's
   own time replaces its roofline one.

The plans re-run whole blocks (as ``granularity="block"``): choosing which ops of a block to
keep needs each op's time on the device, which a roofline ranks otherwise (on the CPU, the zoo's
T5 took 36.0 against 27.9 ms a step with options priced so), and profiling them on fakes made
the trace several times longer.

Where the step cannot be traced (an op with no fake implementation, one whose output's shape
depends on the data), or under a process group (whose ranks plan from one measured profile),
the first step measures as before, and one line says why.

Time: one step's ops on fake tensors (their shape functions); memory: no device memory, the
copy's Python objects.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Iterator, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from ... import _distributed
from .._runtime import default_loss
from ..blocks import Blocks
from ..measuring.roofline import DEVICES, DeviceRates
from ..planning.step_budget import StepFigures
from ..types import Profile
from .block_planner import Calls
from .estimation import error_summary, trace_step
from .wrapping import Patched, UnwrappedCopy


@dataclasses.dataclass(frozen=True)
class TracedStep:
    """What a plan for the first step is made from."""

    profile: Profile
    calls: Calls  # with the model's own modules
    figures: StepFigures
    state_bytes: int  # the optimizer's state after its first step (0 without one)


class TraceFailed(Exception):
    """The step could not be traced; the message says why, in a few words."""


def _training_loss(output: Any) -> torch.Tensor:
    """What the trace back-propagates: an output's ``loss`` where it has one that trains (a
    Hugging Face model given labels, as its Trainer and most loops take it), else the sum of
    its tensors that need gradients (measure()'s default)."""
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.requires_grad:
        return loss
    return default_loss(output)


def device_rates_of(device: torch.device) -> DeviceRates:
    """The roofline rates of the GPU that runs the step, by its name (an H100 where it is none
    of those known, and on the CPU, whose times the first step replaces anyway)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device).upper()
        for known, rates in DEVICES.items():
            if known in name:
                return rates
    return DEVICES["H100"]


def trace_first_step(
    model: nn.Module,
    blocks: Blocks,
    patched: Patched,
    hooks: Sequence[Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    optimizer: torch.optim.Optimizer | None,
    device: torch.device,
    plan_group: Any,
) -> TracedStep:
    """The step `model(*args, **kwargs)` traced on fakes; raises TraceFailed."""
    if _distributed.active(plan_group):
        raise TraceFailed("under a process group the ranks plan from one measured profile")
    try:
        # Out of sight of the modes the user entered around the step (a memory meter, a
        # profiler): the fakes are not the step's allocations.
        with _disable_current_modes(), _quiet_fake_tensors():
            traced = trace_step(
                model,
                args,
                kwargs,
                optimizer=optimizer,
                loss_fn=_training_loss,
                blocks=list(dict.fromkeys(blocks.modules)),
                device=device,
                rates=device_rates_of(device),
                copying=UnwrappedCopy(model, patched, hooks),
                keep_devices=True,
                granularity="block",
            )
    except Exception as error:  # whatever stops the trace, the step can still measure
        cause = error.__cause__ if error.__cause__ is not None else error
        raise TraceFailed(error_summary(cause)) from error
    figures = traced.measured.step_figures
    if figures is None or not traced.calls:
        raise TraceFailed("the traced step called no block")
    names = {id(m): n for n, m in traced.twin.named_modules(remove_duplicate=False)}
    own = dict(model.named_modules(remove_duplicate=False))
    calls = tuple(
        (own[names[id(module)]], signature, moved) for module, signature, moved in traced.calls
    )
    return TracedStep(
        traced.measured.profile, calls, figures, traced.measured.optimizer_state_bytes
    )


@contextlib.contextmanager
def _quiet_fake_tensors() -> Iterator[None]:
    """torch logs an op its fake tensors cannot run as an error; here it is a fallback, said
    in one line by the handle."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def retimed(profile: Profile, seconds: dict[int, float], overhead: float) -> Profile:
    """`profile` (a traced one: whole blocks, no selective options) with the first step's timed
    block calls (`seconds` by call position): each timed layer takes its time; a layer not timed
    (a call the step skipped) scales by the timed layers' median ratio."""
    ratios = sorted(
        seconds[i] / layer.forward_seconds
        for i, layer in enumerate(profile.layers)
        if i in seconds and layer.forward_seconds > 0
    )
    median = ratios[len(ratios) // 2] if ratios else 1.0
    layers = []
    for i, layer in enumerate(profile.layers):
        timed = i in seconds and layer.forward_seconds > 0
        forward = seconds[i] if timed else layer.forward_seconds * median
        layers.append(dataclasses.replace(layer, forward_seconds=forward))
    return dataclasses.replace(profile, layers=tuple(layers), region_overhead_seconds=overhead)
