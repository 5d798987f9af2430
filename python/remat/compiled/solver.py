"""torch.compile's memory-budget knapsack through remat: the solver torch's partitioner calls, and
use(), which installs it.

torch calls a custom solver as ``solver(memory, joint_graph, max_memory, node_info,
all_recomputable_banned_nodes)`` and does not pass the runtimes; the solver computes them with
torch's own ``estimate_runtime`` (which honours ``activation_memory_budget_runtime_estimator``),
the same function torch uses to build the runtimes it gives its built-in solvers. With a byte
budget it picks, per graph, the least-recompute plan whose predicted step peak fits
(budget.choose).
"""

from __future__ import annotations

import contextlib
import hashlib
import statistics
import sys
import warnings
from typing import Any, Iterator

import torch
import torch._functorch.config as functorch_config
from torch._functorch import partitioners

from .. import __version__, _distributed
from .._solve import SOLVERS, Result, solve
from .._validate import number
from ..units import parse_bytes
from . import survey as _survey
from .budget import (
    BudgetTooSmall,
    GraphChoice,
    OptimizerStepTooLarge,
    candidate_sizes,
    choose,
    front_plans,
    knapsack_answer,
)
from .guard import ROUTE_TO_SOLVER, guarded_choice, unguarded
from .partition import Partitioner, require_partitioner_internals
from .step_start import StartCounter

try:
    from torch._inductor.custom_graph_pass import CustomKnapsackSolver
except ImportError:  # torch < 2.11: eager checkpointing only
    CustomKnapsackSolver = None  # type: ignore[misc,assignment]

#: The first torch whose partitioner takes a CustomKnapsackSolver (pytorch/pytorch#171601).
COMPILE_MIN_TORCH = "2.11"


def _require_custom_knapsack_solver() -> None:
    if CustomKnapsackSolver is None:
        raise RuntimeError(
            f"remat.torch.use() needs torch >= {COMPILE_MIN_TORCH}, the first with "
            "torch._inductor.custom_graph_pass.CustomKnapsackSolver, through which torch.compile's "
            f"partitioner takes another knapsack solver; this is torch {torch.__version__}. "
            "Eager checkpointing (auto_checkpoint, checkpoint_sequential, plan) works on it."
        )


_OFFLOADING_SETTINGS = ("enable_activation_offloading", "activation_offload_separate_stream")


def _offloading_settings() -> tuple[bool, bool]:
    """torch._functorch's activation offloading settings, as they are; a clear error on a torch
    without them."""
    missing = [name for name in _OFFLOADING_SETTINGS if not hasattr(functorch_config, name)]
    if missing:
        raise RuntimeError(
            f"remat.torch.use(offload=True) needs torch._functorch's activation offloading "
            f"(torch._functorch.config.{missing[0]}), which this torch {torch.__version__} lacks. "
            "Compile without offload=, or offload in eager PyTorch: "
            "auto_checkpoint(..., offload='auto')."
        )
    return tuple(getattr(functorch_config, name) for name in _OFFLOADING_SETTINGS)


class _torch_dispatch_enabled:
    """Undoes torch.utils._mode_utils.no_dispatch inside the block.

    torch estimates runtimes before it enters no_dispatch, but calls a custom solver inside it,
    where FlopCounterMode would count nothing (every runtime would read 1). no_dispatch excludes
    the Python dispatch keys from thread-local state; this restores them, then puts back exactly
    what it found."""

    _KEYS = (torch._C.DispatchKey.Python, torch._C.DispatchKey.PythonTLSSnapshot)

    def __enter__(self) -> None:
        self._saved = [torch._C._dispatch_tls_is_dispatch_key_excluded(k) for k in self._KEYS]
        for key in self._KEYS:
            torch._C._dispatch_tls_set_dispatch_key_excluded(key, False)

    def __exit__(self, *exc: object) -> None:
        for key, excluded in zip(self._KEYS, self._saved):
            torch._C._dispatch_tls_set_dispatch_key_excluded(key, excluded)


