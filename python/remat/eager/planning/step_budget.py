"""A plan for a budget on the whole training step's peak, from one measured step.

The planner bounds the blocks' activations. The step holds more: what it begins with
(parameters, gradients, optimizer state), what the code after the blocks makes (the head's
logits, the loss), the backward's working set beside the blocks, and the optimizer step. One
measured step, read part by part (measuring/step_segments.py), gives three figures:

- outside: the optimizer step's peak, in whole bytes (its state, created by the first one, is
  what later steps begin with); plan-independent. The parts before the blocks' forward and
  after their backward hold no block activation either, but are counted from the step's
  start, as the next two are;
- head: the peak after the blocks' forward and before their backward, less what the blocks
  held then; a plan holds its own held-at-end-of-forward bytes there;
- blocks: the largest peak in a block's forward or backward (or between blocks), less a lower
  bound of the blocks' activations at that time; a plan holds at most its predicted peak.
  A block's forward is figured twice where the step was counted on the CPU: held whole (its
  saves and output, as a block the plan keeps holds them) and as the region the measuring step
  ran (which lets its saves go as the block's code drops them); a plan's block inside a region
  that re-runs whole is predicted by the lower of the two.

The last two are counted from the bytes held at the step's start, so that a later step that
begins with more (the optimizer's state, created by the first optimizer step) is planned with
them. A plan's predicted step peak is the largest of the three parts. The activation budget
given to the planner is the largest whose plan's predicted step peak fits; checks of the
following steps add any measured excess (StepFigures.margin_bytes).

Time: one plan per bisection step, O(log budget) planner calls. Memory: the profile's.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from ... import _core, _distributed
from ..measuring.step_segments import OUTSIDE, Part, StepRecord
from ..types import Plan, Profile, Region, StepPeak


@dataclass(frozen=True)
class StepFigures:
    """What one measured step held besides its blocks' activations, part by part (see the
    module's docstring)."""

    start_bytes: int  # held when the measured step began
    outside_bytes: int  # the peak outside the blocks, all of it
    # Per part inside the blocks' window: its peak beyond the step's start and the blocks'
    # activations there.
    beside: tuple[tuple[Part, int], ...]
    measured_peak_bytes: int  # the measured step's own peak
    margin_bytes: int = 0  # measured excess of followed plans, added to every prediction
    # The measured step's peak without its runs that only profiled ops, which a first step
    # under a budget makes only where they fit (StepSegments.room_bytes); None: the same.
    unprofiled_peak_bytes: int | None = None
    # Per block forward part, as a region that lets its saves go: its peak beyond the step's
    # start and what the step held before the call (empty: not measured so, as on CUDA).
    region_beside: tuple[tuple[Part, int], ...] = ()

    def first_step_least_bytes(self, profiling_fits_budget: bool) -> int:
        """The least budget a measuring step holds: with its profiling runs, unless a step
        under a budget leaves them out where they would not fit."""
        if profiling_fits_budget and self.unprofiled_peak_bytes is not None:
            return self.unprofiled_peak_bytes
        return self.measured_peak_bytes


class _Activations:
    """A plan's blocks' activations in each part of the step: what the layers hold from the
    forward, and the layers re-run or kept for the backward under way. An upper bound where
    the planner's model is finer (nested regions, selective ones)."""

    def __init__(self, plan: Plan) -> None:
        profile = plan.profile
        self._layers = profile.layers
        held = plan.held_after_forward()
        self._before = [profile.input_bytes]  # [i]: held by the input and layers < i
        for bytes_ in held:
            self._before.append(self._before[-1] + bytes_)
        self._first = list(range(len(held)))  # [i]: the first layer of i's outer region
        # Layers whose forward runs in a region that re-runs whole: no selective region holds
        # ops of theirs, nor does an offload plan move what they take.
        self._whole: set[int] = set()
        options = list(plan.options) + [-1] * (len(plan.regions) - len(plan.options))
        selective = {first for (first, _, _), option in zip(plan.regions, options) if option >= 0}
        for first, last, depth in plan.regions:
            if depth == 0:
                for layer in range(first, last + 1):
                    self._first[layer] = first
                    if plan.offload is None:
                        self._whole.add(layer)
        self._whole -= selective

    def region_forward(self, call: int) -> int | None:
        """Layer `call`'s activations in its forward inside a region that re-runs whole: what
        the layers before the region hold, and its input when a layer of the region made it
        (the region's forward holds nothing else of theirs). None: not in such a region."""
        if call not in self._whole:
            return None
        first = self._first[call]
        made_inside = self._layers[call - 1].output_bytes if call > first else 0
        return self._before[first] + made_inside

    def _working(self, first: int, last: int) -> int:
        """Layers first..last with their saved bytes and outputs (kept or re-run)."""
        return self._before[first] + sum(
            layer.saved_bytes + layer.output_bytes for layer in self._layers[first : last + 1]
        )

    def __call__(self, part: Part) -> int:
        if part in _NO_BLOCK_ACTIVATIONS:
            return 0
        kind, call = part[0], part[1]
        if kind == "forward":
            return self._working(call, call)
        if kind == "after":
            return self._before[call + 1]
        if kind == "backward":
            return self._working(self._first[call], call)
        # "before" call: the backward between call and call - 1
        if call > 0 and self._first[call] == self._first[call - 1]:
            return self._working(self._first[call], call - 1)
        return self._before[call]


