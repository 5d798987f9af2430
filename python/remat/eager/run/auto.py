"""auto_checkpoint: every training step of a model follows a checkpoint plan for its inputs.

Each block is wrapped on its own (as torch's checkpoint_wrapper and torchtitan's apply_ac do):
every call runs that block with exactly the arguments it was given, plainly or as a
non-reentrant checkpoint region, as the plan says. Outputs of any structure pass through, and
whatever the model does between blocks is its own business. Regions that span several blocks
are used only where the blocks provably form a chain: a stock nn.Sequential called as a whole.

A step is one call of the model. The first step for a new input signature measures: each block
call is measured on its own (one block's activations at a time) and then run as a checkpoint
region, so that step holds no more than the least-memory per-block plan plus one block's
activations. At the end of that forward the plan is made; later steps with the same signature
follow it. A call that does not match the plan (another block, another input signature, more
calls than planned) is run as a checkpoint region, which is always correct and never holds more
than the block's inputs, with a warning the first time.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from typing import Any, Callable

import torch
from torch import nn

from ...saved_memory import require_save_hooks
from ...units import parse_bytes
from .._runtime import _PreservedState, _signature, _tensors, clock, default_loss, in_backward
from ..blocks import Blocks, find_blocks
from ..types import Plan
from .agreement import Agreement
from .block_calls import BlockCalls
from .block_planner import BlockPlanner
from .call_runner import CallRunner
from .chain_mode import ChainRunner
from .options import CheckpointOptions
from .recorder import StepRecorder
from .running import Notices, PlanBook, Running, step_context
from .step import _BlockPlan, _OutsideSaves, _PendingBackward, _Step
from .step_budget import StepBudget
from .traced_plan import TraceFailed, retimed, trace_first_step
from .wrapping import restore_forwards, wrap_forwards

_log = logging.getLogger("remat")


class AutoCheckpoint:
    """The handle :func:`auto_checkpoint` returns.

    Attributes:
        blocks: the :class:`Blocks` found or given (``print(handle.blocks)`` says which).
        options: the :class:`CheckpointOptions` it was given.
        memory_budget: the budget on the step's peak in bytes (None: the budget is on the
            blocks' activations, ``activation_budget``).
        activation_budget: the budget on the blocks' activations in bytes (None: planned
            for ``memory_budget``).
        plans: every plan made so far, by input signature (per-block plans and chain plans).
        plan: the plan the last step followed (None before the first step).
        warnings: what went off-plan, each message once, in the order it first happened.

    ``remove()`` restores the blocks' (and the container's) own forward methods.

    The handle begins and ends each step (the model's hooks) over parts that each hold their
    own state: ``calls`` routes a block call, ``runner`` runs it, ``recorder`` measures a step
    with no plan yet, ``planner`` plans from it, ``chain`` plans and runs a stock
    nn.Sequential. They share ``running`` (the step under way), ``book`` (the plans),
    ``notices`` (the warnings) and ``agreement`` (alone, or with the ranks of a group)."""

    def __init__(
        self,
        model: nn.Module,
        blocks: Blocks,
        options: CheckpointOptions,
        *,
        activation_budget: int | None = None,
        step_budget: StepBudget | None = None,
        measuring: bool = False,
    ) -> None:
        if (activation_budget is None) == (step_budget is None):
            raise ValueError("give exactly one of memory_budget and activation_budget")
        if blocks.chain is None:  # block calls are measured inside their regions
            require_save_hooks()
        if options.offload.mode is not False and blocks.chain is not None:
            raise ValueError(
                f"offload: {blocks.path} is a stock nn.Sequential, planned as one chain of nested "
                "regions, which offload plans do not cover; pass its blocks as a list "
                f"(blocks=list({blocks.path})) to plan them one call at a time"
            )
        self.options = options
        self.model = model
        self.blocks = blocks
        self.activation_budget = activation_budget
        self.step_budget = step_budget
        # measure()'s handle: a chain is planned as auto_checkpoint plans it, and its step runs
        # every block as its own region, so it holds one block's activations at a time.
        self.notices = Notices("remat.measure" if measuring else "remat.auto_checkpoint")
        if step_budget is not None:
            step_budget.warn = self.notices.warn
        self.running = Running()
        self.book = PlanBook()
        self.agreement = Agreement(options.plan_group)
        name = blocks.name_of
        self.runner = CallRunner(model, self.running, self.notices, name)
        self.recorder = StepRecorder(
            model,
            options,
            self.running,
            self.runner,
            lambda: None if step_budget is None else step_budget.segments,
            name,
        )
        self.planner = BlockPlanner(
            model,
            blocks,
            options,
            activation_budget,
            step_budget,
            self.running,
            self.agreement,
            self.book,
            self.notices,
        )
        self.calls = BlockCalls(
            self.running, self.book, self.notices, name, self.runner, self.recorder, self.planner
        )
        self.chain = ChainRunner(
            model,
            blocks,
            options,
            activation_budget,
            self.running,
            self.agreement,
            self.book,
            self.notices,
            measuring,
        )
        self._patched: list[tuple[nn.Module, Any]] = []
        self._hooks: list[Any] = []
        self._pending = _PendingBackward()
        # A traced plan's first step, timed: (key, plan key, seconds by call), planned again
        # with those times at the next step (first_step="trace").
        self._timed: tuple[Any, Any, dict[int, float]] | None = None
        self.reinstall()
        if blocks.left_out:
            every = ", ".join(f"*{b.path}" for b in (blocks, *blocks.left_out))
            self.notices.warn(
                f"found the blocks {blocks.contents()}, and left out "
                f"{' and '.join(b.contents() for b in blocks.left_out)}, which hold at least half "
                "as many parameters "
                "(an encoder beside a decoder, say): their activations are neither checkpointed "
                f"nor counted in the budget. Pass blocks=[{every}] to plan them all"
            )

    @property
    def plans(self) -> dict[Any, Plan]:
        return self.book.plans

    @property
    def plan(self) -> Plan | None:
        return self.book.last

    @property
    def warnings(self) -> list[str]:
        return self.notices.messages

    @property
    def warn_on_dropped_caches(self) -> bool:
        """Whether a cache dropped from the blocks' calls in training is warned about (an
        integration that documents the drop turns it off)."""
        return self.calls.warn_on_dropped_caches

    @warn_on_dropped_caches.setter
    def warn_on_dropped_caches(self, value: bool) -> None:
        self.calls.warn_on_dropped_caches = value

    def reinstall(self) -> None:
        """Wraps the blocks again after remove(), keeping the plans made so far."""
        if self._patched:
            return
        blocks = self.blocks
        targets: list[tuple[nn.Module, Callable[..., Any]]] = [
            (m, self.calls.forward)
            for m in dict.fromkeys(blocks.modules)  # once each
        ]
        if blocks.chain is not None:
            targets.append((blocks.chain, self.chain.forward))
        try:
            self._patched = wrap_forwards(targets)
        except ValueError:
            self.remove()
            raise
        model = self.model
        self._hooks.append(model.register_forward_pre_hook(self._begin_step, with_kwargs=True))
        self._hooks.append(model.register_forward_hook(self._end_step, always_call=True))

    # --- the handle ---

    @property
    def memory_budget(self) -> int | str | None:
        return None if self.step_budget is None else self.step_budget.memory_budget

    def remove(self) -> None:
        """Restores the blocks' own forward methods and removes the model's hooks."""
        if self.step_budget is not None:
            self.step_budget.close()
        restore_forwards(self._patched)
        for hook in self._hooks:
            hook.remove()
        self._patched, self._hooks = [], []

    def __reduce_ex__(self, protocol: Any) -> Any:
        # The wrapped blocks' forward methods and the model's hooks reach this handle, so
        # torch.save(model) and copy.deepcopy(model) come here. Its state (the step under way,
        # the policies' closures, weak references) is not data; a copy would share or lose it.
        raise TypeError(
            "remat.auto_checkpoint: a model under auto_checkpoint cannot be pickled or "
            "deep-copied (torch.save(model), copy.deepcopy(model)): call handle.remove() first, "
            "then handle.reinstall() to go on training with the same plans, or save "
            "model.state_dict(), which auto_checkpoint does not change. handle.plans pickle"
        )

    def __repr__(self) -> str:
        budget = (
            f"activation budget {self.activation_budget} bytes"
            if self.step_budget is None
            else f"memory budget {self.memory_budget} bytes"
        )
        return f"AutoCheckpoint({self.blocks}, {budget}, {len(self.plans)} plans)"

    # --- steps ---

    @torch.compiler.disable  # bookkeeping and planning: never traced
    def _begin_step(self, _model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]):
        if in_backward() or self.running.step is not None:
            return None
        if self.step_budget is not None:
            self._end_measured_step()
        if self._timed is not None:
            self._plan_with_times(*self._timed)
        if not torch.is_grad_enabled():
            return None
        if self._pending.waiting():
            self.notices.warn(
                "the model was called again before the backward of its previous call: each call "
                "is a step planned to the budget alone, so two calls awaiting one backward (a "
                "contrastive loss over two views, say) hold up to twice the budget. Concatenate "
                "the inputs into one call, or give each call its share of the budget"
            )
        key = (_signature(args), _signature(kwargs), step_context(self.model, self.blocks))
        if self.blocks.chain is None:
            plan_key, known = self.agreement.plan_key(key, key in self.planner.profiles)
        else:  # a stock nn.Sequential is planned (and agreed on) when it is called
            plan_key, known = key, False
        found = self.planner.block_plans.get(plan_key)
        if self.step_budget is not None:
            devices = [t.device for t in _tensors((args, kwargs))]
            device = devices[0] if devices else self.running.device
            self.running.start_bytes = self.step_budget.start_bytes(device, (args, kwargs))
            # Planned again from the kept profile: its step's figures are in (the step that
            # measured has ended), or this step begins holding more than its plan assumed.
            if self.agreement.together:
                # `known` (every rank has profiled its inputs) holds at every later step: plan
                # when there is no plan yet, or when the ranks agree to plan again.
                profiled = key in self.planner.profiles
                again = self.step_budget.plan_again_together(
                    key,
                    profiled,
                    found is not None,
                    self.running.start_bytes,
                    self.options.plan_group,
                )
                known = known and found is None or again
            else:
                stale = found is None or self.step_budget.stale(key, self.running.start_bytes)
                known = known or (
                    stale and key in self.planner.profiles and key in self.step_budget.figures
                )
            if known:
                found = None
        measuring = found is None and not known
        traced = False
        if measuring and self.options.first_step == "trace" and self.step_budget is not None:
            found = self._plan_from_trace(key, plan_key, device, args, kwargs)
            measuring, traced = found is None, found is not None
        if found is None and known:  # every rank has profiled its inputs: plan, all together
            profile, calls = self.planner.profiles[key]
            found = self.planner.make_block_plan(plan_key, key, profile, calls)
        if self.step_budget is not None:
            # After planning: the first step that follows a new plan is among those checked.
            self.step_budget.begin(key, device, (args, kwargs), measuring=measuring)
        step = self.running.step = _Step(key, plan_key, found.plan if found else None)
        if traced:
            step.times = {}
        if found is None:
            if self.blocks.chain is None:  # a chain measures and plans when it is called
                running = self.running
                step.outside = _OutsideSaves(lambda: running.inside > 0).__enter__()
            step.modes = self.recorder.modes_for(self.agreement.together)
        return None

    def _plan_from_trace(
        self,
        key: Any,
        plan_key: Any,
        device: torch.device,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> _BlockPlan | None:
        """The plan for a new signature's first step, from the step traced on fake tensors
        (run/traced_plan.py); None, said in one line, where it cannot be traced."""
        assert self.step_budget is not None
        try:
            traced = trace_first_step(
                self.model,
                self.blocks,
                self._patched,
                self._hooks,
                args,
                kwargs,
                self.step_budget.optimizer,
                device,
                self.options.plan_group,
            )
        except TraceFailed as why:
            self.notices.warn(
                f"first_step='trace': the step could not be traced on fake tensors ({why}); "
                "it measures its blocks instead"
            )
            return None
        self.planner.profiles[key] = (traced.profile, traced.calls)
        self.step_budget.figures[key] = traced.figures
        optimizer = self.step_budget.optimizer
        if optimizer is not None and not optimizer.state and self.running.start_bytes is not None:
            # The state the optimizer's first step creates is held from the next step on: the
            # plan counts it now, as the traced step shows it (a budget it leaves too small is
            # refused here, not at the second step).
            self.running.start_bytes += traced.state_bytes
        return self.planner.make_block_plan(plan_key, key, traced.profile, traced.calls)

    def _plan_with_times(self, key: Any, plan_key: Any, seconds: dict[int, float]) -> None:
        """The traced profile of `key` takes its first step's times; the next step with these
        inputs plans again from it."""
        self._timed = None
        if key not in self.planner.profiles or not seconds:
            return
        profile, calls = self.planner.profiles[key]
        self.planner.profiles[key] = (retimed(profile, seconds, self.planner.overhead()), calls)
        self.planner.block_plans.pop(plan_key, None)

    def _end_measured_step(self) -> None:
        """The step budget's measured step ends: its figures or its check are in."""
        assert self.step_budget is not None
        profiles = {key: profile for key, (profile, _) in self.planner.profiles.items()}
        ended = self.step_budget.close(profiles)
        if ended is None or not ended[1]:
            return
        if self.agreement.together:  # its plan is kept under every rank's keys
            self.step_budget.plan_again_later(ended[0])
        else:
            self.planner.block_plans.pop(ended[0], None)  # planned again from its profile

    @torch.compiler.disable  # bookkeeping and planning: never traced
    def _end_step(self, _model: nn.Module, _args: Any, output: Any) -> None:
        step, self.running.step = self.running.step, None
        if step is not None and step.outside is not None:
            step.outside.__exit__(None, None, None)
        if step is not None and step.pending_offload is not None:
            # The last block call moved something: it leaves once the model's code after the
            # blocks has run, and comes back when backward reaches the model's output.
            step.pending_offload.release()
            step.pending_offload.prefetch_at(output)
        # torch calls this hook (always_call) from its handler when the forward raised, with no
        # output: a step cut short measured only some blocks, and the next step measures again.
        cut_short = output is None and sys.exc_info()[1] is not None
        if step is not None and not step.position and not step.chain_calls and not cut_short:
            self.notices.warn(
                f"no block of {self.blocks.path} ran with gradients enabled during the model's "
                "forward: nothing is checkpointed, and the budget is not kept. Pass blocks= the "
                "modules the model's forward calls"
            )
        if step is None or not step.calls and step.plan is None or cut_short:
            return
        if self.step_budget is not None and self.step_budget.open is not None:
            self.step_budget.open.watch_end_of_backward(_tensors(output))
        if not self.running.forward_only:
            self._pending.watch(output)
            self.runner.check_region_inputs(step)
        if step.times is not None:
            self._timed = (step.key, step.plan_key, step.times)
        if step.plan is None:
            self.planner.plan_step(step)
        elif step.outgrew_plan and not self.agreement.together:
            calls = len(self.planner.block_plans[step.plan_key].calls)
            del self.planner.block_plans[step.plan_key]
            self.notices.warn(
                f"this step called blocks its plan had no place for (more than its {calls} "
                "block calls, or blocks the measured step never called, as LayerDrop in the "
                "model's loop skips some): those ran as their own checkpoint regions beside a "
                "plan made for fewer calls, so this step may have held more than the budget. The "
                "next step with these inputs measures again, to plan for every call it makes"
            )
        elif (
            step.position != len(self.planner.block_plans[step.plan_key].calls)
            and not step.off_plan
        ):
            self.notices.warn(
                f"the plan expected {len(self.planner.block_plans[step.plan_key].calls)} block calls, the "
                f"step made {step.position}; the missing ones cost nothing"
            )