@contextlib.contextmanager
def _outside_tracing() -> Iterator[None]:
    """Real tensors for a collective called from inside the partitioner (fake tensor mode and
    dispatch modes are active there; the Python dispatcher is too, which the collectives turn off
    themselves: remat._distributed)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import _disable_current_modes

    with unset_fake_temporarily(), _disable_current_modes():
        yield


def node_runtimes(nodes: list[Any]) -> list[float]:
    """Runtimes of candidate nodes exactly as torch's partitioner estimates them (its own
    estimate_runtime, under the configured activation_memory_budget_runtime_estimator)."""
    with _torch_dispatch_enabled():
        return [float(partitioners.estimate_runtime(node)) for node in nodes]


def _device_type(joint_graph: Any) -> str | None:
    """The device type of the joint graph's first tensor (its activations live there)."""
    for node in joint_graph.nodes:
        value = node.meta.get("val")
        if isinstance(value, torch.Tensor):
            return value.device.type
    return None


# Byte targets fit() found measured within a budget: use() with one of them does not warn that
# inductor may exceed its prediction (fit measured what inductor runs).
FITTED_TARGETS: set[int] = set()


def _has_symbolic_sizes(joint_graph: Any) -> bool:
    """Whether a graph's inputs have symbolic sizes (torch.compile's dynamic shapes)."""
    for node in joint_graph.nodes:
        value = node.meta.get("val") if node.op == "placeholder" else None
        if (
            isinstance(value, torch.SymInt)
            or isinstance(value, torch.Tensor)
            and any(isinstance(size, torch.SymInt) for size in value.shape)
        ):
            return True
    return False


