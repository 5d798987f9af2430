"""remat.torch.estimate: a training step's peak memory, predicted before it runs on a device.

The step runs once on fake tensors (torch's FakeTensorMode: shapes, dtypes and devices, no
data), measured as :func:`remat.torch.measure` measures a real step: what each block saves,
and the peak of every part of the step (parameters, gradients, optimizer state, activations,
the backward's working set). The model may be on the meta device (no weights at all) or real;
either way it is copied with fake parameters and left as it was. Its ops are timed by their
roofline at a named device's peak rates (measuring/roofline.py), so plans weigh recompute as
they would there.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_map

from ... import _core
from ...optimizer_footprint import fake_optimizer
from ...saved_memory import estimating
from ...step_memory import held_bytes
from ...units import format_bytes, format_seconds, parse_bytes
from .._runtime import timed_by
from ..blocks import find_blocks
from ..measuring.fake_kernels import FakeKernels
from ..measuring.roofline import DeviceRates, RooflineClock, device_rates
from ..planning.planner import plan_profile
from ..planning.step_budget import (
    each_call_its_region,
    least_plan,
    least_step_plan,
    plan_step,
    predicted_step,
)
from ..types import Plan, StepPeak
from .block_planner import Calls
from .measurement import Measurement, measure_with_calls
from .wrapping import UnwrappedCopy


@dataclass(frozen=True)
class PlanPeak:
    """One way to train the step, and its predicted peak."""

    name: str  # "no checkpointing", "every block", "least", "memory_budget"
    plan: Plan | None  # None: no plan reaches memory_budget
    step: StepPeak | None

    @property
    def recompute_seconds(self) -> float | None:
        """The blocks' re-run forwards, at the estimate's rates (an estimate, not a time)."""
        return None if self.plan is None else self.plan.predicted_recompute_seconds

    @property
    def peak_bytes(self) -> int | None:
        return None if self.step is None else self.step.predicted_peak_bytes


@dataclass(frozen=True)
class Estimate:
    """A training step's predicted peak on its device, by plan (see :func:`estimate`).

    Attributes:
        measurement: the fake step's measurement (the blocks' profile, as measure gives it).
        device: the device the step was estimated for.
        parameter_bytes: the model's parameters and buffers.
        gradient_bytes: the gradients of its trainable parameters.
        optimizer_state_bytes: the optimizer's state after its first step.
        start_bytes: what every step after the first begins holding: parameters, buffers,
            optimizer state and the batch (gradients are set to None between steps).
        plans: the predicted peak without checkpointing, with every block checkpointed (as
            Hugging Face's gradient checkpointing does), with remat's least-memory plan and,
            when given, with remat's plan for ``memory_budget``.
        memory_budget: the budget asked about, in bytes (None: not given).
        rates: the device rates the times are estimated at.
        forward_seconds: the blocks' forward at those rates (an estimate).
    """

    measurement: Measurement
    device: torch.device
    parameter_bytes: int
    gradient_bytes: int
    optimizer_state_bytes: int
    start_bytes: int
    plans: tuple[PlanPeak, ...]
    memory_budget: int | None
    rates: DeviceRates
    forward_seconds: float

    def plan_named(self, name: str) -> PlanPeak:
        """The row `name`: "no checkpointing", "every block", "least" or "memory_budget"."""
        for row in self.plans:
            if row.name == name:
                return row
        raise KeyError(f"name: no plan {name!r}; the estimate has {[p.name for p in self.plans]}")

    @property
    def least_peak_bytes(self) -> int:
        """The least peak any plan reaches (what the step needs at least)."""
        return min(p.peak_bytes for p in self.plans if p.peak_bytes is not None)

    def at(self, memory_budget: int | float | str) -> PlanPeak:
        """remat's plan for `memory_budget` (the step's peak) and its predicted peak, from this
        estimate's fake step (no step runs again); its plan is None where none fits."""
        budget = parse_bytes(memory_budget)
        figures = self.measurement.step_figures
        assert figures is not None
        try:
            plan = plan_step(_planner(self.measurement), budget, figures, figures.start_bytes)
        except _core.InputError:
            return PlanPeak("memory_budget", None, None)
        return _row("memory_budget", plan, self.measurement, budget)

    def evaluate(self, plan: Plan) -> PlanPeak:
        """The predicted step peak of `plan` (a plan for this model, made here or by
        auto_checkpoint on the real model) with this estimate's step: what it begins holding,
        and what the step holds beside the blocks' activations."""
        return _row("given", plan, self.measurement, 0)

    def fits(self, memory_budget: int | float | str) -> bool:
        """Whether some plan keeps the step's peak within `memory_budget`."""
        return self.least_peak_bytes <= parse_bytes(memory_budget)

    def table(self) -> str:
        lines = [
            f"remat.estimate on {self.device} (fake tensors: no step ran): "
            f"{self.measurement.blocks.contents()}",
            f"  parameters and buffers {format_bytes(self.parameter_bytes)}; gradients "
            f"{format_bytes(self.gradient_bytes)}; optimizer state "
            f"{format_bytes(self.optimizer_state_bytes)}; a step begins holding "
            f"{format_bytes(self.start_bytes)}",
            f"  times at {self.rates.name}'s peak rates (a lower bound): the blocks' forward "
            f"{format_seconds(self.forward_seconds)}",
            "",
            f"  {'plan':<18} {'peak':>11} {'activations':>12} {'working':>11} {'head':>11} "
            f"{'re-runs':>9}  peak falls in",
        ]
        for row in self.plans:
            step = row.step
            label = row.name
            if row.name == "memory_budget" and self.memory_budget is not None:
                label = f"at {format_bytes(self.memory_budget)}"
            if step is None:
                lines.append(f"  {label:<18} {'no plan fits':>11}")
                continue
            lines.append(
                f"  {label:<18} {format_bytes(step.predicted_peak_bytes):>11} "
                f"{format_bytes(step.activation_bytes):>12} {format_bytes(step.working_bytes):>11} "
                f"{format_bytes(step.head_bytes):>11} "
                f"{format_seconds(row.recompute_seconds or 0.0):>9}  {step.where}"
            )
        lines += [
            "",
            "  activations: the blocks' saved activations at their peak; working: what the step",
            "  holds beside them while the blocks run (the backward's gradients and re-runs);",
            "  head: the code after the blocks (logits, loss); re-runs: the blocks' forwards run",
            "  again in backward. Estimated on fake tensors, not measured.",
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def estimate(
    model: nn.Module,
    *args: Any,
    optimizer: torch.optim.Optimizer | None = None,
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    memory_budget: int | float | str | None = None,
    blocks: str | nn.Module | Sequence[nn.Module] | None = None,
    device: torch.device | str = "cpu",
    rates: str | DeviceRates = "H100",
    autocast: torch.dtype | None = None,
    **kwargs: Any,
) -> Estimate:
    """Predicts one training step's peak memory without running it: the step runs on fake
    tensors, which hold no data, so a model far larger than this machine's memory can be
    estimated, on the meta device or real.

    Args:
        model: the model, on the meta device or real (it is copied with fake parameters).
        *args: its positional arguments: tensors on any device (meta included), whose shapes
            and dtypes are the batch's.
        optimizer: the optimizer that will train it (its class and hyperparameters are used on
            the fake copy; it may be built on the meta model's parameters).
        loss_fn: turns the model's output into the loss (as :func:`measure` takes it).
        memory_budget: a budget on the step's peak to plan for (bytes or with a unit).
        blocks: which blocks, as :func:`auto_checkpoint` takes them (names, or the model's own
            modules; default: found).
        device: the device the step is for: "cpu", or "cuda" where torch is built with CUDA
            (its fake CUDA tensors run CUDA's kernels' shapes; sizes count rounded up to the
            caching allocator's 512-byte blocks). No device is needed in either case.
        rates: the device whose peak rates time the ops ("H100", "H200", "A100", "L4", or a
            :class:`DeviceRates`): plans weigh recompute by these times.
        autocast: the dtype the forward runs in under ``torch.autocast`` (torch.bfloat16), as
            training will run it; None: no autocast. The CPU's autocast op lists apply.
        **kwargs: its keyword arguments.

    Returns:
        The estimate: the predicted peak by plan, with its breakdown; ``fits(budget)``.
    """
    target = _target(device)
    budget = None if memory_budget is None else parse_bytes(memory_budget)
    at = device_rates(rates)
    traced = trace_step(
        model,
        args,
        kwargs,
        optimizer=optimizer,
        loss_fn=loss_fn,
        blocks=blocks,
        device=target,
        rates=at,
        autocast=autocast,
    )
    return _estimate_of(
        traced.measured, target, traced.parameter_bytes, traced.gradient_bytes, budget, at
    )


@dataclass(frozen=True)
class Traced:
    """One training step traced on fake tensors and measured as ``measure()`` measures."""

    measured: Measurement
    calls: Calls  # the block calls a plan is made for, with the copy's modules
    twin: nn.Module  # the fake copy
    parameter_bytes: int
    gradient_bytes: int


def trace_step(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    optimizer: torch.optim.Optimizer | None,
    loss_fn: Callable[[Any], torch.Tensor] | None,
    blocks: str | nn.Module | Sequence[nn.Module] | None,
    device: torch.device,
    rates: DeviceRates,
    autocast: torch.dtype | None = None,
    copying: UnwrappedCopy | None = None,
    keep_devices: bool = False,
    granularity: str = "op",
) -> Traced:
    """The step of `model` on fake copies of it and its inputs on `device`, its ops timed by
    their roofline at `rates`. `copying`: the model is under auto_checkpoint, whose wrappers
    the copy leaves out. `keep_devices`: each fake on its original's device, not `device`.
    `granularity` "block": the blocks' ops are not profiled (see measure_with_calls).
    Raises RuntimeError naming the op where the step cannot run on fakes."""

    def where(tensor: torch.Tensor) -> torch.device:
        return tensor.device if keep_devices else device

    # FakeKernels right after the fake mode: below the count and the clock, which see its ops.
    with estimating(), FakeTensorMode(allow_non_fake_inputs=True) as mode, FakeKernels():
        fake_of: dict[int, torch.Tensor] = {}
        twin = _fake_copy(model, where, mode, fake_of, copying)
        inputs: dict[int, torch.Tensor] = {}  # one fake for a tensor passed twice (labels=ids)
        fake_args, fake_kwargs = tree_map(
            lambda v: _fake_value(v, where, mode, inputs), (args, kwargs)
        )
        fake_step = None if optimizer is None else fake_optimizer(optimizer, fake_of)
        found = _blocks_in_copy(model, twin, blocks)
        stepped: nn.Module = twin
        if autocast is not None:
            found = list(find_blocks(twin, found).modules)
            stepped = _Autocast(twin, device.type, autocast)
        with RooflineClock(rates) as roofline, timed_by(roofline.read):
            try:
                measured, calls = measure_with_calls(
                    stepped, fake_args, fake_kwargs, found, loss_fn, fake_step, None, granularity
                )
            except (ValueError, TypeError):
                raise
            except Exception as error:
                summary = error_summary(error)
                # torch's fake _grouped_mm (Mixture-of-Experts layers) takes bf16 only.
                hint = (
                    " (torch's fake grouped matmul takes bfloat16 only: estimate the model in "
                    "bfloat16, as it will train on a GPU)"
                    if "Expected inputs of BF16" in summary
                    else ""
                )
                raise RuntimeError(
                    "remat.estimate: the training step could not run on fake tensors "
                    f"({summary}){hint}. An op without a fake "
                    "implementation (a custom kernel), or one whose output's shape depends on the "
                    "data, cannot be estimated: measure the step on the device with "
                    "remat.torch.measure"
                ) from error
        parameter_bytes = held_bytes([*twin.parameters(), *twin.buffers()], device=device)
        gradient_bytes = held_bytes(
            [p for p in twin.parameters() if p.requires_grad], device=device
        )
    return Traced(measured, calls, twin, parameter_bytes, gradient_bytes)


def error_summary(error: BaseException) -> str:
    """An error in one line: its type and its message's first line."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def _estimate_of(
    measured: Measurement,
    device: torch.device,
    parameter_bytes: int,
    gradient_bytes: int,
    budget: int | None,
    rates: DeviceRates,
) -> Estimate:
    figures = measured.step_figures
    if figures is None:
        raise ValueError("model: the fake step measured no part of the step")
    start = figures.start_bytes
    make_plan = _planner(measured)
    rows = [
        _row("no checkpointing", make_plan(2**60), measured, budget),
        _row("every block", each_call_its_region(least_plan(make_plan)), measured, budget),
        _row("least", least_step_plan(make_plan, figures, start), measured, budget),
    ]
    found = Estimate(
        measured,
        device,
        parameter_bytes,
        gradient_bytes,
        measured.optimizer_state_bytes,
        start,
        tuple(row for row in rows if row.plan is not None),
        budget,
        rates,
        measured.profile.forward_seconds,
    )
    if budget is None:
        return found
    return dataclasses.replace(found, plans=(*found.plans, found.at(budget)))


def _planner(measured: Measurement) -> Callable[[int], Plan]:
    def make_plan(activation_budget: int) -> Plan:
        return plan_profile(measured.profile, activation_budget)

    return make_plan


def _row(name: str, plan: Plan | None, measured: Measurement, budget: int | None) -> PlanPeak:
    figures = measured.step_figures
    assert figures is not None
    step = None if plan is None else predicted_step(plan, figures, figures.start_bytes, budget or 0)
    return PlanPeak(name, plan, step)


def _fake_tensor(value: torch.Tensor, device: torch.device, mode: FakeTensorMode) -> torch.Tensor:
    """A fake tensor of `value`'s shape, strides and dtype on `device`."""
    with mode:
        return torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, device=device)


