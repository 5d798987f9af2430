"""auto_checkpoint on a stock nn.Sequential called as a whole: its blocks form a chain, planned
with nested regions that span several blocks, and tuned on the training steps.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import nn

from ... import _distributed
from ...saved_memory import has_fsdp_modules
from .._runtime import _signature, _tensors
from ..planning.tune import tuning_candidates
from .contexts import plan_contexts
from .execution import Execution
from .handle_state import HandleState
from .sequential import plan
from .tuning import OnlineTuning


class ChainMode(HandleState):
    """AutoCheckpoint's part for a stock nn.Sequential (see auto.py for the state it shares)."""

    def _chain_forward(self, container: nn.Module, original: Callable[..., Any], input: Any) -> Any:
        if not self._active() or not _tensors(input):
            return original(input)
        if self._step is not None:
            self._step.chain_calls += 1
            if self._step.chain_calls == 2:
                self._warn(
                    f"{self.blocks.path} was called twice in one step: each call of the chain is "
                    "planned to the whole budget, so together the calls hold up to that many "
                    "times the budget. Give auto_checkpoint its blocks as a list "
                    "(blocks=list(...)): calls of listed blocks are planned together"
                )
        functions = [functools.partial(self._plain, block) for block in self.blocks.modules]
        key = ("chain", _signature(input), self._context())
        # Every rank plans for a combination of the ranks' keys it has not seen, together.
        plan_key, _ = self._plan_key(key, False)
        found = self._chain_plans.get(plan_key)
        if found is None:
            online = self.options.tune and self._tunes_online()
            self._inside += 1
            try:
                found = plan(
                    functions,
                    input,
                    activation_budget=self.activation_budget,
                    slots=self.options.slots,
                    tune=self.options.tune and not online,
                    exclude=[self.model],
                    names=list(self.blocks.names),
                    microbatches_in_flight=self.options.microbatches_in_flight,
                    plan_group=self.options.plan_group,
                    granularity=self.options.granularity,
                )
            finally:
                self._inside -= 1
            self._chain_plans[plan_key] = found
            self.plans[key] = found
            candidates = tuning_candidates(found) if online else {}
            if len(candidates) > 1:
                self._tunings[plan_key] = OnlineTuning(candidates)
        tuning = self._tunings.get(plan_key)
        if tuning is not None and tuning.done():
            found = tuning.result()
            self._chain_plans[plan_key] = self.plans[key] = found
            del self._tunings[plan_key]
            tuning = None
        self.plan = found
        if self._measuring:
            self.last_execution = Execution(functions, [(i, i, 0) for i in range(len(functions))])
            return self.last_execution(input)
        if tuning is not None and not torch.compiler.is_compiling():
            label, candidate = tuning.next()
            self.plan = candidate
            self.last_execution = Execution(functions, candidate.regions, plan_contexts(candidate))
            return tuning.run(label, self.last_execution, input, self.blocks.modules[0])
        self.last_execution = Execution(functions, found.regions, plan_contexts(found))
        return self.last_execution(input)

    def _tunes_online(self) -> bool:
        """Whether a chain's plan is tuned on the training steps (see tuning.OnlineTuning) rather than
        before the first one: alone (ranks would have to agree on every step's timings), one
        microbatch in flight, not while measuring, and not on FSDP2 layers (whose plans are not
        tuned at all, see tuning.tune_plan)."""
        return (
            not self._measuring
            and self.options.microbatches_in_flight == 1
            and not _distributed.active(self.options.plan_group)
            and not any(has_fsdp_modules(m) for m in self.blocks.modules)
        )

    def _plain(self, block: nn.Module, h: Any) -> Any:
        self._inside += 1
        try:
            return block(h)
        finally:
            self._inside -= 1
