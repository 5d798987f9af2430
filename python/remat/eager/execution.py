"""Running a chain through a plan's nested regions with non-reentrant torch.utils.checkpoint."""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils.checkpoint import checkpoint

from ._runtime import _modules_of, _restore, _synchronize, clock


def _batchnorm_buffers(functions: Sequence[Any]) -> list[torch.Tensor]:
    return [
        b
        for f in functions
        for top in _modules_of(f)
        for m in top.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
        for b in m.buffers()
    ]


class _RunningStatsKept:
    """A re-run is not a new batch: BatchNorm's running statistics are put back after it
    (torch.utils.checkpoint alone would update them once more per re-run)."""

    def __init__(self, buffers: list[torch.Tensor]) -> None:
        self._buffers = buffers

    # Outside any dispatch mode: under selective checkpointing the re-run's ops are matched one
    # by one against the forward's, and these copies are not among them.
    def __enter__(self) -> None:
        with _disable_current_modes():
            self._saved = [b.detach().clone() for b in self._buffers]

    def __exit__(self, *exc: Any) -> None:
        if self._buffers:
            with _disable_current_modes():
                _restore(self._buffers, self._saved)


class Execution:
    """Runs a chain through a plan's regions; times the re-runs that happen in backward."""

    def __init__(
        self,
        functions: Sequence[Callable[[Any], Any]],
        regions: Sequence[tuple[int, int, int]],
        contexts: dict[int, Callable[[], Any]] | None = None,
    ) -> None:
        self.functions = list(functions)
        # region index -> context_fn of its selective (op-level) policy
        self.contexts = dict(contexts or {})
        self.regions = [(first, last) for first, last, _ in regions]
        self.inside: dict[int, list[int]] = {-1: []}  # region -> regions directly inside it
        stack: list[int] = []
        for index, (first, last) in sorted(
            enumerate(self.regions), key=lambda r: (r[1][0], -r[1][1])
        ):
            while stack and self.regions[stack[-1]][1] < first:
                stack.pop()
            self.inside.setdefault(stack[-1] if stack else -1, []).append(index)
            self.inside.setdefault(index, [])
            stack.append(index)
        self.recompute_seconds = 0.0
        self._timing = threading.local()
        self._statistics: dict[int, list[torch.Tensor]] = {}  # region -> BatchNorm buffers

    def __call__(self, h: Any) -> Any:
        return self._segment(0, len(self.functions) - 1, -1, h)

    def _segment(self, first: int, last: int, region: int, h: Any) -> Any:
        starts = {self.regions[r][0]: r for r in self.inside[region]}
        layer = first
        while layer <= last:
            inner = starts.get(layer)
            if inner is None:
                h = self.functions[layer](h)
                layer += 1
                continue
            extra = {"context_fn": self.contexts[inner]} if inner in self.contexts else {}
            h = checkpoint(
                functools.partial(self._region, inner),
                h,
                use_reentrant=False,
                preserve_rng_state=True,
                **extra,
            )
            layer = self.regions[inner][1] + 1
        return h

    def _region(self, region: int, h: Any) -> Any:
        first, last = self.regions[region]
        if torch._C._current_graph_task_id() == -1:  # the first forward pass
            return self._segment(first, last, region, h)
        # A re-run in backward. It may stop early (torch raises out of it once every saved
        # tensor is back), so the clock stops and the statistics come back in `finally`.
        outermost = not getattr(self._timing, "active", False)
        self._timing.active = True
        now = clock()
        start = now()
        try:
            if region not in self._statistics:
                self._statistics[region] = _batchnorm_buffers(self.functions[first : last + 1])
            with _RunningStatsKept(self._statistics[region]):
                out = self._segment(first, last, region, h)
            _synchronize(out)
            return out
        finally:
            if outermost:
                self.recompute_seconds += now() - start
                self._timing.active = False
