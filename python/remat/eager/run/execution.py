"""Running a chain through a plan's nested regions with non-reentrant torch.utils.checkpoint."""

from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Sequence

import torch
from torch.utils.checkpoint import checkpoint

from .._runtime import _modules_of, _synchronize, clock
from .buffers import BufferReplay


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
        for index, (first, _last) in sorted(
            enumerate(self.regions), key=lambda r: (r[1][0], -r[1][1])
        ):
            while stack and self.regions[stack[-1]][1] < first:
                stack.pop()
            self.inside.setdefault(stack[-1] if stack else -1, []).append(index)
            self.inside.setdefault(index, [])
            stack.append(index)
        self.recompute_seconds = 0.0
        self._timing = threading.local()

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
            extra: dict[str, Any] = (
                {"context_fn": self.contexts[inner]} if inner in self.contexts else {}
            )
            replay = None if torch.compiler.is_compiling() else self._replay(inner)
            h = checkpoint(
                functools.partial(self._region, inner, replay),
                h,
                use_reentrant=False,
                preserve_rng_state=True,
                **extra,
            )
            layer = self.regions[inner][1] + 1
        return h

    def _replay(self, region: int) -> BufferReplay:
        first, last = self.regions[region]
        modules = [m for f in self.functions[first : last + 1] for m in _modules_of(f)]
        return BufferReplay(modules, f"the region of layers {first} to {last}")

    def _region(self, region: int, replay: BufferReplay | None, h: Any) -> Any:
        first, last = self.regions[region]
        run = self._segment if replay is None else functools.partial(replay.run, self._segment)
        if torch._C._current_graph_task_id() == -1:  # the first forward pass
            return run(first, last, region, h)
        # A re-run in backward. It may stop early (torch raises out of it once every saved
        # tensor is back), so the clock stops and the statistics come back in `finally`.
        outermost = not getattr(self._timing, "active", False)
        self._timing.active = True
        now = clock()
        start = now()
        try:
            out = run(first, last, region, h)
            _synchronize(out)
            return out
        finally:
            if outermost:
                self.recompute_seconds += now() - start
                self._timing.active = False
