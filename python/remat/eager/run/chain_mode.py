"""auto_checkpoint on a stock nn.Sequential called as a whole: its blocks form a chain, planned
with nested regions that span several blocks, and tuned on the training steps.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch import nn

from ...saved_memory import has_fsdp_modules
from .._runtime import _signature, _tensors
from ..blocks import Blocks
from ..planning.tune import tuning_candidates
from ..types import Plan
from .agreement import Agreement
from .contexts import plan_contexts
from .execution import Execution
from .options import CheckpointOptions
from .running import Notices, PlanBook, Running, step_context
from .sequential import plan
from .tuning import OnlineTuning


class ChainRunner:
    """Plans and runs a stock nn.Sequential called as a whole: one chain of nested regions,
    planned at its first call for each input signature and tuned on the training steps."""

    def __init__(
        self,
        model: nn.Module,
        blocks: Blocks,
        options: CheckpointOptions,
        activation_budget: int | None,
        running: Running,
        agreement: Agreement,
        book: PlanBook,
        notices: Notices,
        measuring: bool,
    ) -> None:
        self.model = model
        self.blocks = blocks
        self.options = options
        self.activation_budget = activation_budget
        self.running = running
        self.agreement = agreement
        self.book = book
        self.notices = notices
        self.measuring = measuring  # measure()'s chain: every block its own region
        self.chain_plans: dict[Any, Plan] = {}
        self.tunings: dict[Any, OnlineTuning] = {}  # chains whose plan is tuned on the steps
        self.last_execution: Execution | None = None  # the chain's last run

    def forward(self, container: nn.Module, original: Callable[..., Any], input: Any) -> Any:
        """The chain's forward while it is under auto_checkpoint."""
        if not self.running.active() or not _tensors(input):
            return original(input)
        step = self.running.step
        if step is not None:
            step.chain_calls += 1
            if step.chain_calls == 2:
                self.notices.warn(
                    f"{self.blocks.path} was called twice in one step: each call of the chain is "
                    "planned to the whole budget, so together the calls hold up to that many "
                    "times the budget. Give auto_checkpoint its blocks as a list "
                    "(blocks=list(...)): calls of listed blocks are planned together"
                )
        functions = [functools.partial(self._plain, block) for block in self.blocks.modules]
        key = ("chain", _signature(input), step_context(self.model, self.blocks))
        # Every rank plans for a combination of the ranks' keys it has not seen, together.
        plan_key, _ = self.agreement.plan_key(key, False)
        found = self.chain_plans.get(plan_key)
        if found is None:
            online = self.options.tune and self._tunes_online()
            with self.running.inside_block():
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
            self.chain_plans[plan_key] = found
            self.book.plans[key] = found
            candidates = tuning_candidates(found) if online else {}
            if len(candidates) > 1:
                self.tunings[plan_key] = OnlineTuning(candidates)
        tuning = self.tunings.get(plan_key)
        if tuning is not None and tuning.done():
            found = tuning.result()
            self.chain_plans[plan_key] = self.book.plans[key] = found
            del self.tunings[plan_key]
            tuning = None
        self.book.last = found
        if self.measuring:
            self.last_execution = Execution(functions, [(i, i, 0) for i in range(len(functions))])
            return self.last_execution(input)
        if tuning is not None and not torch.compiler.is_compiling():
            label, candidate = tuning.next()
            self.book.last = candidate
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
            not self.measuring
            and self.options.microbatches_in_flight == 1
            and not self.agreement.together
            and not any(has_fsdp_modules(m) for m in self.blocks.modules)
        )

    def _plain(self, block: nn.Module, h: Any) -> Any:
        with self.running.inside_block():
            return block(h)
