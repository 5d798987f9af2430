"""Plans: the C++ planner's least-recompute regions for a profile, and tuning them on the chain."""

from __future__ import annotations

import dataclasses
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn

from .. import _core
from ..saved_memory import has_fsdp_modules
from ..units import format_bytes, format_seconds, parse_bytes
from ._runtime import (
    _PreservedState,
    _detached,
    _modules_of,
    _signature,
    _synchronize,
    _tensors,
    clock,
)
from . import distributed, selective
from .execution import Execution
from .profile import Profile, profile_layers


@dataclass(frozen=True)
class Plan:
    """Where the checkpoint regions go, and what the planner predicts for them."""

    regions: tuple[tuple[int, int, int], ...]  # (first layer, last layer, depth), pre-order
    memory_budget: int
    predicted_peak_bytes: int
    predicted_recompute_seconds: float
    minimum_budget_bytes: int  # the least peak any plan reaches
    no_checkpoint_bytes: int  # the peak with no checkpoint at all
    profile: Profile = field(repr=False)
    # When tuned: each candidate that fits, with its measured chain forward + backward seconds;
    # `choice` names the one these regions come from.
    timings: tuple[tuple[str, float], ...] = ()
    choice: str = "planner"
    # Pipeline parallelism: how many microbatches' activations the stage holds at once, and the
    # stage's predicted peak over all of them (the planned peak when 1).
    microbatches_in_flight: int = 1
    predicted_stage_peak_bytes: int = 0
    # The selective checkpoint option of each region, in the order of `regions`: an index into
    # its layer's `options`, or -1 (the region re-runs whole). Empty: every region re-runs whole.
    options: tuple[int, ...] = ()
    # What the plan was made for: the input's shapes, dtypes and devices (None: from a profile).
    input_signature: Any = field(default=None, repr=False, compare=False)

    def core_regions(self) -> list[tuple[int, int, int, int]]:
        """The regions as the C++ core takes them: (first, last, depth, option)."""
        return _core_regions(self.regions, self.options)

    def held_at_end_of_forward(self) -> int:
        """The chain's input and what every layer holds after the forward pass."""
        return self.profile.input_bytes + sum(self.held_after_forward())

    def runs(self) -> list[int]:
        """How many times each layer's forward runs in a step (1: its activations are kept)."""
        runs = [1] * len(self.profile.layers)
        for first, last, _ in self.regions:
            for layer in range(first, last + 1):
                runs[layer] += 1
        return runs

    def kept(self) -> list[bool]:
        """Whether each layer's saved activations are kept from the first forward pass."""
        return [r == 1 for r in self.runs()]

    def _entry(self, region: int) -> selective.MenuEntry | None:
        """The menu entry region `region` runs with, None for a whole re-run."""
        option = self.options[region] if region < len(self.options) else -1
        if option < 0:
            return None
        return self.profile.selective[self.regions[region][0]][1][option]

    def keeps_ops(self, region: int) -> bool:
        """Whether region `region` runs selectively: its entry keeps some of its ops. An entry
        that keeps none is a whole re-run (torch's early stop ends it at the last saved op,
        which that entry's time counts and a whole region's forward time does not)."""
        entry = self._entry(region)
        return entry is not None and bool(entry.cached)

    def context_fn(
        self, region: int, warn: Callable[[str], None] | None = None
    ) -> Callable[[], Any] | None:
        """torch.utils.checkpoint's `context_fn` for region `region` (index into `regions`):
        its selective policy when the plan keeps some of its ops, else None (re-run all).
        `warn` gets what goes off the plan (a RuntimeWarning when not given)."""
        entry = self._entry(region)
        if entry is None or not entry.cached:
            return None
        first = self.regions[region][0]
        op_profile, _ = self.profile.selective[first]
        return selective.context_fn(op_profile, entry, self.profile.layers[first].name, warn)

    def contexts(self) -> dict[int, Callable[[], Any]]:
        """Every selective region's `context_fn`, by region index."""
        found = {i: self.context_fn(i) for i in range(len(self.regions))}
        return {i: f for i, f in found.items() if f is not None}

    def held_after_forward(self) -> list[int]:
        """Bytes each layer holds once the forward pass is done: a plain layer its saved bytes
        and its output, a region only its output (on its last layer) and, run with an option,
        the option's held bytes, layers inside a region nothing. With the chain's input they add
        up to the peak at the end of the forward pass; a re-run in backward can raise the peak
        above that (never above the prediction)."""
        layers = self.profile.layers
        # The chain's last layer holds its output only when it saves it, or when the code after
        # the chain keeps it (output_held): then no layer ends the chain.
        n = len(layers) + (1 if self.profile.output_held else 0)
        held = []
        outer = [(first, last) for first, last, depth in self.regions if depth == 0]
        cache = {
            first: layers[first].options[option][0]
            for (first, _, _), option in zip(self.regions, self.options)
            if option >= 0
        }
        for i, layer in enumerate(layers):
            region = next(((f, l) for f, l in outer if f <= i <= l), None)
            if region is not None:
                output = layer.output_bytes if i == region[1] and i < n - 1 else 0
                held.append(output + cache.get(i, 0))
            elif i < n - 1 or layer.saves_output:
                held.append(layer.saved_bytes + layer.output_bytes)
            else:
                held.append(layer.saved_bytes)
        return held

    def table(self) -> str:
        """The plan as a table (also ``print(plan)``)."""
        p = self.profile
        forward = p.forward_seconds
        share = self.predicted_recompute_seconds / forward if forward > 0 else 0.0
        held = self.held_after_forward()
        at_end = p.input_bytes + sum(held)
        kind = "one region per layer at most" if p.max_region_layers == 1 else "nested regions"
        lines = [
            f"remat checkpoint plan: {len(p.layers)} layers, budget "
            f"{format_bytes(self.memory_budget)} ({kind})",
            f"  predicted peak saved {format_bytes(self.predicted_peak_bytes)} (no checkpoint "
            f"{format_bytes(self.no_checkpoint_bytes)}, least possible "
            f"{format_bytes(self.minimum_budget_bytes)})",
            f"  predicted recompute {format_seconds(self.predicted_recompute_seconds)} = "
            f"{share:.0%} of the forward pass ({format_seconds(forward)}), with "
            f"{format_seconds(p.region_overhead_seconds)} per region",
            f"  {len(self.regions)} checkpoint regions",
        ]
        if self.timings:
            measured = ", ".join(f"{label} {format_seconds(t)}" for label, t in self.timings)
            lines.append(
                f"  tuned: chose {self.choice} by measured forward + backward ({measured})"
            )
        width = max([len(layer.name) for layer in p.layers] + [4])
        lines += [
            "",
            f"  {'#':>4}  {'name':<{width}}  {'saves':>10} {'output':>10} {'held':>10} "
            f"{'forward':>9}  runs  regions",
            f"  {'':>4}  {'(input)':<{width}}  {'':>10} {format_bytes(p.input_bytes):>10} "
            f"{format_bytes(p.input_bytes):>10}",
        ]
        depth = max((d for _, _, d in self.regions), default=-1) + 1
        selective_regions = {
            self.regions[r][0] for r in range(len(self.regions)) if self.keeps_ops(r)
        }
        for i, (layer, runs) in enumerate(zip(p.layers, self.runs())):
            marks = [" "] * depth
            for first, last, d in self.regions:
                if first <= i <= last:
                    marks[d] = (
                        ("~" if first in selective_regions else "=")
                        if first == last
                        else "/" if i == first else "\\" if i == last else "|"
                    )
            lines.append(
                f"  {i:>4}  {layer.name:<{width}}  {format_bytes(layer.saved_bytes):>10} "
                f"{format_bytes(layer.output_bytes):>10} {format_bytes(held[i]):>10} "
                f"{format_seconds(layer.forward_seconds):>9}  {runs:>4}  {''.join(marks)}"
            )
        for index, (first, _, _) in enumerate(self.regions):
            option = self.options[index] if index < len(self.options) else -1
            if option < 0:
                continue
            rerun = format_seconds(p.layers[first].options[option][1])
            op_profile, entries = p.selective[first]
            entry = entries[option]
            if not entry.cached:
                lines.append(
                    f"  {'':>4}  {'':<{width}}  ^ layer {first} re-runs whole, up to its last "
                    f"saved op: {rerun}"
                )
                continue
            lines.append(
                f"  {'':>4}  {'':<{width}}  ^ layer {first} selective: "
                f"{selective.describe(op_profile, entry)}; holds "
                f"{format_bytes(entry.held_bytes)}, re-runs {rerun}"
            )
        lines += [
            f"  {'':>4}  {'total':<{width}}  {'':>10} {'':>10} {format_bytes(at_end):>10} "
            f"{format_seconds(forward):>9}",
            "",
            "  saves: bytes autograd saves inside the layer, besides its input and output; output:",
            "  the activation passed to the next layer; held: what the layer holds after the",
            "  forward pass under this plan (the total is the peak then; a re-run in backward",
            "  may add to it, up to the predicted peak); runs: forward evaluations per step;",
            "  regions: one column per nesting depth, / first layer, | inside, \\ last layer,",
            "  = a region of one layer, ~ one run selectively (the ops it keeps are listed above).",
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _core_regions(
    regions: Sequence[Sequence[int]], options: Sequence[int] = ()
) -> list[tuple[int, int, int, int]]:
    """(first, last, depth) regions with their options (-1 where `options` has none)."""
    chosen = list(options) + [-1] * (len(regions) - len(options))
    return [(int(r[0]), int(r[1]), int(r[2]), int(o)) for r, o in zip(regions, chosen)]


def _plan_one(profile: Profile, budget: int, slots: int | None) -> Plan:
    layers = profile.planned_layers()
    if not layers:
        raise ValueError("functions: the chain has no layers")
    result = _core.eager_plan(
        profile.input_bytes,
        layers,
        profile.region_overhead_seconds,
        profile.max_region_layers,
        budget,
        0 if slots is None else slots,
        0,  # 0: default
    )
    return Plan(
        regions=tuple((first, last, depth) for first, last, depth, _ in result["regions"]),
        options=tuple(option for *_, option in result["regions"]),
        memory_budget=budget,
        predicted_peak_bytes=result["peak_bytes"],
        predicted_recompute_seconds=result["recompute_time"],
        minimum_budget_bytes=result["minimum_budget"],
        no_checkpoint_bytes=result["no_checkpoint_bytes"],
        profile=profile,
        predicted_stage_peak_bytes=result["peak_bytes"],
    )


def _stage_peak(found: Plan, microbatches: int) -> int:
    """1F1B: the stage holds the forward activations of `microbatches` microbatches, and one of
    them is in its backward (re-runs included) at a time."""
    return (microbatches - 1) * found.held_at_end_of_forward() + found.predicted_peak_bytes


def _whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_planner_options(slots: int | None, microbatches_in_flight: int) -> None:
    if slots is not None and not _whole_number(slots):
        raise ValueError(f"slots: expected a whole number >= 1 (or None), got {slots!r}")
    if not _whole_number(microbatches_in_flight):
        raise ValueError(
            f"microbatches_in_flight: expected a whole number >= 1, got {microbatches_in_flight!r}"
        )


def plan_profile(
    profile: Profile,
    memory_budget: int | float | str,
    *,
    slots: int | None = None,
    microbatches_in_flight: int = 1,
) -> Plan:
    """The least-recompute plan for a measured profile (see :func:`plan`).

    With `microbatches_in_flight` = m > 1 (a pipeline stage under a 1F1B-style schedule) the
    budget is the stage's: (m - 1) microbatches' bytes held after their forward plus one
    microbatch's peak must fit. The plan is the least-recompute one among per-microbatch
    budgets from budget / m (which always fits, held <= peak) up to the budget, searched by
    bisection on that stage peak."""
    budget = parse_bytes(memory_budget)
    _check_planner_options(slots, microbatches_in_flight)
    m = microbatches_in_flight
    if m == 1:
        return _plan_one(profile, budget, slots)
    least = _plan_one(profile, 2**60, slots).minimum_budget_bytes
    floor = _plan_one(profile, least, slots)
    if _stage_peak(floor, m) > budget:
        raise _core.InputError(
            f"memory_budget: {budget} bytes is below the least stage peak with "
            f"{m} microbatches in flight, {_stage_peak(floor, m)} bytes"
        )
    best, low, high = floor, max(least, budget // m), budget
    while low <= high:
        middle = (low + high) // 2
        candidate = _plan_one(profile, middle, slots)
        if _stage_peak(candidate, m) <= budget:
            if candidate.predicted_recompute_seconds <= best.predicted_recompute_seconds:
                best = candidate
            low = middle + 1
        else:
            high = middle - 1
    return dataclasses.replace(
        best,
        memory_budget=budget,
        microbatches_in_flight=m,
        predicted_stage_peak_bytes=_stage_peak(best, m),
    )


def plan(
    functions: Sequence[Callable[[Any], Any]] | nn.Sequential,
    input: Any,
    *,
    memory_budget: int | float | str,
    profile: Profile | None = None,
    slots: int | None = None,
    tune: bool = True,
    exclude: Iterable[Any] = (),
    names: Sequence[str] | None = None,
    microbatches_in_flight: int = 1,
    plan_group: Any = None,
    granularity: str = "op",
) -> Plan:
    """The plan :func:`checkpoint_sequential` would run, without running it.

    With `tune` (and an input), the planner's plan and every torch-style uniform segmentation
    whose predicted peak fits are each timed on the real chain (forward + backward, gradients
    returned rather than accumulated, RNG and BatchNorm statistics restored) and the fastest
    is kept: the planner's time model is forward time, which the hardware does not always
    honour (on CPU a re-run just before its backward finds its activations in cache).

    Under an initialized process group, every rank of `plan_group` (default: all) plans from
    one profile and one set of tuning timings and the plans are checked equal (see
    :mod:`remat.eager.distributed`); ``plan_group="local"`` plans on this rank alone.

    Raises ``remat.InputError`` (a ValueError) stating the least feasible budget when
    `memory_budget` is below it."""
    functions = list(functions)
    _check_planner_options(slots, microbatches_in_flight)  # before profiling, which takes long
    if profile is None:
        profile = profile_layers(
            functions,
            input,
            exclude=exclude,
            names=names,
            granularity=granularity,
            alone=not distributed.active(plan_group),
        )
    elif len(profile.layers) != len(functions):
        raise ValueError(
            f"profile: has {len(profile.layers)} layers, functions has {len(functions)}"
        )
    profile = distributed.agree_on_profile(profile, parse_bytes(memory_budget), plan_group)
    found = plan_profile(
        profile, memory_budget, slots=slots, microbatches_in_flight=microbatches_in_flight
    )
    if tune and input is not None and _tensors(input) and microbatches_in_flight == 1:
        found = tune_plan(functions, input, found, plan_group=plan_group)
    distributed.verify_same_plan((found.regions, found.options), group=plan_group)
    if input is not None:
        found = dataclasses.replace(found, input_signature=_signature(input))
    return found


def uniform_regions(layers: int, segments: int) -> list[tuple[int, int, int]]:
    """The regions of torch.utils.checkpoint.checkpoint_sequential(functions, segments, ...):
    segments of layers // segments layers, all but the last checkpointed."""
    size = layers // segments
    return [(first, first + size - 1, 0) for first in range(0, size * (segments - 1), size)]


def tune_plan(
    functions: Sequence[Callable[[Any], Any]],
    input: Any,
    planned: Plan,
    repeats: int = 2,
    max_candidates: int = 3,
    max_seconds: float | None = None,
    plan_group: Any = None,
) -> Plan:
    """The fastest, measured on the chain, of the planner's plan and the uniform segmentations
    whose predicted peak fits the budget.

    Bounded: nothing is timed when the plan needs no region; at most `max_candidates` plans
    (the planner's and the fitting segmentations with the least predicted recompute), each
    timed `repeats` times in rounds, and no new round starts once `max_seconds` have passed
    (default: the time of 10 forward passes of the chain as profiled). Not under FSDP2 (a layer
    that is or holds a fully_shard module): the timed backward would run FSDP's own backward
    hooks, reduce-scattering gradients and resharding parameters in the middle of the step
    (the model's next layer then met sharded weights)."""
    p = planned.profile
    if not _tunable(planned):
        return planned
    modules = [m for f in functions for m in _modules_of(f)]
    if any(has_fsdp_modules(m) for m in modules):
        warnings.warn(
            "remat: the chain's layers are FSDP2 (fully_shard) modules, so the plan is not tuned "
            "(timing a step would run FSDP's backward hooks mid-step); the planner's plan is used",
            RuntimeWarning,
            stacklevel=3,
        )
        return planned
    candidates = tuning_candidates(planned, max_candidates)
    if len(candidates) == 1:
        return planned
    limit = 10 * p.forward_seconds if max_seconds is None else max_seconds
    parameters = [t for m in modules for t in m.parameters() if t.requires_grad]
    devices = {t.device for t in _tensors(input)}
    timings: dict[str, list[float]] = {label: [] for label in candidates}
    start = time.perf_counter()
    with _PreservedState(modules, devices):
        for _ in range(repeats):
            for label, candidate in candidates.items():
                timings[label].append(
                    _time_step(
                        functions, candidate.regions, input, parameters, candidate.contexts()
                    )
                )
            # Ranks must run the same candidates as often (under FSDP each run gathers
            # parameters): the time cap applies only to a plan made alone.
            if time.perf_counter() - start > limit and not distributed.active(plan_group):
                break
    median = {label: statistics.median(t) for label, t in timings.items()}
    median = distributed.agree_on_timings(median, plan_group)
    return fastest(candidates, median)


def tuning_candidates(planned: Plan, max_candidates: int = 3) -> dict[str, Plan]:
    """The plans tuning times, by label: the planner's ("planner") and at most
    `max_candidates` - 1 uniform segmentations (torch's checkpoint_sequential layout, re-run
    whole) whose predicted peak fits the budget, those with the least predicted recompute.
    Only the planner's when tuning cannot change the plan (see _tunable)."""
    if not _tunable(planned):
        return {"planner": planned}
    p = planned.profile
    layers, overhead = p.core_layers(), p.region_overhead_seconds
    fitting = []
    planner_regions = planned.core_regions()
    for segments in range(2, len(layers) + 1):
        regions = _core_regions(uniform_regions(len(layers), segments))
        peak, recompute = _core.eager_evaluate(p.input_bytes, layers, overhead, 0, regions)
        if peak <= planned.memory_budget and regions != planner_regions:
            fitting.append((recompute, segments, regions, peak))
    fitting.sort(key=lambda c: (c[0], c[1]))
    candidates = {"planner": planned}
    for recompute, segments, regions, peak in fitting[: max(0, max_candidates - 1)]:
        candidates[f"{segments} segments"] = dataclasses.replace(
            planned,
            regions=tuple(r[:3] for r in regions),
            options=tuple(r[3] for r in regions),
            predicted_peak_bytes=peak,
            predicted_recompute_seconds=recompute,
        )
    return candidates


def _tunable(planned: Plan) -> bool:
    """Whether tuning may choose another plan: this one needs a region, and regions may span
    several layers (uniform segmentations do)."""
    return bool(planned.regions) and planned.profile.max_region_layers == 0


def fastest(candidates: dict[str, Plan], seconds: dict[str, float]) -> Plan:
    """The candidate of least measured `seconds`, carrying every candidate's timing."""
    choice = min(seconds, key=seconds.__getitem__)
    return dataclasses.replace(candidates[choice], timings=tuple(seconds.items()), choice=choice)


def _time_step(
    functions: Sequence[Callable[[Any], Any]],
    regions: Sequence[tuple[int, int, int]],
    input: Any,
    parameters: list[torch.Tensor],
    contexts: dict[int, Callable[[], Any]] | None = None,
) -> float:
    x = _detached(input)
    inputs = parameters + [t for t in _tensors(x) if t.requires_grad]
    now = clock()
    _synchronize(x)
    start = now()
    with torch.enable_grad():
        execution = Execution(functions, regions, contexts)
        outputs = [t for t in _tensors(execution(x)) if t.requires_grad]
        if outputs and inputs:
            # Returned, not accumulated: the caller's .grad fields stay as they are.
            torch.autograd.grad(
                outputs, inputs, [torch.ones_like(t) for t in outputs], allow_unused=True
            )
    _synchronize(x)
    return now() - start


def run_plan(functions: Sequence[Callable[[Any], Any]], plan: Plan, input: Any) -> Any:
    """Runs `functions` on `input` through `plan`'s checkpoint regions. An input of other
    shapes or dtypes than the plan was made for runs too, with a warning: what it saves (so the
    peak) is not what the plan predicted."""
    functions = list(functions)
    if len(functions) != len(plan.profile.layers):
        raise ValueError(
            f"plan: has {len(plan.profile.layers)} layers, functions has {len(functions)}"
        )
    if plan.input_signature is not None and _signature(input) != plan.input_signature:
        warnings.warn(
            "remat.run_plan: input: other shapes, dtypes or devices than the plan was made for; "
            "its saved bytes may exceed the plan's predicted peak (plan again for this input)",
            RuntimeWarning,
            stacklevel=2,
        )
    return Execution(functions, plan.regions, plan.contexts())(input)
