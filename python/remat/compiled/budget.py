"""The least-recompute plan whose predicted peak fits a budget in bytes.

Algorithm: the candidates are the plans at the breakpoints of the knapsack's exact Pareto front
(bytes of the candidate ops kept against runtime spared; ``remat.pareto``, one
Nemhauser-Ullmann pass), each turned into a partition whose step peak is predicted by a
liveness walk (``partition.py``, ``liveness.py``). They are ordered by estimated recompute, then
by predicted peak; the choice is the first in that order whose peak fits. The order does not
depend on the budget, so a smaller budget can only move the choice later: never less recompute,
never a higher predicted peak (if the larger budget's choice fits the smaller budget it is the
smaller budget's choice too; otherwise its peak is above the smaller budget, which bounds the
new choice's). Candidates are evaluated lazily in that order, so a generous budget costs one
partition.

Time: the front has at most ``max_candidates`` plans kept (evenly spaced over the breakpoints
when there are more, independently of the budget); each costs a min-cut and a graph walk. A plan
whose saved tensors and outputs alone (all live at the forward's end) exceed the budget is ruled
out after its min-cut, without the split and the walk (Partitioner.lower_bound); the choice is
unchanged. The predicted peaks are not monotone along the order (on the bench's Llama-style
model they rise and fall by up to 1.5 MiB between neighbours), so a bisection over it could skip
the first plan that fits: the scan stays linear.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .._solve import pareto, solve
from ..units import format_bytes
from .liveness import StepPeak

try:  # dynamo re-raises these from a backend as they are, its own frames cut from the traceback
    from torch._dynamo.exc import ShortenTraceback as _Unwrapped
except ImportError:  # a torch without dynamo's exception classes: wrapped like any error
    _Unwrapped = Exception  # type: ignore[assignment,misc]


class BudgetTooSmall(MemoryError, _Unwrapped):  # type: ignore[misc]
    """No plan's predicted peak fits the byte budget; the message names the least one.

    Raised inside torch.compile's partitioner, it reaches the compiled call as itself, not as
    dynamo's BackendCompilerFailed: the traceback runs from the user's call to the plan's
    choice, without the ~60 frames of dynamo, AOTAutograd and the partitioner in between
    (TORCHDYNAMO_VERBOSE=1 keeps them).

    ``budget`` and ``least_peak`` are the whole step's (``start`` is what the step holds as it
    begins); ``least`` is the graph's least plan, its peak beyond the start."""

    def __init__(
        self, budget: int, least: "Candidate", evaluated: int, start: int = 0, why: str = ""
    ) -> None:
        self.budget, self.evaluated, self.start = budget, evaluated, start
        self.least: Candidate | None = least
        self.least_peak = start + least.peak.peak
        # The frame that raises: dynamo cuts the traceback above it (ShortenTraceback).
        self.first_useful_frame = sys._getframe(1)
        graph = (
            f"forward {format_bytes(least.peak.forward_peak)}, "
            f"backward {format_bytes(least.peak.backward_peak)}"
        )
        if start:
            where = (
                f"{format_bytes(start)} the step holds as it begins{why}, and this compiled "
                f"graph's least peak beyond it, {format_bytes(least.peak.peak)} ({graph})"
            )
        else:
            where = graph
        MemoryError.__init__(
            self,
            f"memory_budget: {format_bytes(budget)} ({budget} bytes) is below the least "
            f"predicted peak of this training step, {format_bytes(self.least_peak)} "
            f"({self.least_peak} bytes: {where}), reached by recomputing "
            f"{len(least.recomputed)} of the candidate ops; {evaluated} plans were predicted. "
            "Raise the budget, or shrink the batch.",
        )


class OptimizerStepTooLarge(BudgetTooSmall):
    """The optimizer's step alone is predicted over the budget: no checkpoint plan helps."""

    def __init__(self, budget: int, optimizer_peak: int, start: int) -> None:
        self.budget, self.least_peak, self.start = budget, optimizer_peak, start
        self.least, self.evaluated = None, 0
        self.first_useful_frame = sys._getframe(1)
        MemoryError.__init__(
            self,
            f"memory_budget: {format_bytes(budget)} ({budget} bytes) is below the predicted "
            f"peak of the optimizer's step, {format_bytes(optimizer_peak)} ({optimizer_peak} "
            "bytes: the parameters, their gradients, its state and its temporaries, beside "
            f"what else the step holds; {format_bytes(start)} as it begins), which no "
            "checkpoint plan lowers. Raise the budget, or shrink the model's training state "
            "(a lighter optimizer, fewer trained parameters).",
        )


@dataclass(frozen=True)
class Candidate:
    recomputed: tuple[int, ...]  # indices into the solver's candidate ops
    recompute: float  # their estimated runtime, in the estimator's unit (flops by default)
    peak: StepPeak
    offloaded: frozenset[str] = frozenset()  # saved values moved to the host (use(offload=))


@dataclass
class GraphChoice:
    """What the byte-budget solver decided for one compiled graph."""

    budget: int | None  # None when surveying (tradeoff)
    chosen: Candidate | None
    candidates: list[Candidate] = field(default_factory=list)  # predicted, in choice order
    plans: int = 0  # plans on the (thinned) front
    seconds: float = 0.0
    ratio: float | None = None  # the ratio budget torch's knapsack needs to save the same ops
    graph_key: Any = None  # what tells this graph from others (see survey.graph_key)
    # Of `seconds`: the min-cuts, the forward/backward splits and the liveness walks.
    step_seconds: dict[str, float] = field(default_factory=dict)
    bounded: int = 0  # plans ruled out by a lower bound on their peak, without a split
    # What the step holds as it begins: a plan's predicted step peak is this plus its peak.
    start_bytes: int = 0