def _every_call_a_region(profile: Profile) -> Plan:
    """The measuring step's plan: every layer its own region."""
    regions = tuple(Region(i, i, 0) for i in range(len(profile.layers)))
    return Plan(regions, 0, 0, 0.0, 0, 0, profile)


# Parts of the step where no block activation is held but what the step began with is: their
# peaks are counted from the step's start, as the blocks' parts are.
_NO_BLOCK_ACTIVATIONS = (("pre",), ("done",))


def _outside(part: Part, calls: int) -> bool:
    """Parts whose peak is taken whole: the optimizer step (whose state, created by the first
    one, the later steps begin with), and any beyond the profile's calls."""
    return part == ("optimizer",) or (part[0] not in OUTSIDE and part[1] >= calls)


def figures_of(record: StepRecord, profile: Profile) -> StepFigures:
    """The figures of a measured step whose block calls ran as their own regions."""
    measured = _Activations(_every_call_a_region(profile))
    calls = len(profile.layers)
    outside = record.start_bytes
    beside, region = [], []
    kept = dict(record.kept_parts)
    for part, peak in record.parts:
        if _outside(part, calls):
            outside = max(outside, peak)
            continue
        held_whole = kept.get(part, peak)
        beside.append((part, max(held_whole - record.start_bytes - measured(part), 0)))
        base = measured.region_forward(part[1]) if part[0] == "forward" else None
        if record.regions_let_go and base is not None:
            region.append((part, max(peak - record.start_bytes - base, 0)))
    return StepFigures(
        record.start_bytes,
        outside,
        tuple(beside),
        record.peak_bytes,
        unprofiled_peak_bytes=record.unprofiled_peak_bytes,
        region_beside=tuple(region),
    )


def figures_json(figures: StepFigures) -> dict[str, Any]:
    """The figures as `remat eager` reads them (a profile's "step"), for a step that begins
    holding ``figures.start_bytes``."""
    regions = dict(figures.region_beside)
    return {
        "start_bytes": figures.start_bytes,
        "outside_bytes": figures.outside_bytes,
        "margin_bytes": figures.margin_bytes,
        "parts": [
            {
                "part": part[0],
                **({"call": part[1]} if len(part) > 1 else {}),
                "beside_bytes": b,
                **({"region_beside_bytes": regions[part]} if part in regions else {}),
            }
            for part, b in figures.beside
        ],
    }


def _where(part: Part | None, calls: int) -> str:
    if part is None or part in _NO_BLOCK_ACTIVATIONS or part == ("before", 0):
        return "outside"
    return "head" if part == ("after", calls - 1) else "blocks"


def predicted_step(
    plan: Plan, figures: StepFigures, start_bytes: int, memory_budget: int
) -> StepPeak:
    """`plan`'s predicted step peak for a step that begins holding `start_bytes`."""
    margin = figures.margin_bytes
    activations = _Activations(plan)
    calls = len(plan.profile.layers)
    regions = dict(figures.region_beside)
    peak, at = max(figures.outside_bytes, start_bytes), None
    for part, beside in figures.beside:
        held = start_bytes + beside + activations(part) + margin
        in_region = activations.region_forward(part[1]) if part in regions else None
        if in_region is not None:  # both bound it: the region lets go of what it saves
            held = min(held, start_bytes + regions[part] + in_region + margin)
        if held > peak:
            peak, at = held, part
    head = next((b for p, b in figures.beside if p == ("after", calls - 1)), 0)
    working = max((b for p, b in figures.beside if _where(p, calls) == "blocks"), default=0)
    return StepPeak(
        memory_budget=memory_budget,
        predicted_peak_bytes=peak,
        fixed_bytes=start_bytes,
        activation_bytes=plan.predicted_peak_bytes,
        working_bytes=working + margin,
        head_bytes=head,
        outside_bytes=figures.outside_bytes,
        where=_where(at, calls),
        margin_bytes=margin,
    )


_SETS = {
    "outside": "the step outside the blocks (before them, after their backward or at the "
    "optimizer step): parameters, gradients and optimizer state",
    "head": "the code after the blocks (the head's logits and the loss) beside the blocks' "
    "least held activations",
    "blocks": "the blocks' least activations beside what the step holds while they run "
    "(parameters, gradients, optimizer state, the backward's working set)",
}


