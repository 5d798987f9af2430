"""The CUDA branch of offloading (side streams, events, pinned host memory), run on the CPU
against an emulated stream runtime.

The CPU tests of test_offload_run.py take offloading's synchronous branch. Here the very code
that runs on a GPU runs instead, with `torch.cuda` replaced by an emulation that is as late as
CUDA allows:
- work queued on a side stream (a non_blocking copy) runs only when some stream waits for an
  event recorded after it, and its destination holds NaN bytes until then;
- the compute stream is the CPU itself: it runs at once, and waiting for an event runs that
  event's stream up to it;
- a device storage a side stream reads must still be alive when the read runs (the caching
  allocator would otherwise hand it to the next kernel); host memory from pin_memory=True stays
  alive until its copies ran, as the host allocator keeps it.

So a missing wait shows as NaN gradients or a recorded fault: a copy back read before its event,
a device storage let go before the copy out ran, a copy back handed to backward without being
recorded on its stream. Removing any of those three from offload.py fails these tests (checked
by hand; the last two tests keep the emulation itself honest).

What this cannot check: the compute stream's own order, since it runs synchronously here. A side
stream's wait for the compute stream, and the copy back's wait for the copy out once the compute
stream has waited for it, change nothing in the emulation. Nor does it say anything of timing.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Callable

import pytest
import torch

import remat.torch as rt
from remat.eager.run import offload as offload_run
from test_offload_run import CASES, FAST, _case, _check_exact, _train

POISON = 0xFF  # every float made of these bytes is NaN


class _Event:
    def __init__(self, runtime: "_Runtime") -> None:
        self._runtime = runtime
        self.stream: _Stream | None = None
        self.position = 0

    def record(self, stream: "_Stream | None" = None) -> None:
        self.stream = stream or self._runtime.current
        self.position = len(self.stream.entries)

    def complete(self) -> None:
        if self.stream is None:
            self._runtime.faults.append("waited for an event never recorded")
            return
        self.stream.run_until(self.position)


class _Stream:
    """A queue of work and of waits, run in order when an event after them is waited for."""

    def __init__(self, runtime: "_Runtime", name: str, synchronous: bool = False) -> None:
        self._runtime = runtime
        self.name = name
        self.synchronous = synchronous
        self.entries: list[tuple[str, Any]] = []
        self.done = 0

    def enqueue(self, work: Callable[[], None]) -> None:
        if self.synchronous:
            work()
        else:
            self.entries.append(("run", work))

    def wait_event(self, event: _Event) -> None:
        if self.synchronous:
            event.complete()
        else:
            self.entries.append(("wait", event))

    def wait_stream(self, other: "_Stream") -> None:
        event = _Event(self._runtime)
        event.record(other)
        self.wait_event(event)

    def run_until(self, position: int) -> None:
        while self.done < position:
            kind, item = self.entries[self.done]
            self.done += 1
            if kind == "wait":
                item.complete()
            else:
                item()


class _Runtime:
    """What offload.py reaches through `torch.cuda`, and the bookkeeping the checks read."""

    def __init__(self) -> None:
        self.compute = _Stream(self, "compute", synchronous=True)
        self.current = self.compute
        self.side = (_Stream(self, "copy out"), _Stream(self, "copy in"))
        self.pinned: weakref.WeakSet[torch.UntypedStorage] = weakref.WeakSet()
        self.faults: list[str] = []
        self.deferred = 0
        self.recorded_on_compute = 0

    # torch.cuda's surface, as offload.py calls it
    def Event(self) -> _Event:  # noqa: N802 (torch's name)
        return _Event(self)

    def current_stream(self, device: Any = None) -> _Stream:
        return self.current

    @contextlib.contextmanager
    def stream(self, stream: _Stream):
        previous, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = previous

    def copy(self, destination: torch.Tensor, source: torch.Tensor) -> None:
        """A non_blocking copy on the current stream."""
        self.deferred += 1
        destination.view(torch.uint8).fill_(POISON)
        if source.untyped_storage() in self.pinned:
            read = lambda: source  # noqa: E731 (the host allocator keeps it)
        else:  # device memory: only the stream's own reference to it, a weak one
            storage = weakref.ref(source.untyped_storage())
            meta = (source.dtype, source.storage_offset(), source.size(), source.stride())
            del source

            def read() -> torch.Tensor | None:
                alive = storage()
                if alive is None:
                    return None
                dtype, offset, size, stride = meta
                return torch.empty(0, dtype=dtype).set_(alive, offset, size, stride)

        stream = self.current

        def work() -> None:
            data = read()
            if data is None:
                self.faults.append(f"{stream.name}: read a device storage already let go")
            else:
                _REAL_COPY(destination, data)

        stream.enqueue(work)


_REAL_COPY = torch.Tensor.copy_


class _TorchWithEmulatedCuda:
    """The `torch` offload.py sees: torch itself, but for `cuda` and pinned `empty`."""

    def __init__(self, runtime: _Runtime) -> None:
        self.cuda = runtime
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def empty(self, *args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        tensor = torch.empty(*args, **kwargs)
        if pin_memory:
            self._runtime.pinned.add(tensor.untyped_storage())
        return tensor


@pytest.fixture
def emulated(monkeypatch):
    runtime = _Runtime()
    monkeypatch.setattr(offload_run, "torch", _TorchWithEmulatedCuda(runtime))
    monkeypatch.setattr(offload_run, "_copy_streams", lambda device: runtime.side)

    def copy_(self, source, non_blocking=False):
        if non_blocking and runtime.current is not runtime.compute:
            runtime.copy(self, source)
            return self
        return _REAL_COPY(self, source, non_blocking)

    def record_stream(self, stream):
        runtime.recorded_on_compute += stream is runtime.compute

    monkeypatch.setattr(torch.Tensor, "copy_", copy_)
    monkeypatch.setattr(torch.Tensor, "record_stream", record_stream, raising=False)
    return runtime


def _offloading_run(name: str, below_least: bool):
    """A model of CASES[name] trained with offload=True where it offloads blocks, or below
    keep/recompute's least peak where it moves regions' inputs; and its plain twin's run."""
    model, plain, batch, loss_fn, measured = _case(name)
    least, lowest = measured.least_activation_budget_bytes, measured.least_offload_budget_bytes
    if below_least:
        budget = (lowest + least) // 2
    else:
        budget = least + (measured.no_checkpoint_bytes - least) // 3
    handle = rt.auto_checkpoint(
        model, activation_budget=budget, offload=True, offload_bandwidth=FAST
    )
    got = _train(model, batch, loss_fn, meter=True)
    return handle.plan, got, _train(plain, batch, loss_fn)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("below_least", [False, True], ids=["blocks", "inputs"])
