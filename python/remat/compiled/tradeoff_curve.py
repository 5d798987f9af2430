"""remat.torch.tradeoff: predicted peak against estimated recompute over a model's whole range.

One compile predicts every candidate plan of the (thinned) Pareto front; the Pareto-optimal
ones in (predicted peak, recompute) are the curve a byte budget moves along. A few of them are
then compiled again under ``use(memory_budget=<that peak>)`` and measured, so the user sees how
the prediction holds on their model before choosing a budget.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from torch._functorch import config as functorch_config

from ..step_memory import held_at_start
from ..units import format_bytes
from . import survey
from .budget import Candidate, GraphChoice
from .measure import measured_peak
from .solver import use


@dataclass(frozen=True)
class TradeoffPoint:
    predicted_peak: int  # bytes: the step's predicted peak under this plan
    recompute: float  # estimated runtime of the recomputed candidate ops (estimator's unit)
    recomputed_ops: int
    saved: int  # bytes the forward saves for backward
    pareto: bool  # no other plan has both a lower-or-equal peak and less-or-equal recompute
    measured_peak: int | None = None  # bytes, where this point was compiled and measured


@dataclass
class Tradeoff:
    points: list[TradeoffPoint]  # every predicted plan, least recompute first
    runtime_unit: str
    graphs: int  # compiled graphs; the curve is the first one's
    backend: str
    measured: list[int] = field(default_factory=list)  # indices into points that were measured
    # Bytes the step holds as it begins (the model's parameters and buffers, the inputs): a
    # point's whole-step peak, as fit() and auto_checkpoint count it, is this plus its peak.
    start_bytes: int = 0

    @property
    def curve(self) -> list[TradeoffPoint]:
        """The Pareto-optimal points, highest peak (least recompute) first."""
        return [point for point in self.points if point.pareto]

    def __str__(self) -> str:
        lines = [
            f"remat.torch.tradeoff ({self.backend}; recompute in {self.runtime_unit}; "
            f"* = on the curve)",
            f"  peaks beyond the {format_bytes(self.start_bytes)} the step begins holding "
            "(parameters, buffers, inputs)",
            f"{'':2}{'predicted peak':>16} {'measured':>12} {'saved':>12} "
            f"{'recompute':>12} {'ops':>5}",
        ]
        for point in self.points:
            measured = "" if point.measured_peak is None else format_bytes(point.measured_peak)
            lines.append(
                f"{'*' if point.pareto else ' ':2}{format_bytes(point.predicted_peak):>16} "
                f"{measured:>12} {format_bytes(point.saved):>12} {point.recompute:>12.4g} "
                f"{point.recomputed_ops:>5}"
            )
        if self.graphs > 1:
            lines.append(
                f"({self.graphs} graphs were compiled (a graph break); this is the first one's "
                "curve, and no point is measured: a step's peak holds every graph)"
            )
        return "\n".join(lines)


def _points(choice: GraphChoice) -> list[TradeoffPoint]:
    candidates: Sequence[Candidate] = choice.candidates
    points = []
    for candidate in candidates:
        dominated = any(
            other.peak.peak <= candidate.peak.peak
            and other.recompute <= candidate.recompute
            and (other.peak.peak, other.recompute) != (candidate.peak.peak, candidate.recompute)
            for other in candidates
        )
        points.append(
            TradeoffPoint(
                predicted_peak=candidate.peak.peak,
                recompute=candidate.recompute,
                recomputed_ops=len(candidate.recomputed),
                saved=candidate.peak.saved,
                pareto=not dominated,
            )
        )
    return points


def _default_loss(output: Any) -> torch.Tensor:
    """The sum of every output tensor that needs a gradient, in float32."""
    tensors = [t for t in torch.utils._pytree.tree_leaves(output) if isinstance(t, torch.Tensor)]
    training = [t.float().sum() for t in tensors if t.requires_grad]
    if not training:
        raise ValueError(
            "loss: no output of the model needs a gradient (its parameters and inputs do not "
            "require grad, or it ran under no_grad), so there is no backward pass to plan; "
            "give example inputs and parameters that train, or a loss= that reaches them"
        )
    return sum(training[1:], training[0])


def tradeoff(
    model: Callable[..., Any],
    *example_inputs: Any,
    backend: str = "inductor",
    measure: int = 3,
    loss: Callable[[Any], torch.Tensor] = _default_loss,
    max_candidates: int = 33,
    verbose: bool = True,
    **example_kwargs: Any,
) -> Tradeoff:
    """Compiles `model` once and predicts every candidate plan's step peak; then compiles and
    measures `measure` points of the curve, spread from the highest peak to the lowest.

    The model and `loss` are compiled together, so the peak covers the loss too; a step is
    ``loss(model(*example_inputs, **example_kwargs)).backward()``, and gradients are cleared
    after each one. Calls ``torch._dynamo.reset()`` before each compile, since torch.compile's
    caches do not see the budget. Compile what you will train: a later
    ``use(memory_budget=...)`` warns when it partitions another graph than this one (the model
    compiled without its loss, another output), since the curve does not describe that graph.

    Args:
        model: the model (or any callable) to compile.
        *example_inputs: its positional arguments.
        backend: torch.compile's backend.
        measure: points of the curve compiled and measured (0: none).
        loss: turns the output into the loss (default: the sum of its tensors that need
            gradients).
        max_candidates: the most plans predicted per graph.
        verbose: a line on stderr per compile, with the time the rest will take.
        **example_kwargs: its keyword arguments.

    Returns:
        The curve: each plan's predicted peak and recompute, the measured points, and the
        time each planning step took; ``remat.plot.plot_tradeoff`` draws it.

    Example:
        ```python
        curve = remat.torch.tradeoff(model, x, loss=loss_fn, measure=1)
        print(curve)
        ```
    """

    say = _progress(verbose)
    torch._dynamo.reset()
    device = _device_of(example_inputs, example_kwargs)
    start_bytes = held_at_start(device, model, example_inputs, example_kwargs)
    say(f"compiling ({backend}) and predicting every plan's peak")
    started = time.perf_counter()
    # A cache hit would skip the partitioner, and with it the survey.
    no_cache = functorch_config.patch(enable_autograd_cache=False)
    with no_cache, use(memory_budget=2**61, max_candidates=max_candidates) as solver:
        solver.survey = True
        compiled = torch.compile(_training_loss(model, loss), backend=backend)
        compiled(*example_inputs, **example_kwargs).backward()
        _clear_grads(model)
        solver.survey = False
    survey_seconds = time.perf_counter() - started
    if not solver.choices:
        raise RuntimeError(
            "remat.torch.tradeoff: torch.compile partitioned no graph with recomputable ops "
            "(nothing needs a backward, or every op is banned from recompute)"
        )
    estimator = functorch_config.activation_memory_budget_runtime_estimator
    result = Tradeoff(
        points=_points(solver.choices[0]),
        runtime_unit="flops" if estimator == "flops" else str(estimator),
        graphs=len(solver.choices),
        backend=backend,
        start_bytes=start_bytes,
    )
    first = solver.choices[0]
    survey.remember(first.graph_key, min(p.predicted_peak for p in result.points), backend)
    curve = [i for i, point in enumerate(result.points) if point.pareto]
    curve.sort(key=lambda i: -result.points[i].predicted_peak)
    say(
        f"{len(result.points)} plans predicted in {survey_seconds:.1f} s "
        f"({first.seconds:.1f} s of it predicting), {len(curve)} on the curve"
    )
    if measure > 0 and curve and result.graphs > 1:
        # Compiled at a budget of the first graph's curve, the other graphs could not fit it,
        # and the step measured would hold them all.
        say(f"{result.graphs} graphs (a graph break): the curve is the first one's, unmeasured")
    elif measure > 0 and curve:
        picks = sorted(
            {curve[round(k * (len(curve) - 1) / max(1, measure - 1))] for k in range(measure)}
        )
        say(
            f"compiling and measuring {len(picks)} of them: about "
            f"{len(picks) * survey_seconds:.0f} s more (measure=0 skips this)"
        )
        for number, index in enumerate(picks, 1):
            point = result.points[index]
            started = time.perf_counter()
            _, peak, _ = compile_and_measure(
                model,
                loss,
                example_inputs,
                example_kwargs,
                backend,
                point.predicted_peak,
                max_candidates,
                whole_step=False,
            )
            result.points[index] = TradeoffPoint(**{**point.__dict__, "measured_peak": peak})
            result.measured.append(index)
            say(
                f"measured {number} of {len(picks)}: predicted "
                f"{format_bytes(point.predicted_peak)}, measured {format_bytes(peak)} "
                f"({time.perf_counter() - started:.1f} s)"
            )
        torch._dynamo.reset()
    return result


def compile_and_measure(
    model: Callable[..., Any],
    loss: Callable[[Any], torch.Tensor],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    backend: str,
    memory_budget: int,
    max_candidates: int = 33,
    optimizer: torch.optim.Optimizer | None = None,
    whole_step: bool = True,
) -> tuple[Any, int, int]:
    """``loss(model(*args, **kwargs))`` compiled with ``backend`` under
    ``use(memory_budget=..., optimizer=...)``, its step run once to compile and once measured:
    the solver (with its choices), the measured step's peak beyond what it held as it began,
    and what it held then. A step is the backward, then `optimizer`'s step when given (whose
    state the first step creates, so that the measured one begins holding it); gradients are
    cleared after each. `whole_step` False: the budget is the graph's peak alone, as
    tradeoff()'s curve gives it. Resets dynamo first, since its caches do not see the budget,
    and compiles past AOTAutograd's cache, whose hit would skip the partitioner. BudgetTooSmall
    propagates."""

    torch._dynamo.reset()
    device = _device_of(args, kwargs)
    no_cache = functorch_config.patch(enable_autograd_cache=False)
    within = use(memory_budget=memory_budget, max_candidates=max_candidates, optimizer=optimizer)
    with no_cache, within as solver:
        solver.warn_on_inductor = False  # this step is measured
        solver.counts_start = whole_step
        compiled = torch.compile(_training_loss(model, loss), backend=backend)

        def train_step() -> None:
            compiled(*args, **kwargs).backward()
            if optimizer is not None:
                optimizer.step()
            _clear_grads(model)

        train_step()
        start = held_at_start(device, model, optimizer, args, kwargs)
        peak = measured_peak(train_step, device)
    return solver, peak, start


def _training_loss(
    model: Callable[..., Any], loss: Callable[[Any], torch.Tensor]
) -> Callable[..., torch.Tensor]:
    """The model and its loss as one function, so that one graph holds both."""

    def training_loss(*args: Any, **kwargs: Any) -> torch.Tensor:
        return loss(model(*args, **kwargs))

    return training_loss


def _clear_grads(model: Callable[..., Any]) -> None:
    if isinstance(model, torch.nn.Module):
        model.zero_grad(set_to_none=True)


def _progress(verbose: bool) -> Callable[[str], None]:
    def say(line: str) -> None:
        if verbose:
            print(f"remat.torch.tradeoff: {line}", file=sys.stderr, flush=True)

    return say


def _device_of(args: Sequence[Any], kwargs: dict[str, Any]) -> torch.device:
    for value in torch.utils._pytree.tree_leaves((args, kwargs)):
        if isinstance(value, torch.Tensor):
            return value.device
    return torch.device("cpu")
