"""Keep, recompute or offload each layer of a measured profile under a device budget and a host
budget: the C++ planner of remat/offload.hpp (exact for its model, checked against exhaustive
search), and the copy bandwidth that model needs.

The model: an offloaded layer's saved activations are copied to host memory while the next
layer runs forward and copied back, prefetched, while the next layer runs backward; a copy
takes bytes / bandwidth and stalls the step by what the compute beside it does not cover. Each
layer is its own region (as auto_checkpoint checkpoints blocks). auto_checkpoint(...,
offload=...) plans with plan_with_offload and runs the plan (run/offload.py; docs/offload.md).
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ... import _core, _distributed
from ...units import format_bytes, parse_bytes
from ..types import OffloadFigures, Plan, Profile, Region
from .planner import plan_profile

_RATE = re.compile(r"^\s*(.+?)\s*/\s*s\s*$", re.IGNORECASE)


def parse_bandwidth(value: int | float | str) -> float:
    """Bytes per second from a number or a rate such as "25GB/s" or "12 GiB/s"."""
    if isinstance(value, str):
        found = _RATE.match(value)
        if not found:
            raise ValueError(
                f"offload_bandwidth: expected bytes per second such as '25GB/s', got {value!r}"
            )
        rate = float(parse_bytes(found.group(1), "offload_bandwidth"))
        if not rate > 0:
            raise ValueError(f"offload_bandwidth: expected a positive rate, got {value!r}")
        return rate
    # inf passed here once and failed at the first step, or planned no offload at all.
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value < float("inf")
    ):
        raise ValueError(
            "offload_bandwidth: expected a positive, finite number of bytes per second, got "
            f"{value!r}"
        )
    return float(value)


@dataclass(frozen=True)
class OffloadSettings:
    """auto_checkpoint's offload arguments, checked: whether plans may offload, the host
    budget, and the copy bandwidth (None: measured on the blocks' device when first needed)."""

    mode: bool | str = False  # False, "auto" (CUDA devices only) or True (any device)
    host_budget: int | None = None
    bandwidth: float | None = None

    @classmethod
    def of(
        cls,
        offload: bool | str,
        host_budget: int | float | str | None,
        offload_bandwidth: int | float | str | None,
    ) -> "OffloadSettings":
        if not (offload is False or offload is True or offload == "auto"):
            raise ValueError(
                f"offload: expected False, 'auto' or True, got {offload!r} ('auto' offloads on "
                "CUDA devices; True on any, as a copy between host tensors on the CPU)"
            )
        return cls(
            mode=offload,
            host_budget=None if host_budget is None else parse_bytes(host_budget, "host_budget"),
            bandwidth=None if offload_bandwidth is None else parse_bandwidth(offload_bandwidth),
        )

    def for_device(self, device: torch.device, group: Any = None) -> float | None:
        """The bandwidth to plan with for blocks on `device`, or None when not offloading
        there. A measured bandwidth is the least over a plan group's ranks (one plan for all)."""
        if self.mode is False or self.mode == "auto" and device.type != "cuda":
            return None
        if self.bandwidth is not None:
            return self.bandwidth
        measured = measure_bandwidth(device)
        if _distributed.active(group):
            measured = min(_distributed.all_gather(measured, "the offload bandwidth", group))
        return measured


_MEASURED: dict[str, float] = {}


def measure_bandwidth(device: str | torch.device = "cuda", nbytes: int = 64 << 20) -> float:
    """The copy bandwidth between `device` and host memory, in the slower direction, timed once
    per process and device (pinned host memory on CUDA; on CPU, a copy between two host tensors,
    which is what offloading runs there).

    Args:
        device: the device activations would be offloaded from.
        nbytes: the size of the copies timed (the best of 3 each way).

    Returns:
        Bytes per second.
    """
    device = torch.device(device)
    key = str(device)
    if key not in _MEASURED:
        _MEASURED[key] = _time_copies(device, nbytes)
    return _MEASURED[key]


def _time_copies(device: torch.device, nbytes: int) -> float:
    count = max(1, nbytes // 4)
    on_device = torch.empty(count, dtype=torch.float32, device=device)
    host = torch.empty(count, dtype=torch.float32, pin_memory=device.type == "cuda")
    slowest = float("inf")
    for source, target in ((on_device, host), (host, on_device)):
        best = float("inf")
        for _ in range(3):
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            started = time.perf_counter()
            target.copy_(source, non_blocking=device.type == "cuda")
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            best = min(best, time.perf_counter() - started)
        slowest = min(slowest, count * 4 / max(best, 1e-9))
    return slowest


@dataclass(frozen=True)
class LayerAction:
    name: str
    # "keep", "region", "option", "offload" (its saved activations move) or "offload_input" (a
    # region whose input, the previous layer's output, moves)
    action: str
    option: int  # with "option": an index into the layer's options (its menu); else -1
    offloaded_bytes: int  # what moves to the host and back


@dataclass(frozen=True)
class OffloadPlan:
    """Per layer: keep, recompute (whole, or an option of its menu) or offload; and what the
    model predicts for the step."""

    layers: tuple[LayerAction, ...]
    memory_budget: int
    host_budget: int | None
    bandwidth: float  # bytes per second
    predicted_peak_bytes: int
    predicted_recompute_seconds: float
    predicted_stall_seconds: float  # copy time not hidden behind compute
    predicted_copy_seconds: float  # every copy, out and back
    host_bytes: int  # offloaded bytes on the host at the end of the forward
    minimum_budget_bytes: int

    @property
    def offloaded(self) -> tuple[int, ...]:
        """The layers whose saved activations move."""
        return tuple(i for i, layer in enumerate(self.layers) if layer.action == "offload")

    @property
    def inputs_offloaded(self) -> tuple[int, ...]:
        """The regions whose input (the previous layer's output) moves."""
        return tuple(i for i, layer in enumerate(self.layers) if layer.action == "offload_input")

    @property
    def hidden_share(self) -> float:
        """The share of the copy time that runs behind compute (1.0 with no copy)."""
        if self.predicted_copy_seconds <= 0:
            return 1.0
        return 1.0 - self.predicted_stall_seconds / self.predicted_copy_seconds

    def __str__(self) -> str:
        lines = [
            f"offload plan: peak {format_bytes(self.predicted_peak_bytes)} of "
            f"{format_bytes(self.memory_budget)}, host {format_bytes(self.host_bytes)}"
            + ("" if self.host_budget is None else f" of {format_bytes(self.host_budget)}")
            + f"; re-runs {1e3 * self.predicted_recompute_seconds:.2f} ms, copies "
            f"{1e3 * self.predicted_copy_seconds:.2f} ms at "
            f"{format_bytes(self.bandwidth)}/s, {100 * self.hidden_share:.0f}% of them hidden "
            f"(stall {1e3 * self.predicted_stall_seconds:.2f} ms)",
            "",
            "| layer | name | action | offloaded | copy ms each way |",
            "| ---: | --- | --- | ---: | ---: |",
        ]
        for i, layer in enumerate(self.layers):
            action = layer.action if layer.action != "option" else f"option {layer.option}"
            copy = layer.offloaded_bytes / self.bandwidth if self.bandwidth else 0.0
            lines.append(
                f"| {i} | {layer.name} | {action} | "
                f"{format_bytes(layer.offloaded_bytes) if layer.offloaded_bytes else '-'} | "
                f"{1e3 * copy:.3f} |"
            )
        return "\n".join(lines)


def plan_offload(
    profile: Profile,
    memory_budget: int | float | str,
    *,
    bandwidth: int | float | str,
    host_budget: int | float | str | None = None,
    backward_seconds: Sequence[float] | None = None,
    offloadable: Sequence[bool] | None = None,
    input_offloadable: Sequence[bool] | None = None,
    slots: int = 2048,
    host_slots: int = 64,
) -> OffloadPlan:
    """The least re-run + stall time plan of `profile` whose predicted peak fits `memory_budget`
    and whose offloaded bytes fit `host_budget`, each layer its own region.

    Args:
        profile: the measured chain (``remat.torch.measure(...).profile``, ``profile_layers``,
            ``Profile.from_json``).
        memory_budget: the peak of saved activations on the device, in bytes or with a unit.
        bandwidth: copy bytes per second each way ("25GB/s", or :func:`measure_bandwidth`).
        host_budget: host bytes for offloaded activations (None: any).
        backward_seconds: per layer, its backward's compute time (None: twice its forward's).
        offloadable: per layer, whether it may be offloaded (None: every layer but the last).
        input_offloadable: per layer, whether its input may move when it is a region (None:
            wherever the model allows: see remat/offload.hpp).
        slots: the device memory resolution; host_slots: the host memory resolution (sizes are
            rounded up, so the plan always fits).

    Returns:
        The plan, with the model's peak, re-run, copy and stall times.

    Raises:
        remat.InputError: the budget is below the least peak any plan reaches (stating it), or
            no plan fits both budgets.
    """
    budget = parse_bytes(memory_budget)
    rate = parse_bandwidth(bandwidth)
    host = None if host_budget is None else parse_bytes(host_budget, "host_budget")
    layers = profile.planned_layers()
    backward = [] if backward_seconds is None else [float(s) for s in backward_seconds]
    if backward and len(backward) != len(profile.layers):
        raise ValueError(
            f"backward_seconds: expected one time per layer ({len(profile.layers)}), "
            f"got {len(backward)}"
        )
    mask = _mask(offloadable, "offloadable", len(profile.layers))
    input_mask = _mask(input_offloadable, "input_offloadable", len(profile.layers))
    if len(layers) > len(profile.layers):  # the code after the chain (Profile.output_held)
        if backward:
            backward.append(0.0)
        for flags in (mask, input_mask):
            if flags:
                flags.append(False)
    found = _core.offload_plan(
        profile.input_bytes,
        layers,
        profile.region_overhead_seconds,
        budget,
        rate,
        -1 if host is None else host,
        backward,
        mask,
        input_mask,
        slots,
        host_slots,
    )

    def moved(index: int, action: str) -> int:
        if action == "offload":
            return profile.layers[index].saved_bytes
        return profile.layers[index - 1].output_bytes if action == "offload_input" else 0

    actions = tuple(
        LayerAction(name=layer.name, action=action, option=option, offloaded_bytes=moved(i, action))
        for i, (layer, (action, option)) in enumerate(zip(profile.layers, found.layers))
    )
    return OffloadPlan(
        layers=actions,
        memory_budget=budget,
        host_budget=host,
        bandwidth=rate,
        predicted_peak_bytes=found.peak_bytes,
        predicted_recompute_seconds=found.recompute_time,
        predicted_stall_seconds=found.stall_time,
        predicted_copy_seconds=found.copy_time,
        host_bytes=found.host_bytes,
        minimum_budget_bytes=found.minimum_budget,
    )


def _mask(flags: Sequence[bool] | None, name: str, layers: int) -> list[bool]:
    found = [] if flags is None else [bool(f) for f in flags]
    if found and len(found) != layers:
        raise ValueError(f"{name}: expected one flag per layer ({layers}), got {len(found)}")
    return found


# An offload plan replaces the keep/recompute plan only when it is predicted faster by more than
# this share of the step's forward time: copies that the model says hide behind compute still
# take memory bandwidth from it.
_MARGIN = 0.01


def plan_with_offload(
    profile: Profile,
    memory_budget: int,
    *,
    bandwidth: float,
    host_budget: int | None,
    slots: int | None = None,
) -> Plan:
    """auto_checkpoint's plan when it may offload: the keep/recompute plan (plan_profile), or,
    where offloading some layers is predicted to cost less re-run and stall time, the offload
    plan as a Plan whose `offload` names those layers (its regions are the rest's re-runs).

    Raises:
        remat.InputError: the budget is below the least peak any plan reaches (stating it).
    """
    if profile.max_region_layers != 1 or len(profile.layers) < 2:
        return plan_profile(profile, memory_budget, slots=slots)
    try:
        base: Plan | None = plan_profile(profile, memory_budget, slots=slots)
    except _core.InputError:  # below keep/recompute's least: moving inputs may still fit
        base = None
    try:
        found = plan_offload(
            profile,
            memory_budget,
            bandwidth=bandwidth,
            host_budget=host_budget,
            offloadable=[layer.offloadable for layer in profile.layers],
            input_offloadable=[layer.input_offloadable for layer in profile.layers],
            slots=2048 if slots is None else slots,
        )
    except _core.InputError:  # below every plan's least, or the host budget's
        if base is None:
            raise
        return base
    cost = found.predicted_recompute_seconds + found.predicted_stall_seconds
    margin = _MARGIN * profile.forward_seconds
    moves = found.offloaded or found.inputs_offloaded
    if base is not None and (not moves or cost >= base.predicted_recompute_seconds - margin):
        return dataclasses.replace(base, minimum_budget_bytes=found.minimum_budget_bytes)
    if base is None:
        base = plan_profile(profile, 2**60, slots=slots)  # for its no-checkpoint peak
    regions, options = [], []
    for index, layer in enumerate(found.layers):
        if layer.action in ("region", "option", "offload_input"):
            regions.append(Region(index, index, 0))
            options.append(layer.option)
    return dataclasses.replace(
        base,
        memory_budget=memory_budget,
        minimum_budget_bytes=found.minimum_budget_bytes,
        regions=tuple(regions),
        options=tuple(options),
        predicted_peak_bytes=found.predicted_peak_bytes,
        predicted_recompute_seconds=found.predicted_recompute_seconds,
        predicted_stage_peak_bytes=found.predicted_peak_bytes,
        offload=OffloadFigures(
            layers=found.offloaded,
            inputs=found.inputs_offloaded,
            bandwidth=found.bandwidth,
            host_bytes=found.host_bytes,
            host_budget=host_budget,
            copy_seconds=found.predicted_copy_seconds,
            stall_seconds=found.predicted_stall_seconds,
        ),
    )
