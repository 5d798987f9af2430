"""Module buffers a forward changes (BatchNorm's running statistics, an EMA, a step counter),
kept right under checkpointing (and, through generators.py, the model's own generators). So
are tensors a module keeps as plain attributes outside autograd (``self.ema = 0.9 * self.ema +
...``, a recurrent state): they are state as buffers are, and a re-run reads them as well.

torch.utils.checkpoint re-runs a region's forward in backward. Alone, that applies a buffer's
update a second time, and from the already updated value: the state drifts from a run without
checkpointing, and a re-run that reads the buffer computes other activations than the forward
did. Here a region's re-run starts from each changed buffer as its forward found it and leaves it
as the forward left it (whatever ran in between, such as a shared block's later calls).

Which buffers a module's forward changes is learned from its calls: the first one copies every
buffer and compares; later ones copy only the buffers seen changing, and BatchNorm's always (its
kernel updates the statistics without bumping their version, and only in training mode). A
buffer that first changes in a later call is caught by its version counter or its identity (a
new tensor assigned): that call's re-run cannot start from its old value, so it says so (the
buffer is still put back after it).
"""

from __future__ import annotations

import warnings
import weakref
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from .._runtime import _submodules, state_entries
from ..generators import GeneratorReplay


class BufferLedger:
    """Per module: the names of the buffers its forward has been seen to change."""

    def __init__(self) -> None:
        self._changing: weakref.WeakKeyDictionary[nn.Module, set[str]] = weakref.WeakKeyDictionary()

    def known(self, module: nn.Module) -> bool:
        return module in self._changing

    def changes(self, module: nn.Module, name: str) -> bool:
        return name in self._changing.get(module, ()) or isinstance(
            module, nn.modules.batchnorm._BatchNorm
        )

    def record(self, module: nn.Module, changed: set[str]) -> None:
        self._changing.setdefault(module, set()).update(changed)


# One ledger for every region run by the eager API: what a module does to its buffers does not
# depend on which plan runs it.
LEDGER = BufferLedger()


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    except RuntimeError:  # a layout torch.equal does not take: counted as changed
        return False


class BufferReplay:
    """The buffers of one checkpoint call's modules. Its first run is the forward; every later
    run is a re-run in backward."""

    def __init__(
        self, modules: Sequence[nn.Module], describe: str, ledger: BufferLedger = LEDGER
    ) -> None:
        self._modules = _submodules(modules)
        self._generators = GeneratorReplay(self._modules)
        self._describe = describe
        self._ledger = ledger
        self._forwarded = False
        # (module, name) -> where it is kept, and its value as the forward found it (None: not
        # copied)
        self._before: dict[tuple[nn.Module, str], tuple[dict[str, Any], torch.Tensor | None]] = {}

    def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # The model's own and the host's generators, replayed the same way.
        return self._generators.run(self._run, function, *args, **kwargs)

    def _run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._forwarded:
            self._forwarded = True
            return self._forward(function, args, kwargs)
        return self._rerun(function, args, kwargs)

    # Copies are made outside any dispatch mode: under selective checkpointing the re-run's ops
    # are matched one by one against the forward's, and these copies are not among them.
    def _forward(self, function: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        entries = state_entries(self._modules)
        if not entries:
            return function(*args, **kwargs)
        versions = [b._version for _, _, _, b in entries]
        with _disable_current_modes():
            copies = {
                index: b.detach().clone()
                for index, (_, m, name, b) in enumerate(entries)
                if not self._ledger.known(m) or self._ledger.changes(m, name)
            }
        out = function(*args, **kwargs)
        changed: dict[nn.Module, set[str]] = {}
        missed = []
        with _disable_current_modes():
            for index, (store, m, name, b) in enumerate(entries):
                now = store.get(name)
                copy = copies.get(index)
                if copy is not None:
                    moved = now is not b or not _same(now, copy)
                else:
                    moved = now is not b or b._version != versions[index]
                if not moved:
                    continue
                changed.setdefault(m, set()).add(name)
                self._before[(m, name)] = (store, copy)
                if copy is None:
                    missed.append(name)
        for m in self._modules:
            self._ledger.record(m, changed.get(m, set()))
        if missed:
            warnings.warn(
                f"remat: {self._describe} changed its buffer(s) or tensor attribute(s) "
                f"{', '.join(sorted(missed))} in forward for the first time in this call: this "
                "call's re-run in backward reads the changed value, so its gradients can differ "
                "from training without checkpointing (later calls keep the value their forward "
                "read); the state still ends as it would without checkpointing",
                RuntimeWarning,
                stacklevel=2,
            )
        return out

    def _rerun(self, function: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        if not self._before:
            return function(*args, **kwargs)
        current = {}
        with _disable_current_modes():
            for (m, name), (store, before) in self._before.items():
                now = store.get(name)
                current[(m, name)] = (store, now, None if now is None else now.detach().clone())
                if before is None:
                    continue
                if now is not None and now.shape == before.shape and now.dtype == before.dtype:
                    # Through .data: the graph may hold the buffer, and a version bump would fail
                    # backward.
                    now.data.copy_(before)
                else:
                    store[name] = before.clone()
        try:
            return function(*args, **kwargs)
        finally:
            # A re-run may stop early (torch raises out of it once every saved tensor is back).
            with _disable_current_modes():
                for (_, name), (store, tensor, value) in current.items():
                    store[name] = tensor
                    if tensor is not None and value is not None:
                        tensor.data.copy_(value)