def auto_checkpoint(
    model: nn.Module,
    *,
    memory_budget: int | float | str | None = None,
    activation_budget: int | float | str | None = None,
    **options: Any,
) -> AutoCheckpoint:
    """Makes every training step of `model` follow a checkpoint plan for `memory_budget`.

    Each block is wrapped on its own; parameters, state_dict and hooks are untouched, and
    ``handle.remove()`` undoes it. The first step for each input signature measures the blocks
    and plans; later steps follow the plan.

    Give exactly one budget. ``memory_budget`` bounds the whole step's peak on the device:
    parameters, gradients, optimizer state, every activation and the backward's working set.
    ``activation_budget`` bounds only the blocks' saved activations.

    Args:
        model: the model whose calls are training steps.
        memory_budget: the peak of the whole training step on the blocks' device, in bytes or
            with a unit ("24GiB", "1.5GB"; see :func:`remat.units.parse_bytes`), or "auto"
            (CUDA only): what the device can give the process at the first step, less a
            fragmentation margin. The first step measures the step; the plan follows from its
            second step, and the first steps of each plan are measured again (an excess is
            warned about and planned away).
        activation_budget: the peak of the blocks' saved activations alone, in bytes or with
            a unit.
        **options: the options of :class:`CheckpointOptions`, as keywords: ``optimizer``,
            ``blocks``, ``slots``, ``tune``, ``example_inputs``, ``example_kwargs``,
            ``verbose``, ``microbatches_in_flight``, ``plan_group``, ``granularity``,
            ``first_step``, and the offload settings ``offload``, ``host_budget`` and
            ``offload_bandwidth``.

    Returns:
        The handle: its ``plan``, ``plans``, ``blocks`` and ``warnings``, and ``remove()``.

    Raises:
        TypeError: an unknown option, or not exactly one budget.
        remat.InputError: the budget is below the least any plan reaches (stating it), with
            example inputs here, otherwise at the first training step.

    Example:
        ```python
        handle = remat.torch.auto_checkpoint(model, memory_budget="2GiB")
        loss_fn(model(batch)).backward()  # this step and every later one fit the budget
        print(handle.plan)
        ```
    """
    if (memory_budget is None) == (activation_budget is None):
        raise TypeError(
            "auto_checkpoint: give exactly one of memory_budget= (the whole step's peak on the "
            "device) and activation_budget= (the blocks' saved activations)"
        )
    chosen_options = CheckpointOptions.of(**options)
    return _install(model, memory_budget, activation_budget, chosen_options)


