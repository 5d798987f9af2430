"""checkpoint_sequential with a memory budget, and the plan cache behind it."""

from __future__ import annotations

import dataclasses
import functools
import warnings
import weakref
from collections import OrderedDict
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn

from ... import _distributed
from ...units import parse_bytes
from .._runtime import _modules_of, _signature, _tensors, run_context, signature_difference
from ..measuring.chain import profile_layers
from ..planning.agree import agree_on_profile
from ..planning.planner import budget_named, check_planner_options, plan_profile
from ..types import Plan, Profile
from .contexts import plan_contexts
from .execution import Execution
from .tuning import tune_plan


def _held(function: Any) -> Any:
    """A strong reference read as a weak one (a function that cannot be weakly referenced)."""
    return function


class _PlanCache:
    """Plans by (the functions, the input's shapes and dtypes, the budget). An entry holds weak
    references to the functions, so a recycled id() never returns a stale plan."""

    def __init__(self, capacity: int = 64) -> None:
        self._entries: OrderedDict[Any, tuple[list[Any], Plan]] = OrderedDict()
        self._capacity = capacity

    @staticmethod
    def _refs(functions: Sequence[Any]) -> list[Callable[[], Any]]:
        refs: list[Callable[[], Any]] = []
        for f in functions:
            try:
                refs.append(weakref.ref(f))
            except TypeError:
                refs.append(functools.partial(_held, f))  # not weak-referenceable: held
        return refs

    def get(self, key: Any, functions: Sequence[Any]) -> Plan | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        refs, found = entry
        if any(ref() is not f for ref, f in zip(refs, functions)):
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return found

    def put(self, key: Any, functions: Sequence[Any], value: Plan) -> None:
        self._entries[key] = (self._refs(functions), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


_plans = _PlanCache()
# Under a process group: this rank's number for each call's key. Never renumbered: a number
# given again to other inputs would pair with another rank's cached plan.
_numbers: dict[Any, int] = {}


def checkpoint_sequential(
    functions: Sequence[Callable[[Any], Any]] | nn.Sequential,
    input: Any,
    *,
    activation_budget: int | float | str | None = None,
    profile: Profile | None = None,
    slots: int | None = None,
    tune: bool = True,
    plan_group: Any = None,
    granularity: str = "op",
    exclude: Sequence[nn.Module] = (),
    memory_budget: Any = None,
) -> Any:
    """torch.utils.checkpoint.checkpoint_sequential with a budget on the layers' saved
    activations instead of a segment count: the least-recompute nested checkpoint plan whose
    saved-for-backward bytes fit.

    The first call for a given set of functions, input shape and dtype, and budget measures the
    layers (see :func:`profile_layers`) and plans; later calls reuse the plan. Pass the same
    function objects each step (a new lambda each call is profiled each call). With grad
    disabled the layers simply run.

    Args:
        functions: the layers, each taking the previous one's output (modules, partials or
            functions), or an ``nn.Sequential``.
        input: the first layer's input.
        activation_budget: the peak of the layers' saved activations, in bytes or with a unit
            ("1.5GB").
        profile: a profile measured before (default: measured now).
        slots: the planner's memory resolution (None: exact).
        tune: time the planner's plan and torch's uniform segmentations that fit, and keep
            the fastest.
        plan_group: under a process group, the ranks that agree on one plan (see :func:`plan`).
        granularity: "op" also considers keeping some of a layer's ops (torch's SAC); "block"
            re-runs whole layers only.
        exclude: modules whose parameters and buffers are not activations, for functions that
            reach them some other way than being or binding them (a lambda calling one).
        memory_budget: refused: a budget on the whole training step's peak is planned by
            :func:`auto_checkpoint`, which sees the step.

    Returns:
        The last layer's output.

    Raises:
        remat.InputError: the budget is below the least any plan reaches (stating it).
        TypeError: `memory_budget` given, or `activation_budget` missing.

    Example:
        ```python
        y = remat.torch.checkpoint_sequential(model.layers, x, activation_budget="1.5GB")
        y.sum().backward()
        ```
    """
    activation_budget = _activation_budget(
        "checkpoint_sequential", activation_budget, memory_budget
    )
    functions, exclude = list(functions), list(exclude)
    if not torch.is_grad_enabled():
        for function in functions:
            input = function(input)
        return input
    budget = parse_bytes(activation_budget, "activation_budget")
    key: Any = (
        tuple(id(f) for f in functions),
        _signature(input),
        budget,
        slots,
        id(profile),
        tune,
        id(plan_group),
        granularity,
        tuple(id(m) for m in exclude),
        run_context([m for f in functions for m in _modules_of(f)] + exclude),
    )
    if _distributed.active(plan_group):
        # Ranks may call with other shapes (uneven batches): the plan is kept for the combination
        # of the ranks' calls (see _distributed.step_inputs), and all ranks plan, together, unless
        # every one has it cached (a rank's cache can lose it alone: calls with
        # plan_group="local" and new function objects fill one rank's cache only).
        number = _numbers.setdefault(key, len(_numbers))
        key = (key, _distributed.step_inputs(number, False, plan_group)[0])
        found = _plans.get(key, functions)
        if not _distributed.step_inputs(number, found is not None, plan_group)[1]:
            found = None
    else:
        found = _plans.get(key, functions)
    if found is None:
        found = plan(
            functions,
            input,
            activation_budget=budget,
            profile=profile,
            slots=slots,
            tune=tune,
            plan_group=plan_group,
            granularity=granularity,
            exclude=exclude,
        )
        _plans.put(key, functions, found)
    return run_plan(functions, found, input)


def plan(
    functions: Sequence[Callable[[Any], Any]] | nn.Sequential,
    input: Any,
    *,
    activation_budget: int | float | str | None = None,
    profile: Profile | None = None,
    slots: int | None = None,
    tune: bool = True,
    exclude: Iterable[Any] = (),
    names: Sequence[str] | None = None,
    microbatches_in_flight: int = 1,
    plan_group: Any = None,
    granularity: str = "op",
    memory_budget: Any = None,
) -> Plan:
    """The plan :func:`checkpoint_sequential` would run, without running it.

    With `tune` (and an input), the planner's plan and every torch-style uniform segmentation
    whose predicted peak fits are each timed on the real chain (forward + backward, gradients
    returned rather than accumulated, RNG and BatchNorm statistics restored) and the fastest
    is kept: the planner's time model is forward time, which the hardware does not always
    honour (on CPU a re-run just before its backward finds its activations in cache).

    Args:
        functions: the layers, as :func:`checkpoint_sequential` takes them.
        input: the first layer's input (None with a `profile`: plan without running).
        activation_budget: the peak of the layers' saved activations, in bytes or with a unit.
        profile: a profile measured before (default: measured now).
        slots: the planner's memory resolution (None: exact).
        tune: time the candidates and keep the fastest.
        exclude: modules whose parameters and buffers are not activations.
        names: the layers' names in the plan's table.
        microbatches_in_flight: a pipeline stage's microbatches held at once (see
            :func:`plan_profile`).
        plan_group: under an initialized process group, every rank of it (default: all)
            plans from one profile and one set of tuning timings and the plans are checked
            equal (see :mod:`remat._distributed`); "local" plans on this rank alone.
        granularity: "op" or "block", as in :func:`checkpoint_sequential`.
        memory_budget: refused, as in :func:`checkpoint_sequential`.

    Returns:
        The plan; ``print(plan)`` shows it as a table.

    Raises:
        remat.InputError: the budget is below the least any plan reaches (stating it).
        TypeError: `memory_budget` given, or `activation_budget` missing.
    """
    activation_budget = _activation_budget("plan", activation_budget, memory_budget)
    budget = parse_bytes(activation_budget, "activation_budget")
    functions = list(functions)
    check_planner_options(slots, microbatches_in_flight)  # before profiling, which takes long
    if profile is None:
        profile = profile_layers(
            functions,
            input,
            exclude=exclude,
            names=names,
            granularity=granularity,
            alone=not _distributed.active(plan_group),
        )
    elif len(profile.layers) != len(functions):
        raise ValueError(
            f"profile: has {len(profile.layers)} layers, functions has {len(functions)}"
        )
    profile = agree_on_profile(profile, budget, plan_group)
    with budget_named("activation_budget"):
        found = plan_profile(
            profile, budget, slots=slots, microbatches_in_flight=microbatches_in_flight
        )
    if tune and input is not None and _tensors(input) and microbatches_in_flight == 1:
        found = tune_plan(functions, input, found, plan_group=plan_group)
    _distributed.verify_same_plan((found.regions, found.options), group=plan_group)
    if input is not None:
        found = dataclasses.replace(found, input_signature=_signature(input))
    return found


def _activation_budget(function: str, activation_budget: Any, memory_budget: Any) -> Any:
    if memory_budget is not None:
        raise TypeError(
            f"{function}: memory_budget= is the whole training step's peak, which a call inside "
            "the step cannot plan for. Give activation_budget= (the layers' saved activations), "
            "or remat.torch.auto_checkpoint(model, memory_budget=) for the step's peak"
        )
    if activation_budget is None:
        raise TypeError(f"{function}: missing activation_budget= (the layers' saved activations)")
    return activation_budget


def run_plan(functions: Sequence[Callable[[Any], Any]], plan: Plan, input: Any) -> Any:
    """Runs `functions` on `input` through `plan`'s checkpoint regions.

    An input of other shapes or dtypes than the plan was made for runs too, with a warning:
    what it saves (so the peak) is not what the plan predicted.

    Args:
        functions: the layers the plan was made for.
        plan: a plan from :func:`plan` or :func:`plan_profile`.
        input: the first layer's input.

    Returns:
        The last layer's output.
    """
    functions = list(functions)
    if len(functions) != len(plan.profile.layers):
        raise ValueError(
            f"plan: has {len(plan.profile.layers)} layers, functions has {len(functions)}"
        )
    if plan.offloaded or plan.inputs_offloaded:
        raise ValueError(
            "plan: it offloads (an auto_checkpoint plan made with offload=), which run_plan does "
            "not carry out: it would hold the offloaded bytes on the device, above the plan. Plan "
            "the chain with remat.plan(), or train the model under auto_checkpoint"
        )
    difference = (
        None
        if plan.input_signature is None
        else signature_difference(plan.input_signature, _signature(input), "input")
    )
    if difference is not None:
        warnings.warn(
            f"remat.run_plan: {difference}; "
            "its saved bytes may exceed the plan's predicted peak (plan again for this input)",
            RuntimeWarning,
            stacklevel=2,
        )
    return Execution(functions, plan.regions, plan_contexts(plan))(input)