def front_plans(
    sizes: Sequence[int], runtimes: Sequence[float], max_candidates: int
) -> list[tuple[tuple[int, ...], float]]:
    """(recomputed indices, recompute) at each breakpoint of the exact front, least recompute
    first, at most ``max_candidates`` of them (first and last always kept)."""
    n = len(sizes)
    total = float(sum(sizes))
    if n == 0 or total <= 0:
        return [((), 0.0)]
    memory = [size / total for size in sizes]
    scale = 10000.0
    front = pareto(memory, runtimes, 1.0, scale=scale)
    budgets = sorted(set(float(b) for b in front.budgets), reverse=True)
    if budgets[0] < 1.0:
        budgets.insert(0, 1.0)
    if len(budgets) > max_candidates:
        step = (len(budgets) - 1) / (max_candidates - 1)
        budgets = [budgets[round(i * step)] for i in range(max_candidates)]
    plans: dict[tuple[int, ...], float] = {(): 0.0}  # keep everything, whatever the rounding
    all_runtime = float(sum(runtimes))
    for budget in budgets:
        result = solve(memory, runtimes, budget, scale=scale)
        recomputed = tuple(result.recomputed)
        plans.setdefault(recomputed, max(0.0, all_runtime - result.max_runtime))
    return sorted(plans.items(), key=lambda item: (item[1], len(item[0])))


def choose(
    plans: Sequence[tuple[tuple[int, ...], float]],
    predict: Callable[[tuple[int, ...], int | None, bool], Any],
    budget: int | None,
    offload: bool = False,
) -> GraphChoice:
    """The first plan (least recompute, then least peak) whose predicted peak fits ``budget``;
    every plan when ``budget`` is None. Raises BudgetTooSmall when none fits.

    ``predict(recomputed, budget, offload)`` is the plan's Partition (its peak, and the saved
    values it offloads), or None when a lower bound on its peak is above ``budget``
    (Partitioner.predict: no split or walk for a plan that cannot fit). Such plans are skipped;
    only when no plan fits are they predicted after all, for the least peak the error names. The
    choice is the same as predicting every plan. With ``offload``, when no plan fits on the
    device alone, the plans are scanned again in the same order with their offloadable saved
    values moved to the host: offloading is the last resort, for the budgets it alone meets."""
    started = time.perf_counter()
    choice = GraphChoice(budget=budget, chosen=None, plans=len(plans))
    skipped = _scan(plans, predict, budget, False, choice)
    if budget is not None and choice.chosen is None and offload:
        skipped += _scan(plans, predict, budget, True, choice)
    choice.bounded = len(skipped)
    if budget is not None and choice.chosen is None:
        for recomputed, recompute, moving in skipped:
            exact = predict(recomputed, None, moving)
            assert exact is not None
            choice.candidates.append(Candidate(recomputed, recompute, exact.peak, exact.offloaded))
        choice.seconds = time.perf_counter() - started
        least = min(choice.candidates, key=lambda c: (c.peak.peak, c.recompute))
        raise BudgetTooSmall(budget, least, len(choice.candidates))
    choice.seconds = time.perf_counter() - started
    return choice


def _scan(
    plans: Sequence[tuple[tuple[int, ...], float]],
    predict: Callable[[tuple[int, ...], int | None, bool], Any],
    budget: int | None,
    offload: bool,
    choice: GraphChoice,
) -> list[tuple[tuple[int, ...], float, bool]]:
    """Predicts the plans in order until one fits (see choose); returns those a lower bound
    ruled out."""
    fitting_recompute: float | None = None
    skipped: list[tuple[tuple[int, ...], float, bool]] = []
    for recomputed, recompute in plans:
        if fitting_recompute is not None and recompute > fitting_recompute:
            break  # the rest recompute more than a plan that fits
        found = predict(recomputed, budget, offload)
        if found is None:
            skipped.append((recomputed, recompute, offload))
            continue
        if offload and not found.offloaded:
            continue  # nothing to move: the first scan predicted it already
        candidate = Candidate(recomputed, recompute, found.peak, found.offloaded)
        choice.candidates.append(candidate)
        if budget is not None and candidate.peak.peak <= budget:
            if choice.chosen is None or candidate.peak.peak < choice.chosen.peak.peak:
                choice.chosen = candidate
            fitting_recompute = recompute
    return skipped


def knapsack_answer(choice: GraphChoice, n: int) -> tuple[list[int], list[int]]:
    """(saved, recomputed) indices, as torch's solver interface returns them."""
    assert choice.chosen is not None
    recomputed = sorted(choice.chosen.recomputed)
    chosen = set(recomputed)
    return [i for i in range(n) if i not in chosen], recomputed


def candidate_sizes(nodes: Sequence[Any]) -> list[int]:
    """Bytes of each candidate op's output, as torch's partitioner sizes them."""
    from torch._functorch.partitioners import _size_of

    return [int(_size_of(node)) for node in nodes]