def _install(
    model: nn.Module,
    memory_budget: int | float | str | None,
    activation_budget: int | float | str | None,
    options: CheckpointOptions,
) -> AutoCheckpoint:
    if options.first_step == "trace" and memory_budget is None:
        raise ValueError(
            "first_step: 'trace' plans the first step to the step's peak; give memory_budget="
        )
    chosen = find_blocks(model, options.blocks)
    step_budget = None
    budget = None
    if memory_budget is not None:
        chosen = _for_step_budget(chosen, options.microbatches_in_flight)
        step_budget = StepBudget(_step_budget_of(memory_budget), model, options.optimizer)
    else:
        assert activation_budget is not None  # exactly one budget was checked above
        budget = parse_bytes(activation_budget)
    _log.info("auto_checkpoint: blocks %s", chosen.describe())
    if options.verbose:
        print(f"remat.auto_checkpoint: blocks {chosen.describe()}")
    handle = AutoCheckpoint(
        model, chosen, options, activation_budget=budget, step_budget=step_budget
    )
    if options.example_inputs is not None or options.example_kwargs is not None:
        example = (tuple(options.example_inputs or ()), options.example_kwargs or {})
        try:
            if step_budget is not None:
                _measure_step(handle, *example)
            else:
                handle.running.forward_only = True  # no backward follows: no re-run can fail
                _measure_forward(model, *example)
        except Exception:
            handle.remove()
            raise
        finally:
            handle.running.forward_only = False
    return handle