def compiled_by_inductor() -> bool:
    """Whether the partitioner runs for inductor: its compile_fx is among the callers (its
    partition function is a closure there; aot_eager calls the partitioner directly)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(
            ("_inductor/compile_fx.py", "_inductor\\compile_fx.py")
        ):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class RematKnapsackSolver(CustomKnapsackSolver or object):  # type: ignore[misc]
    """A CustomKnapsackSolver backed by remat; its uuid() keeps the AOTAutograd cache working."""

    def __init__(
        self,
        solver: str = "exact",
        *,
        time_limit: float | None = None,
        memory_budget: int | float | str | None = None,
        max_candidates: int = 33,
        offload: bool = False,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        _require_custom_knapsack_solver()
        if not isinstance(offload, bool):
            raise TypeError(f"offload: expected True or False, got {offload!r}")
        if offload and memory_budget is None:
            raise ValueError("offload: needs a memory_budget in bytes to offload for")
        if solver not in SOLVERS:
            hint = ""
            try:
                parse_bytes(solver)
                hint = f"; for a budget in bytes write memory_budget={solver!r}"
            except (TypeError, ValueError):
                pass
            raise ValueError(
                f"solver: unknown solver {solver!r} (expected one of {', '.join(SOLVERS)}){hint}"
            )
        if isinstance(max_candidates, bool) or not isinstance(max_candidates, int):
            raise TypeError("max_candidates: expected an int >= 2")
        if max_candidates < 2:
            raise ValueError(f"max_candidates: expected an int >= 2, got {max_candidates}")
        if time_limit is not None:
            # Checked here, not first when a graph compiles (inside BackendCompilerFailed).
            time_limit = number(time_limit, "time_limit")
            if not time_limit > 0:
                raise ValueError(
                    f"time_limit: must be a positive number of seconds, got {time_limit!r}"
                )
        self.solver = solver
        self.time_limit = time_limit
        self.memory_budget = None if memory_budget is None else parse_bytes(memory_budget)
        if memory_budget is not None:
            require_partitioner_internals()
        self.max_candidates = max_candidates
        # memory_budget is the whole step's: each graph gets what the step's start leaves.
        self.start = StartCounter(optimizer)
        # Off for tradeoff()'s measured points: a budget on the graph's own peak, its curve's.
        self.counts_start = True
        # When no plan fits on the device alone: move the saved values torch's activation
        # offloading accepts to the host (budget.choose), on graphs of these devices (on the
        # CPU the host is the device: the copy frees nothing).
        self.offload = offload
        self.offload_devices: tuple[str, ...] = ("cuda",)
        self.survey = False  # tradeoff(): predict every candidate, keep everything
        # Rule plans out by a lower bound on their peak before splitting the graph (see
        # compiled.choose); off only to check that the choice is the same without it.
        self.bound_plans = True
        # Predict with remat's min-cut flow and graph split (exact reproductions of torch's;
        # the guard checks each graph's final choice against torch's own split, and plans
        # again with fast off where they differ).
        self.fast = True
        self.last_result: Result | None = None
        self.last_runtimes: list[float] | None = None
        self.choices: list[GraphChoice] = []  # one per graph, byte budgets only
        self._warned_keys: set[Any] = set()  # graphs said to differ from the survey
        # Say once that the prediction follows aot_eager's order when inductor compiles the
        # graph (off inside fit() and tradeoff(), which measure, and for a target fit() found).
        self.warn_on_inductor = True
        self.warned_dynamic = False  # said once: a graph's plan holds at its traced sizes only
        self.warned_unsized = False  # said once: an optimizer steps that the budget left out

    def __call__(
        self,
        memory: list[float],
        joint_graph: Any,
        max_memory: float,
        node_info: Any,
        all_recomputable_banned_nodes: list[Any],
    ) -> tuple[list[int], list[int]]:
        nodes = all_recomputable_banned_nodes
        runtimes = node_runtimes(nodes)
        if _distributed.active():
            # torch's default estimator counts flops, the same on every rank for the same shapes;
            # a measuring one ("profile", a custom one) is not, and with dynamic shapes each rank
            # counts at its own sizes. Every rank solves with the median runtimes, and the plans
            # are checked equal: under FSDP a different plan is a different set of collectives.
            with _outside_tracing():
                gathered = _distributed.all_gather(runtimes, "torch.compile's knapsack runtimes")
            if len({len(r) for r in gathered}) == 1:
                runtimes = [statistics.median(values) for values in zip(*gathered)]
        self.last_runtimes = runtimes
        if self.memory_budget is None and not self.survey:
            result = solve(
                memory, runtimes, max_memory, solver=self.solver, time_limit=self.time_limit
            )
            self.last_result = result
            saved, recomputed = list(result.saved), list(result.recomputed)
        else:
            saved, recomputed = self._within_bytes(memory, runtimes, joint_graph, node_info, nodes)
        if _distributed.active():
            with _outside_tracing():
                _distributed.verify_same_plan([saved], what="torch.compile knapsack plan")
        return saved, recomputed

    def _within_bytes(
        self,
        memory: list[float],
        runtimes: list[float],
        joint_graph: Any,
        node_info: Any,
        nodes: list[Any],
    ) -> tuple[list[int], list[int]]:
        """The least-recompute plan whose predicted step peak fits memory_budget
        (remat.compiled.budget); when surveying, every candidate predicted and all kept."""
        partitioner = Partitioner(joint_graph, node_info, fast=self.fast)
        sizes = candidate_sizes(nodes)
        plans = front_plans(sizes, runtimes, self.max_candidates)
        key = _survey.graph_key(len(joint_graph.nodes), partitioner.num_fwd_outputs, sizes)
        budget, start = self.graph_budget(joint_graph)
        try:
            choice = choose(
                plans,
                lambda recomputed, budget, offload: partitioner.predict(
                    [nodes[i] for i in recomputed], budget if self.bound_plans else None, offload
                ),
                budget,
                offload=self.offload and _device_type(joint_graph) in self.offload_devices,
            )
        except BudgetTooSmall as error:
            note = _survey.mismatch(key, error.least_peak)
            whole = self._step_error(error, start)
            whole.first_useful_frame = sys._getframe(0)  # the frame that raises it
            if note:
                whole.args = (f"{whole.args[0]} Note: {note}.",)
            raise whole from None
        choice.start_bytes = start
        choice.graph_key = key
        choice.step_seconds = dict(partitioner.seconds)
        if not self.survey:
            self._warn_if_inductor()
            self._warn_if_dynamic(joint_graph)
        note = None if self.survey else _survey.mismatch(key)
        if note and key not in self._warned_keys:
            self._warned_keys.add(key)
            warnings.warn(f"remat.torch.use(memory_budget=...): {note}", stacklevel=2)
        if choice.chosen is not None:
            recomputed = set(choice.chosen.recomputed)
            choice.ratio = sum(m for i, m in enumerate(memory) if i not in recomputed)
        self.choices.append(choice)
        if len(self.choices) == 2 and not self.survey:
            warnings.warn(
                "remat.torch.use(memory_budget=...): a second graph was partitioned (a graph "
                "break, DDP's bucketing, or a recompile); the budget holds for each graph on its "
                "own, and graphs that run in the same step add up",
                stacklevel=2,
            )
        if self.survey:
            return list(range(len(nodes))), []
        return knapsack_answer(choice, len(nodes))

    def graph_budget(self, joint_graph: Any) -> tuple[int | None, int]:
        """(the budget left to this graph's peak, what the step holds as it begins): the
        memory budget less the start (step_start.py). None when surveying. Raises
        OptimizerStepTooLarge when the optimizer's step alone is predicted over the budget."""
        if self.survey or self.memory_budget is None:
            return None, 0
        if not self.counts_start:
            return self.memory_budget, 0
        start = self.start(joint_graph)
        if start.optimizer_peak > self.memory_budget:
            raise OptimizerStepTooLarge(self.memory_budget, start.optimizer_peak, start.start)
        return self.memory_budget - start.start, start.start

    def _step_error(self, error: BudgetTooSmall, start: int) -> BudgetTooSmall:
        """`error`, raised against the graph's share of the budget, told in the whole step's."""
        if not start or self.memory_budget is None or error.least is None:
            return error
        why = (
            " (parameters, inputs, gradients held, the optimizer's state)"
            if self.start.optimizer is not None
            else " (parameters, buffers, inputs)"
        )
        return BudgetTooSmall(self.memory_budget, error.least, error.evaluated, start, why)

    def _warn_if_dynamic(self, joint_graph: Any) -> None:
        if self.warned_dynamic or not _has_symbolic_sizes(joint_graph):
            return
        self.warned_dynamic = True
        warnings.warn(
            "remat.torch.use(memory_budget=...): torch.compile traced this graph with dynamic "
            "sizes (after an input's size changed, or with dynamic=True or mark_dynamic). Its "
            "plan is predicted at the sizes it was traced with, and larger inputs go over the "
            "budget in proportion. For a budget that holds at every size, compile with "
            "dynamic=False: each size then gets a plan of its own",
            stacklevel=2,
        )

    def _warn_if_inductor(self) -> None:
        if not self.warn_on_inductor or self.memory_budget in FITTED_TARGETS:
            return
        if not compiled_by_inductor():
            return
        self.warn_on_inductor = False
        warnings.warn(
            "remat.torch.use(memory_budget=...): inductor compiles this graph, and remat "
            "predicts its peak in aot_eager's order; inductor's kernels can hold buffers longer, "
            "so a step can measure over the budget (docs/compile.md). To hold the budget as "
            "measured, give use() the target "
            "remat.torch.fit(model, example_input, memory_budget=..., loss=...) finds",
            stacklevel=2,
        )

    def uuid(self) -> str:
        key = (
            f"remat-{__version__}-{self.solver}-{self.time_limit}-{self.memory_budget}"
            f"-{self.max_candidates}-{self.survey}-{self.offload}-{self.offload_devices}"
            f"-{self.counts_start}-{self.start.optimizer is not None}"
        )
        return hashlib.sha256(key.encode()).hexdigest()


class use:
    """Makes torch.compile's memory-budget partitioner use remat; restores what it changed
    when used as a context manager (a plain call leaves remat in place).

    ``use()`` / ``use("exact")``: torch's ratio budget (``activation_memory_budget``), solved
    exactly. ``use(memory_budget="24GiB")`` (or bytes): the training step's peak on the device,
    as ``auto_checkpoint`` takes it. A compiled graph gets the least-recompute plan whose
    predicted peak fits what the step's start leaves of the budget: on CUDA everything
    allocated when the graph is partitioned (at its first call), on the CPU the graph's inputs
    (parameters, buffers, the batch); with ``optimizer=``, also its gradients and its state,
    counted before its first step creates it, and its step's own peak is checked. It routes
    every graph to remat by setting ``activation_memory_budget`` just above 0. With a graph
    break each graph is planned on its own (a warning says so): on CUDA a later graph's start
    holds what earlier ones left live, on the CPU it does not. The prediction follows
    ``aot_eager``'s order; on inductor, :func:`fit` finds the budget that holds as measured
    (``use()`` warns once when inductor compiles a graph it plans, unless the budget is one
    ``fit()`` found).

    ``offload=True``: where no plan of a CUDA graph fits the budget on the device alone, the
    least-recompute plan that fits with its saved activations moved to host memory is chosen,
    and those saved values carry torch's offload tag (``should_offload``, applied by
    ``torch._functorch``'s ``enable_activation_offloading``, synchronous copies). The peak is
    predicted with them: each leaves the device after its last forward use and is back from its
    first backward use (docs/compile.md).

    Args:
        solver: "exact" (the default), "sliding_hirschberg", "dp" or "greedy".
        time_limit: seconds for each knapsack solve (None: no limit).
        memory_budget: the training step's peak on the device, in bytes or with a unit
            (None: torch's ratio).
        max_candidates: the most plans predicted per graph.
        offload: offload saved activations to meet budgets the device alone cannot.
        optimizer: the optimizer that trains the compiled model: its gradients, state and step
            count in the step (None: the step ends with the backward).

    Returns:
        As a context manager, the installed :class:`RematKnapsackSolver`, whose ``choices``
        record each graph's choice.

    Raises:
        BudgetTooSmall: at compile time, naming the least predicted peak, when no plan fits
            (``OptimizerStepTooLarge``, one of them, when the optimizer's step alone does not).

    Example:
        ```python
        with remat.torch.use(memory_budget="6GiB"):
            torch.compile(model)(x).sum().backward()
        ```
    """

    def __init__(
        self,
        solver: str = "exact",
        *,
        time_limit: float | None = None,
        memory_budget: int | float | str | None = None,
        max_candidates: int = 33,
        offload: bool = False,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        if optimizer is not None and memory_budget is None:
            raise ValueError("optimizer: counts toward a memory_budget in bytes; give one")
        self.knapsack_solver = RematKnapsackSolver(
            solver,
            time_limit=time_limit,
            memory_budget=memory_budget,
            max_candidates=max_candidates,
            offload=offload,
            optimizer=optimizer,
        )
        self._offload = offload
        self._previous: tuple[Any, ...] | None = None
        self._unsized_hook: Any = None
        self._install()

    def _install(self) -> None:
        """Puts the solver in place, noting what it replaces (a plain call leaves it there)."""
        self._previous = (
            functorch_config.activation_memory_budget_solver,
            functorch_config.activation_memory_budget,
            partitioners.choose_saved_values_set,
        )
        # Touched only when asked for: a torch without activation offloading still plans.
        self._previous_offloading = _offloading_settings() if self._offload else None
        if self._offload:
            # Synchronous copies, placed after the last forward use and before the first
            # backward use: the placement the prediction follows (prefetching would move the
            # copies back earlier, by a bandwidth estimate).
            functorch_config.enable_activation_offloading = True
            functorch_config.activation_offload_separate_stream = False
        functorch_config.activation_memory_budget_solver = self.knapsack_solver
        self._unsized_hook = self._watch_for_an_unsized_optimizer()
        # An earlier plain use(memory_budget=...) left its guard and routing ratio in place;
        # this one replaces them rather than stacking on them.
        torch_choice, ratio = unguarded(partitioners.choose_saved_values_set)
        if ratio is not None:
            functorch_config.activation_memory_budget = ratio
        if self.knapsack_solver.memory_budget is not None:
            partitioners.choose_saved_values_set = guarded_choice(
                torch_choice, self.knapsack_solver, functorch_config.activation_memory_budget
            )
            functorch_config.activation_memory_budget = ROUTE_TO_SOLVER
        else:
            partitioners.choose_saved_values_set = torch_choice

    def _watch_for_an_unsized_optimizer(self) -> Any:
        """Under a byte budget without optimizer=, a hook that warns once when an optimizer
        steps after a graph was planned: its state and step were not in the plan's budget."""
        solver = self.knapsack_solver
        if solver.memory_budget is None or solver.start.optimizer is not None:
            return None
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        def warn(optimizer: torch.optim.Optimizer, *_: Any) -> None:
            if solver.warned_unsized or not solver.counts_start or not solver.choices:
                return
            if functorch_config.activation_memory_budget_solver is not solver:
                return  # a later use() replaced this one
            solver.warned_unsized = True
            warnings.warn(
                f"remat.torch.use(memory_budget=...): a {type(optimizer).__name__} steps, and "
                "the compiled graphs were planned without its gradients, state and step in the "
                "budget; give use(memory_budget=..., optimizer=optimizer) so the whole training "
                "step holds it",
                stacklevel=2,
            )

        return register_optimizer_step_pre_hook(warn)

    def __enter__(self) -> RematKnapsackSolver:
        if self._previous is None:  # entered again after an exit: in place once more
            self._install()
        return self.knapsack_solver

    def __exit__(self, *exc: object) -> None:
        if self._previous is None:
            return
        (
            functorch_config.activation_memory_budget_solver,
            functorch_config.activation_memory_budget,
            partitioners.choose_saved_values_set,
        ) = self._previous
        self._previous = None
        if self._unsized_hook is not None:
            self._unsized_hook.remove()
        if self._previous_offloading is not None:
            (
                functorch_config.enable_activation_offloading,
                functorch_config.activation_offload_separate_stream,
            ) = self._previous_offloading
