"""remat.torch.fit: a byte budget on the whole training step that holds as measured, by
compiling, measuring and retrying.

The peak ``use(memory_budget=...)`` predicts is that of the partitioner's graphs run in their own
order (``aot_eager``). Inductor lowers and schedules those graphs itself, and on the Llama-style
models its backward held one more logits-sized buffer at the peak than that order does (+64 KiB
on the test model, +8%); so a budget between the two is met by the prediction and missed by the
step. ``fit`` compiles the model at the budget, measures one step, and while the measured peak is
over the budget it compiles again at a lower target: the last plan's prediction less what the
step measured over the budget (so the next plan must shed at least the excess seen), or, where
no plan is predicted that low, the least plan once. It returns the target to give ``use()``
(the whole step's peak, as ``use()`` takes it, with the same optimizer), with every attempt;
each costs one compile and two steps.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ..step_memory import HostCopy, held_at_start
from ..units import format_bytes, parse_bytes
from .budget import BudgetTooSmall, OptimizerStepTooLarge
from .solver import FITTED_TARGETS


@dataclass(frozen=True)
class Attempt:
    target: int  # bytes: the memory_budget this compile was given (the whole step's)
    predicted: int  # bytes: its chosen plan's predicted step peak
    measured: int  # bytes: one step's measured peak, whole: what it began holding included
    seconds: float  # the compile and the two steps
    start: int = 0  # bytes: what the measured step held as it began


@dataclass
class Fit:
    memory_budget: int  # bytes: what to give use(memory_budget=..., optimizer=...)
    budget: int  # bytes: what the whole step must measure within
    attempts: list[Attempt] = field(default_factory=list)

    @property
    def measured(self) -> int:
        return self.attempts[-1].measured

    def __str__(self) -> str:
        lines = [
            f"remat.torch.fit: use(memory_budget={self.memory_budget}) measures "
            f"{format_bytes(self.measured)} within {format_bytes(self.budget)}, after "
            f"{len(self.attempts)} compile(s)"
        ]
        for attempt in self.attempts:
            lines.append(
                f"  target {format_bytes(attempt.target):>10}  predicted "
                f"{format_bytes(attempt.predicted):>10}  measured "
                f"{format_bytes(attempt.measured):>10}  ({attempt.seconds:.1f} s)"
            )
        return "\n".join(lines)


class BudgetNotMet(MemoryError):
    """No compile measured within the budget; the message names the least measured peak."""

    def __init__(self, budget: int, attempts: list[Attempt], why: str) -> None:
        self.budget, self.attempts = budget, attempts
        least = min(attempts, key=lambda a: a.measured) if attempts else None
        tightest = (
            f"; the least measured was {format_bytes(least.measured)} ({least.measured} bytes) "
            f"at memory_budget={least.target}"
            if least
            else ""
        )
        super().__init__(
            f"memory_budget: no compile measured within {format_bytes(budget)} ({budget} bytes) "
            f"after {len(attempts)} attempt(s): {why}{tightest}. Raise the budget, or shrink "
            "the batch."
        )


def _training_state(model: Any, optimizer: torch.optim.Optimizer | None) -> HostCopy:
    """What an attempt's steps change: buffers (BatchNorm's) at every step, the parameters and
    the optimizer's state under an optimizer."""
    tensors: list[torch.Tensor] = []
    if isinstance(model, torch.nn.Module):
        tensors += [*model.buffers(), *(model.parameters() if optimizer is not None else ())]
    if optimizer is not None:
        tensors += [p for group in optimizer.param_groups for p in group["params"]]
    return HostCopy(tensors, optimizer)


