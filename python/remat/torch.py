"""remat for PyTorch: torch.compile's memory-budget knapsack, and eager checkpointing to a budget.

    import remat.torch
    remat.torch.checkpoint_sequential(layers, x, memory_budget="2GiB")   # eager (remat.eager)
    remat.torch.auto_checkpoint(model, memory_budget="2GiB")
    remat.torch.use()                  # every later torch.compile uses remat's exact solver
    with remat.torch.use("exact"):     # or only inside this block
        ...

torch calls a custom solver as ``solver(memory, joint_graph, max_memory, node_info,
all_recomputable_banned_nodes)`` and does not pass the runtimes; the adapter computes them with
torch's own ``estimate_runtime`` (which honours ``activation_memory_budget_runtime_estimator``),
the same function torch uses to build the runtimes it gives its built-in solvers.

Torch versions: ``use()`` and :class:`RematKnapsackSolver` need torch >= 2.11, the first release
with ``torch._inductor.custom_graph_pass.CustomKnapsackSolver``; on an older torch this module
still imports, eager checkpointing works, and ``use()`` raises a RuntimeError saying so.
"""

from __future__ import annotations

import contextlib
import hashlib
import statistics
from typing import Any, Iterator

import torch
import torch._functorch.config as functorch_config
from torch._functorch import partitioners

from . import __version__
from ._solve import SOLVERS, Result, solve
from .eager import distributed as _distributed

try:
    from torch._inductor.custom_graph_pass import CustomKnapsackSolver
except ImportError:  # torch < 2.11: eager checkpointing only
    CustomKnapsackSolver = None

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
    dispatch modes are active there)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._python_dispatch import _disable_current_modes

    with unset_fake_temporarily(), _disable_current_modes():
        yield


def node_runtimes(nodes: list[Any]) -> list[float]:
    """Runtimes of candidate nodes exactly as torch's partitioner estimates them (its own
    estimate_runtime, under the configured activation_memory_budget_runtime_estimator)."""
    with _torch_dispatch_enabled():
        return [float(partitioners.estimate_runtime(node)) for node in nodes]


class RematKnapsackSolver(CustomKnapsackSolver or object):  # type: ignore[misc]
    """A CustomKnapsackSolver backed by remat; its uuid() keeps the AOTAutograd cache working."""

    def __init__(self, solver: str = "exact", *, time_limit: float | None = None) -> None:
        _require_custom_knapsack_solver()
        if solver not in SOLVERS:
            raise ValueError(
                f"solver: unknown solver '{solver}' (expected one of {', '.join(SOLVERS)})"
            )
        self.solver = solver
        self.time_limit = time_limit
        self.last_result: Result | None = None
        self.last_runtimes: list[float] | None = None

    def __call__(
        self,
        memory: list[float],
        joint_graph: Any,
        max_memory: float,
        node_info: Any,
        all_recomputable_banned_nodes: list[Any],
    ) -> tuple[list[int], list[int]]:
        runtimes = node_runtimes(all_recomputable_banned_nodes)
        if _distributed.active():
            # torch's default estimator counts flops, the same on every rank; a measuring one
            # ("profile") is not. Every rank solves with the median runtimes, and the plans are
            # checked equal: under FSDP a different plan is a different set of collectives.
            with _outside_tracing():
                gathered = _distributed.all_gather(runtimes, "torch.compile's knapsack runtimes")
            if len({len(r) for r in gathered}) == 1:
                runtimes = [statistics.median(values) for values in zip(*gathered)]
        result = solve(memory, runtimes, max_memory, solver=self.solver, time_limit=self.time_limit)
        if _distributed.active():
            with _outside_tracing():
                _distributed.verify_same_plan([result.saved], what="torch.compile knapsack plan")
        self.last_result, self.last_runtimes = result, runtimes
        return list(result.saved), list(result.recomputed)

    def uuid(self) -> str:
        key = f"remat-{__version__}-{self.solver}-{self.time_limit}"
        return hashlib.sha256(key.encode()).hexdigest()


class use:
    """Makes torch.compile's memory-budget partitioner use remat; restores the previous solver
    when used as a context manager (a plain call leaves remat in place)."""

    def __init__(self, solver: str = "exact", *, time_limit: float | None = None) -> None:
        self.knapsack_solver = RematKnapsackSolver(solver, time_limit=time_limit)
        self._previous = functorch_config.activation_memory_budget_solver
        functorch_config.activation_memory_budget_solver = self.knapsack_solver

    def __enter__(self) -> RematKnapsackSolver:
        return self.knapsack_solver

    def __exit__(self, *exc: object) -> None:
        functorch_config.activation_memory_budget_solver = self._previous


from .eager import (  # noqa: E402  (eager checkpointing lives in its own module)
    AutoCheckpoint,
    LayerProfile,
    Plan,
    Profile,
    Measurement,
    auto_checkpoint,
    checkpoint_sequential,
    find_blocks,
    measure,
    plan,
    profile_layers,
)
from .saved_memory import SavedTensorMeter  # noqa: E402

__all__ = [
    "AutoCheckpoint",
    "COMPILE_MIN_TORCH",
    "LayerProfile",
    "Measurement",
    "Plan",
    "Profile",
    "RematKnapsackSolver",
    "SavedTensorMeter",
    "auto_checkpoint",
    "checkpoint_sequential",
    "find_blocks",
    "measure",
    "node_runtimes",
    "plan",
    "profile_layers",
    "use",
]
