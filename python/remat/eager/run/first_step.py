"""auto_checkpoint's first step for a new input signature: each block call run as a checkpoint
region and measured as it runs; at the end of the forward, the plan.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable

import torch
from torch import nn

from ... import _distributed
from ...saved_memory import excluded_storages, has_fsdp_modules, is_persistent, storage_key
from .._runtime import _PreservedState, _synchronize, _tensors, clock
from ..measuring.blocks import RecordedCall, chain_profile, moved_input_positions
from ..measuring.calls import CallWatch
from ..measuring.chain import _region_overhead
from ..measuring.ops import op_recorder, recorded_profile
from ..planning.agree import agree_on_profile
from ..planning.offload import plan_with_offload
from ..planning.planner import budget_named, plan_profile
from ..snapshots import CallSnapshot
from ..types import Plan, Profile
from .contexts import region_context
from .handle_state import HandleState
from .step import _BlockPlan, _Step


class FirstStep(HandleState):
    """AutoCheckpoint's part that measures a step and plans from it (see auto.py for the state
    it shares)."""

    # The first step is measured eagerly even when the blocks are under torch.compile: the
    # profile (and so the plan) is the eager one, and compiled code never sees the recording
    # dispatch modes and saved-tensor hooks.
    @torch.compiler.disable
    def _measure_and_run(
        self,
        step: _Step,
        module: nn.Module,
        original: Callable[..., Any],
        signature: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        excluded = self._excluded(step)
        devices = {t.device for t in _tensors((args, kwargs))}
        name = self._name(module)
        modes = step.modes
        assert modes is not None  # a measuring step
        kind = modes.kind(module, signature) if self.options.granularity == "op" else None
        # Measured inside the region that trains it: one forward, whose saves are noted on
        # their way to the checkpoint. At op level, a block of a new kind records its ops in
        # that forward until the modes' per-op cost is known (see ModesCache.records); its
        # forward time then comes from a plain run (ModesCache.ops_of, time_plainly), since
        # the recording mode times every op.
        record = kind is not None and modes.records(kind)
        recorder = op_recorder(original, args, kwargs) if record else None
        watch = CallWatch(original, args, kwargs, excluded, name, recorder, hand_on=True)
        snapshot = CallSnapshot(args, kwargs)  # the measuring runs below see the call's mappings
        if devices:
            self._device = next(iter(devices))
        call = len(step.calls)
        segments = self.step_budget.segments if self.step_budget is not None else None
        if segments is not None:
            segments.mark(("forward", call))
        now = clock()
        _synchronize((args, kwargs))
        start = now()
        out = self._run(module, original, args, kwargs, checkpointed=True, watch=watch)
        _synchronize(out)
        measured = watch.measurement(out, now() - start)
        # Held through the region run, so that nothing it saved or returned could take
        # their addresses; the op-level runs below record no keys across calls.
        step.last_outputs = None
        recorded = recorded_profile(recorder, out) if record else None
        ops = None if kind is None or record else modes.known(kind, measured.dispatched)
        if kind is not None and ops is None:
            self._inside += 1
            try:
                with _PreservedState([module], devices):
                    again, again_kwargs = snapshot.replayed(args, kwargs)
                    ops = modes.ops_of(
                        kind, original, again, again_kwargs, excluded, measured, recorded, True
                    )
            finally:
                self._inside -= 1
        if ops is not None and ops.plain_seconds is not None:
            # The region run is slowed by the measuring mode.
            seconds = min(measured.forward_seconds, ops.plain_seconds)
            measured = dataclasses.replace(measured, forward_seconds=seconds)
        arguments = tuple(
            storage_key(a)
            if isinstance(a, torch.Tensor) and not is_persistent(a, excluded)
            else None
            for a in (*args, *kwargs.values())
        )
        step.calls.append(
            RecordedCall.of(module, name, signature, measured, ops, input_order=arguments)
        )
        if step.outside is not None:
            outputs = (t for t in _tensors(out) if not is_persistent(t, excluded))
            step.outside.note_outputs(len(step.calls) - 1, outputs)
        if segments is not None:
            segments.mark(("after", call))
            segments.watch_backward(call, _tensors((args, kwargs)), _tensors(out))
        step.last_outputs = out
        return out

    def _excluded(self, step: _Step) -> set[tuple[str, int, int]]:
        """The storages of the model's parameters and buffers, read once a step: a walk of the
        model a block cost a real share of a small block's measuring. Under FSDP2 they are read
        at every block, whose parameters are gathered into fresh storage for its forward and
        freed after (a stale key could name an activation allocated there later)."""
        if step.excluded is None:
            step.sharded = has_fsdp_modules(self.model)
        if step.excluded is None or step.sharded:
            step.excluded = excluded_storages([self.model])
        return step.excluded

    def _plan_step(self, step: _Step) -> None:
        step.last_outputs = None
        if self._region_overhead is None:
            self._region_overhead = _region_overhead(torch.zeros(1, device=self._device), 0)
        held = frozenset(step.outside.keys) if step.outside is not None else frozenset()
        profile = chain_profile(step.calls, self._region_overhead, held)
        calls = tuple(
            (c.module, c.signature, moved)
            for c, moved in zip(step.calls, moved_input_positions(step.calls, held))
        )
        if _distributed.active(self.options.plan_group) or self.step_budget is not None:
            self._profiles[step.key] = (profile, calls)
        self._make_block_plan(step.plan_key, step.key, profile, calls)
        self._let_torch_compile_trace_the_blocks_callers()

    def _let_torch_compile_trace_the_blocks_callers(self) -> None:
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
        blocks = {id(m) for m in self.blocks.modules}
        if self.blocks.chain is not None:
            blocks.add(id(self.blocks.chain))
        named = dict(self.model.named_modules(remove_duplicate=False))
        callers: set[type] = set()
        for name, module in named.items():
            if id(module) in blocks:
                parts = name.split(".") if name else []
                for depth in range(len(parts)):  # every module above the block
                    callers.add(type(named[".".join(parts[:depth])]))
        for kind in callers:
            forward = getattr(kind, "forward", None)
            code = getattr(forward, "__code__", None)
            if code is not None and forward is not nn.Module.forward:
                reset_code(code)

    def _make_block_plan(
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
        offload = self.options.offload.for_device(self._device, self.options.plan_group)

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
            made = self.step_budget.plan(key, make_plan, self._start_bytes, self.options.plan_group)
        else:
            assert self.activation_budget is not None
            with budget_named("activation_budget"):
                made = make_plan(self.activation_budget)
        _distributed.verify_same_plan(
            (made.regions, made.options, made.offloaded, made.inputs_offloaded),
            group=self.options.plan_group,
        )
        regions = {
            first: region_context(made, index, self._warn)
            for index, (first, _, _) in enumerate(made.regions)
        }
        # A region whose input moves: the positions of the arguments it sends to the host.
        moved = {i: calls[i][2] for i in made.inputs_offloaded}
        found = _BlockPlan(made, calls, regions, frozenset(made.offloaded), moved)
        self._block_plans[plan_key] = found
        self.plans[key] = made
        self.plan = made
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
            self._warn(
                f"the blocks are compiled one by one, and the step makes {calls} block calls: "
                f"torch.compile keeps at most torch._dynamo.config.recompile_limit = {limit} "
                "graphs of remat's block wrapper (one a call), so the calls past that run "
                f"eagerly. Raise that limit to at least {calls}, or compile the whole model"
            )