def test_the_cuda_branch_orders_every_copy_and_trains_bit_for_bit(emulated, name, below_least):
    plan, got, want = _offloading_run(name, below_least)
    moved = plan.inputs_offloaded if below_least else plan.offloaded
    assert moved, plan
    assert emulated.deferred > 0  # the copies took the side streams
    assert emulated.faults == []
    _check_exact(got, want)
    assert max(got[2]) <= plan.predicted_peak_bytes  # the device storages did go
    assert emulated.recorded_on_compute > 0  # copies back, allocated on a side stream


def test_the_emulation_catches_a_storage_let_go_before_its_copy_out_ran(emulated, monkeypatch):
    """The emulation's own check: without the compute stream's wait in release(), the copy out
    reads a storage the allocator may already have given to the next kernel."""

    def release_without_waiting(stored):
        if stored.moved:
            stored.resident = None

    monkeypatch.setattr(offload_run._Stored, "release", release_without_waiting)
    _, got, want = _offloading_run("mlp", below_least=False)
    assert any("already let go" in fault for fault in emulated.faults), emulated.faults
    assert not all(torch.isfinite(g).all() for g in got[1][-1])


def test_the_emulation_catches_a_copy_back_read_before_it_ran(emulated, monkeypatch):
    """The emulation's own check: without the wait in on_device(), backward reads the copy
    back's buffer before the copy ran."""
    original = offload_run._Stored.on_device

    def on_device_without_waiting(stored):
        stored.in_event = None
        if stored.resident is None:
            stored.prefetch()
            stored.in_event = None
        return original(stored)

    monkeypatch.setattr(offload_run._Stored, "on_device", on_device_without_waiting)
    _, got, want = _offloading_run("mlp", below_least=False)
    assert not all(torch.isfinite(g).all() for g in got[1][-1])
