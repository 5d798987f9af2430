"""auto_checkpoint's plans for per-block calls: from a measured step's profile (agreed on
with the other ranks) to the plan each later step with those inputs follows.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch
from torch import nn

from ... import _distributed
from ..blocks import Blocks
from ..measuring.blocks import chain_profile, moved_input_positions
from ..measuring.chain import _region_overhead
from ..planning.agree import agree_on_profile
from ..planning.offload import plan_with_offload
from ..planning.planner import budget_named, plan_profile
from ..types import Plan, Profile
from .agreement import Agreement
from .contexts import region_context
from .options import CheckpointOptions
from .running import Notices, PlanBook, Running
from .step import _BlockPlan, _Step
from .step_budget import StepBudget

Calls = tuple[tuple[Any, Any, tuple[int, ...]], ...]


def region_overhead(device: torch.device) -> float:
    """Seconds a checkpoint region costs on `device` besides its layers."""
    return _region_overhead(torch.zeros(1, device=device), 0)


def step_profile(step: _Step, overhead: float) -> tuple[Profile, Calls]:
    """The profile of a measured step's block calls, and the calls a plan from it is made for
    (each with the positions of its arguments a region may move to the host)."""
    step.last_outputs = None
    held = frozenset(step.outside.keys) if step.outside is not None else frozenset()
    outputs = dict(step.last_output_storages)
    step.last_output_storages = []
    dropped = frozenset(key for key, storage in outputs.items() if storage.expired())
    if len(dropped) == len(outputs):
        # All gone: the model's code holds what it made of them (x + block(x)) in their place.
        dropped = frozenset()
    profile = chain_profile(step.calls, overhead, held, dropped)
    calls = tuple(
        (c.module, c.signature, moved)
        for c, moved in zip(step.calls, moved_input_positions(step.calls, held))
    )
    return profile, calls


def retrace_blocks_callers(model: nn.Module, blocks: Blocks) -> None:
    """The measuring call is excluded from tracing. Compiled before the first step, a
    model's forward that calls the blocks in a loop breaks its graph there, and torch.compile
    then skips that frame for good: every later step ran the loop eagerly and compiled
    remat's block wrapper once per block call, uncompiled past recompile_limit (12 blocks:
    4 ran eagerly). With a plan made, the forwards of the modules that hold the blocks are
    let go from dynamo's cache, so the next step traces them whole, with the plan."""
    dynamo = sys.modules.get("torch._dynamo")  # not imported: nothing was compiled
    reset_code = getattr(dynamo, "reset_code", None)
    if reset_code is None:
        return
    held = {id(m) for m in blocks.modules}
    if blocks.chain is not None:
        held.add(id(blocks.chain))
    named = dict(model.named_modules(remove_duplicate=False))
    callers: set[type] = set()
    for name, module in named.items():
        if id(module) in held:
            parts = name.split(".") if name else []
            for depth in range(len(parts)):  # every module above the block
                callers.add(type(named[".".join(parts[:depth])]))
    for kind in callers:
        forward = getattr(kind, "forward", None)
        code = getattr(forward, "__code__", None)
        if code is not None and forward is not nn.Module.forward:
            reset_code(code)