def fit(
    model: Callable[..., Any],
    *example_inputs: Any,
    memory_budget: int | float | str,
    optimizer: torch.optim.Optimizer | None = None,
    backend: str = "inductor",
    loss: Callable[[Any], torch.Tensor] | None = None,
    max_attempts: int = 6,
    verbose: bool = True,
    **example_kwargs: Any,
) -> Fit:
    """The ``use(memory_budget=...)`` target under which a training step of `model`, compiled
    with `backend`, measures within `memory_budget`: the whole step's peak on the device.

    A step is ``loss(model(*example_inputs)).backward()``, then ``optimizer.step()`` when
    `optimizer` is given. Its peak counts what it holds as it begins (parameters, buffers, the
    inputs, the optimizer's state) and everything it allocates. It compiles at the budget,
    measures one step, and while the step is over it compiles again at a lower target (the
    plan's prediction less the excess it measured, or the least plan); each attempt is one
    compile and two steps. When every plan is predicted over the budget, the least plan is
    still compiled and measured once, if its prediction beyond the step's start is at most twice
    the budget's (a step can measure under its prediction). The parameters and the optimizer's
    state are put back as they were after each attempt, and gradients cleared;
    ``torch._dynamo.reset()`` runs before each compile.

    Args:
        model: the model (or any callable) to compile.
        *example_inputs: its positional arguments.
        memory_budget: the whole training step's peak on the inputs' device, in bytes or with
            a unit ("6GiB").
        optimizer: the optimizer that trains the model: its step and its state are measured
            with the step (None: the step ends with the backward).
        backend: torch.compile's backend.
        loss: turns the output into the loss (default: the sum of its tensors that need
            gradients).
        max_attempts: the most compiles tried.
        verbose: a line on stderr per attempt.
        **example_kwargs: its keyword arguments.

    Returns:
        The fit: ``memory_budget`` (the target to give ``use()``, with the same optimizer), the
        step's ``measured`` peak, and every attempt.

    Raises:
        BudgetNotMet: no attempt measured within the budget; it names the least measured peak.

    Example:
        ```python
        fitted = remat.torch.fit(model, x, memory_budget="6GiB", optimizer=opt, loss=loss_fn)
        with remat.torch.use(memory_budget=fitted.memory_budget, optimizer=opt):
            train_step(x).backward()
        ```
    """
    from .tradeoff_curve import _clear_grads, _default_loss, _device_of, compile_and_measure

    budget = parse_bytes(memory_budget)
    loss = loss or _default_loss
    attempts: list[Attempt] = []
    device = _device_of(example_inputs, example_kwargs)
    _clear_grads(model)  # as after each of its steps: the steps it measures begin without them
    start = held_at_start(device, model, optimizer, example_inputs, example_kwargs)
    if start >= budget:
        raise BudgetNotMet(
            budget,
            attempts,
            f"the step holds {format_bytes(start)} ({start} bytes) before it begins "
            "(parameters, buffers, inputs, optimizer state)",
        )
    target = budget
    kept = _training_state(model, optimizer)  # put back after each attempt
    for _ in range(max_attempts):
        started = time.perf_counter()
        try:
            solver, beyond, start = compile_and_measure(
                model,
                loss,
                example_inputs,
                example_kwargs,
                backend,
                target,
                optimizer=optimizer,
            )
        except OptimizerStepTooLarge as error:
            torch._dynamo.reset()
            raise BudgetNotMet(budget, attempts, str(error)) from error
        except BudgetTooSmall as error:
            torch._dynamo.reset()
            tried = {attempt.target for attempt in attempts}
            # The least plan, once: after an excess overshot it, or first when every plan is
            # predicted over the budget, since a compiled step can measure well under the
            # prediction (inductor: 0.72-0.82 of it on small MLPs). Not when the graph's part
            # of it is past twice the budget's.
            beyond = error.least_peak - error.start
            if error.least_peak not in tried and beyond <= 2 * (budget - error.start):
                target = error.least_peak
                continue
            why = (
                f"no plan is predicted within {format_bytes(target)} (the least predicted step "
                f"peak of this compile is {format_bytes(error.least_peak)}, "
                f"{format_bytes(error.start)} of it held as the step begins)"
            )
            raise BudgetNotMet(budget, attempts, why) from error
        finally:
            kept.restore()
        if not solver.choices or solver.choices[0].chosen is None:
            raise RuntimeError(
                "remat.torch.fit: torch.compile partitioned no graph with recomputable ops"
            )
        predicted = max(
            choice.start_bytes + choice.chosen.peak.peak
            for choice in solver.choices
            if choice.chosen
        )
        measured = start + beyond
        seconds = time.perf_counter() - started
        attempts.append(Attempt(target, predicted, measured, seconds, start))
        if verbose:
            print(
                f"remat.torch.fit: target {format_bytes(target)}: predicted "
                f"{format_bytes(predicted)}, measured {format_bytes(measured)} "
                f"({seconds:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
        if measured <= budget:
            torch._dynamo.reset()
            FITTED_TARGETS.add(target)
            return Fit(memory_budget=target, budget=budget, attempts=attempts)
        # The next plan must shed at least what this one measured over the budget.
        target = min(target, predicted) - (measured - budget)
        if target <= 0:
            break
    torch._dynamo.reset()
    raise BudgetNotMet(budget, attempts, "every plan tried measured over it")