def _fake_value(
    value: Any,
    where: Callable[[torch.Tensor], torch.device],
    mode: FakeTensorMode,
    made: dict[int, torch.Tensor],
) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    if id(value) not in made:
        fake = _fake_tensor(value, where(value), mode)
        made[id(value)] = fake.requires_grad_(value.requires_grad and fake.is_floating_point())
    return made[id(value)]


def _fake_copy(
    model: nn.Module,
    where: Callable[[torch.Tensor], torch.device],
    mode: FakeTensorMode,
    fake_of: dict[int, torch.Tensor],
    copying: UnwrappedCopy | None = None,
) -> nn.Module:
    """A deep copy of `model` whose parameters and buffers are fake (no real copy is made);
    `fake_of` maps each original's id to its fake. `copying`: leaves remat's wrappers out."""
    memo: dict[int, Any] = {}
    if copying is not None:
        copying.seed(memo)
    for tensor in (*model.parameters(), *model.buffers()):
        if id(tensor) in memo:
            continue
        fake = _fake_tensor(tensor, where(tensor), mode)
        if isinstance(tensor, nn.Parameter):
            fake = nn.Parameter(fake, requires_grad=tensor.requires_grad)
        memo[id(tensor)] = fake_of[id(tensor)] = fake
    try:
        twin = copy.deepcopy(model, memo)
        if copying is not None:
            copying.mend(memo)
        return twin
    except TypeError as error:
        if "under auto_checkpoint" not in str(error):
            raise
        raise TypeError(
            "model: it is under auto_checkpoint, whose wrapped blocks cannot be copied; "
            "estimate it before auto_checkpoint, or call handle.remove() first (and "
            "handle.reinstall() after)"
        ) from None