def _step_budget_of(memory_budget: int | float | str) -> int | str:
    if memory_budget == "auto":
        if not torch.cuda.is_available():
            raise ValueError(
                "memory_budget: 'auto' reads a CUDA device's free memory, and this process has "
                'no CUDA device. Give the budget in bytes (memory_budget="24GiB")'
            )
        return "auto"
    return parse_bytes(memory_budget)


def _for_step_budget(chosen: Blocks, microbatches_in_flight: int) -> Blocks:
    """The blocks as a budget on the step's peak plans them: call by call."""
    if microbatches_in_flight != 1:
        raise ValueError(
            "memory_budget: a pipeline stage (microbatches_in_flight > 1) takes "
            "activation_budget= (the stage's activations over its microbatches)"
        )
    # A stock nn.Sequential is planned as one chain measured on its own, whose step is not
    # measured part by part: its blocks are planned call by call instead.
    return dataclasses.replace(chosen, chain=None) if chosen.chain is not None else chosen


def _measure_step(handle: AutoCheckpoint, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """One forward and backward of the example, measured part by part and planned to the step
    budget; .grad, module buffers and the RNG are left as they were."""
    model = handle.model
    devices = {t.device for t in _tensors((args, kwargs))}
    parameters = [p for p in model.parameters() if p.requires_grad]
    with _PreservedState([model], devices), torch.enable_grad():
        loss = default_loss(model(*args, **kwargs))
        if parameters:
            torch.autograd.grad(loss, parameters, allow_unused=True)
        segments = handle.step_budget.segments if handle.step_budget is not None else None
        if segments is not None:
            segments.blocks_done()
        del loss
    handle._end_measured_step()
    profiles = handle.planner.profiles
    key = next(reversed(profiles), None)
    if key is not None and handle.step_budget is not None:
        device = next(iter(devices), handle.running.device)
        handle.running.start_bytes = handle.step_budget.start_bytes(device, (args, kwargs))
        profile, calls = profiles[key]
        handle.planner.make_block_plan(key, key, profile, calls)


def _measure_forward(model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> float:
    """One forward pass with grad enabled, whose output is dropped (it measures and plans);
    model buffers and the RNG are left as they were. Returns its seconds."""
    devices = {t.device for t in _tensors((args, kwargs))}
    now = clock()
    with _PreservedState([model], devices), torch.enable_grad():
        start = now()
        out = model(*args, **kwargs)
        del out
    return now() - start