class BlockPlanner:
    """Turns a measured step into the plan that later steps with its inputs follow, and keeps
    the plans and the profiles they came from."""

    def __init__(
        self,
        model: nn.Module,
        blocks: Blocks,
        options: CheckpointOptions,
        activation_budget: int | None,
        step_budget: StepBudget | None,
        running: Running,
        agreement: Agreement,
        book: PlanBook,
        notices: Notices,
    ) -> None:
        self.model = model
        self.blocks = blocks
        self.options = options
        self.activation_budget = activation_budget
        self.step_budget = step_budget
        self.running = running
        self.agreement = agreement
        self.book = book
        self.notices = notices
        self.block_plans: dict[Any, _BlockPlan] = {}
        # Under a process group or a step budget: the profile each key measured, with its calls,
        # from which a plan for a new combination of the ranks' keys (or a step that begins
        # holding more) is made without measuring again.
        self.profiles: dict[Any, tuple[Profile, Calls]] = {}
        self._region_overhead: float | None = None  # seconds a region costs besides its layers

    def overhead(self) -> float:
        """Seconds a checkpoint region costs on the blocks' device besides its layers."""
        if self._region_overhead is None:
            self._region_overhead = region_overhead(self.running.device)
        return self._region_overhead

    def plan_step(self, step: _Step) -> None:
        profile, calls = step_profile(step, self.overhead())
        if self.agreement.together or self.step_budget is not None:
            self.profiles[step.key] = (profile, calls)
        self.make_block_plan(step.plan_key, step.key, profile, calls)
        retrace_blocks_callers(self.model, self.blocks)

    def _offload_bandwidth(self) -> float | None:
        """The copy bandwidth offload plans are made with, or None when not offloading."""
        options = self.options.offload
        if self.step_budget is not None and options.mode is True:
            if self.running.device.type == "cpu":
                # Its host copies are in the memory the budget bounds: planned as a CPU copy
                # would be, they came out 128 KiB over a 4-block MLP's prediction every step.
                self.notices.warn(
                    "offload=True with memory_budget on the CPU: host memory is the memory "
                    "the budget bounds there, so moving activations to it lowers no peak; "
                    "planned without offloading"
                )
                return None
        segments = self.step_budget.open if self.step_budget is not None else None
        # Timed on 64 MiB buffers of its own: not the step's figures (a 4-block MLP's first
        # step held 134 MB where its budget was 820 KB, and was refused at that).
        with segments.remats_own() if segments is not None else contextlib.nullcontext():
            return options.for_device(self.running.device, self.options.plan_group)

    def make_block_plan(
        self,
        plan_key: Any,
        key: Any,
        profile: Profile,
        calls: tuple[tuple[Any, Any, tuple[int, ...]], ...],
    ) -> _BlockPlan:
        """The plan of this rank's `calls` from its `profile` (agreed on with the other ranks),
        kept under `plan_key`."""
        # Every rank must be given the same budget ("auto" is agreed on with the figures).
        budget = self.activation_budget or 0
        if self.step_budget is not None and not self.step_budget.auto:
            budget = int(self.step_budget.memory_budget)
        profile = agree_on_profile(profile, budget, self.options.plan_group)
        offload = self._offload_bandwidth()

        def make_plan(activation_budget: int) -> Plan:
            if offload is None:
                return plan_profile(
                    profile,
                    activation_budget,
                    slots=self.options.slots,
                    microbatches_in_flight=self.options.microbatches_in_flight,
                )
            return plan_with_offload(
                profile,
                activation_budget,
                bandwidth=offload,
                host_budget=self.options.offload.host_budget,
                slots=self.options.slots,
            )

        if self.step_budget is not None:
            made = self.step_budget.plan(
                key, make_plan, self.running.start_bytes, self.options.plan_group
            )
        else:
            assert self.activation_budget is not None
            with budget_named("activation_budget"):
                made = make_plan(self.activation_budget)
        _distributed.verify_same_plan(
            (made.regions, made.options, made.offloaded, made.inputs_offloaded),
            group=self.options.plan_group,
        )
        regions = {
            first: region_context(made, index, self.notices.warn)
            for index, (first, _, _) in enumerate(made.regions)
        }
        # A region whose input moves: the positions of the arguments it sends to the host.
        moved = {i: calls[i][2] for i in made.inputs_offloaded}
        found = _BlockPlan(made, calls, regions, frozenset(made.offloaded), moved)
        self.block_plans[plan_key] = found
        self.book.plans[key] = made
        self.book.last = made
        self._check_compile_limit(len(calls))
        return found

    def _check_compile_limit(self, calls: int) -> None:
        """Blocks compiled one by one share remat's wrapper, which torch.compile traces once per
        block call (each with its own place in the plan) and keeps at most recompile_limit
        graphs of: calls past that run eagerly, correct but not compiled."""
        import torch._dynamo

        limit = getattr(torch._dynamo.config, "recompile_limit", None)
        blocks = {id(m) for m in self.blocks.modules}

        def compiled_block(m: nn.Module) -> bool:  # torch.compile(block), or block.compile()
            if isinstance(m, torch._dynamo.eval_frame.OptimizedModule):
                return id(m._orig_mod) in blocks
            return id(m) in blocks and getattr(m, "_compiled_call_impl", None) is not None

        compiled = any(compiled_block(m) for m in self.model.modules())
        if compiled and isinstance(limit, int) and calls > limit:
            self.notices.warn(
                f"the blocks are compiled one by one, and the step makes {calls} block calls: "
                f"torch.compile keeps at most torch._dynamo.config.recompile_limit = {limit} "
                "graphs of remat's block wrapper (one a call), so the calls past that run "
                f"eagerly. Raise that limit to at least {calls}, or compile the whole model"
            )