def agree_on_figures(
    figures: StepFigures | None, start_bytes: int, memory_budget: int, group: Any = None
) -> tuple[StepFigures | None, int, int]:
    """The figures, start and budget every rank of a process group plans one plan from: each
    figure the largest any rank measured (so each rank's prediction bounds its own step), the
    least budget (each rank's "auto" may differ), and no figures unless every rank has its own.
    Alone, its own."""
    if not _distributed.active(group):
        return figures, start_bytes, memory_budget
    gathered = _distributed.all_gather(
        (figures, start_bytes, memory_budget), "the step's figures", group
    )
    budget = min(b for _, _, b in gathered)
    start = max(s for _, s, _ in gathered)
    found = [f for f, _, _ in gathered if f is not None]
    if len(found) < len(gathered):
        return None, start, budget
    beside: dict[Part, int] = {}
    for each in found:
        for part, bytes_ in each.beside:
            beside[part] = max(beside.get(part, 0), bytes_)
    # A region's figure where every rank has one.
    regions = [dict(f.region_beside) for f in found]
    region = {p: max(r[p] for r in regions) for p in regions[0] if all(p in r for r in regions)}
    agreed = StepFigures(
        start_bytes=max(f.start_bytes for f in found),
        outside_bytes=max(f.outside_bytes for f in found),
        beside=tuple(beside.items()),
        measured_peak_bytes=max(f.measured_peak_bytes for f in found),
        margin_bytes=max(f.margin_bytes for f in found),
        region_beside=tuple(region.items()),
    )  # ranks planning together profile every block: no unprofiled figure
    return agreed, start, budget


def least_plan(make_plan: Callable[[int], Plan]) -> Plan:
    """The plan at the least activation budget any plan reaches (which planning at any budget
    reports)."""
    return make_plan(make_plan(2**60).minimum_budget_bytes)


def each_call_its_region(least: Plan) -> Plan | None:
    """The plan the measuring step ran, every call its own region re-run whole, evaluated as the
    planner evaluates plans; None where the planner's rules refuse it (a chain of one call)."""
    p = least.profile
    regions = [(i, i, 0, -1) for i in range(len(p.layers))]
    try:
        peak, recompute = _core.eager_evaluate(
            p.input_bytes,
            p.planned_layers(),
            p.region_overhead_seconds,
            p.max_region_layers,
            regions,
        )
    except _core.InputError:
        return None
    return dataclasses.replace(
        least,
        regions=tuple(Region(i, i, 0) for i in range(len(p.layers))),
        options=(),
        predicted_peak_bytes=peak,
        predicted_recompute_seconds=recompute,
        predicted_stage_peak_bytes=peak,
        offload=None,
    )


def least_step_plan(
    make_plan: Callable[[int], Plan], figures: StepFigures, start_bytes: int
) -> Plan:
    """The plan of the least predicted step peak among the least-activation plan and every call
    its own region (the measured step's plan, which HF's checkpointing also runs): the step
    model counts a region's re-run whole, so fewer activations need not mean a lower step."""
    least = least_plan(make_plan)
    each = each_call_its_region(least)
    if each is None:
        return least

    def peak(plan: Plan) -> int:
        return predicted_step(plan, figures, start_bytes, 0).predicted_peak_bytes

    return each if peak(each) < peak(least) else least


def plan_step(
    make_plan: Callable[[int], Plan],
    memory_budget: int,
    figures: StepFigures,
    start_bytes: int,
) -> Plan:
    """The least-recompute plan whose predicted step peak fits `memory_budget`.
    `make_plan(activation_budget)` plans the blocks' activations.

    Raises:
        remat.InputError: below the least predicted step peak (stating it in whole bytes and
            which part of the step sets it).
    """
    least = least_step_plan(make_plan, figures, start_bytes)
    floor = predicted_step(least, figures, start_bytes, memory_budget)
    if floor.predicted_peak_bytes > memory_budget:
        raise _core.InputError(
            f"memory_budget: {memory_budget} bytes is below the least peak of this training "
            f"step, {floor.predicted_peak_bytes} bytes, set by {_SETS[floor.where]} (the step "
            f"begins holding {start_bytes} bytes). Give at least that, or make the step smaller "
            "(a smaller batch, or an optimizer with less state)"
        )

    def fits(candidate: Plan) -> bool:
        found = predicted_step(candidate, figures, start_bytes, memory_budget)
        return found.predicted_peak_bytes <= memory_budget

    # The largest activation budget whose plan fits: the predicted step peak grows with it,
    # not strictly (what a plan holds at the end of the forward can fall as its peak rises).
    best, low, high = least, least.minimum_budget_bytes, least.no_checkpoint_bytes
    candidate = make_plan(high)
    if fits(candidate):
        best, low = candidate, high
    while low < high:
        middle = (low + high + 1) // 2
        candidate = make_plan(middle)
        if fits(candidate):
            best, low = candidate, middle
        else:
            high = middle - 1
    step = predicted_step(best, figures, start_bytes, memory_budget)
    return dataclasses.replace(best, step=step)


def least_step_peak(
    make_plan: Callable[[int], Plan], figures: StepFigures, start_bytes: int
) -> int:
    """The least predicted peak of a step that follows a plan (see least_step_plan)."""
    plan = least_step_plan(make_plan, figures, start_bytes)
    return predicted_step(plan, figures, start_bytes, 0).predicted_peak_bytes