def _target(device: torch.device | str) -> torch.device:
    target = torch.device(device)
    if target.type == "cuda" and not torch.backends.cuda.is_built():
        raise ValueError(
            f"device: {str(device)!r} cannot be estimated with this build of torch, which has no "
            "CUDA (its fake CUDA tensors need one); pass device='cpu', whose counts differ only "
            "where CUDA's kernels keep other buffers"
        )
    if target.type not in ("cpu", "cuda"):
        raise ValueError(f"device: {str(device)!r}; estimate takes 'cpu' or 'cuda'")
    return target


class _Autocast(nn.Module):
    """`model` called under torch.autocast."""

    def __init__(self, model: nn.Module, device_type: str, dtype: torch.dtype) -> None:
        super().__init__()
        self.model = model
        self.device_type = device_type
        self.dtype = dtype

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.autocast(self.device_type, dtype=self.dtype):
            return self.model(*args, **kwargs)


def _blocks_in_copy(
    model: nn.Module, twin: nn.Module, blocks: str | nn.Module | Sequence[nn.Module] | None
) -> Any:
    """`blocks` named in the copy: a path stays a path, the model's modules become their
    copies."""
    if blocks is None or isinstance(blocks, str):
        return blocks
    names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
    copies = dict(twin.named_modules(remove_duplicate=False))
    given = [blocks] if isinstance(blocks, nn.Module) else list(blocks)
    found = []
    for index, module in enumerate(given):
        if id(module) not in names:
            raise ValueError(f"blocks[{index}]: not a module of the model")
        found.append(copies[names[id(module)]])
    return found if not isinstance(blocks, nn.Module) else found[0]
