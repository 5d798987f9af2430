"""Inductor's CPU buffers, allocated through torch's dispatcher while remat counts a step.

Inductor's generated Python wrapper allocates each graph's CPU buffers with
``torch._C._dynamo.guards._empty_strided_cpu``, bound in the generated module's namespace as
``empty_strided_cpu``. It bypasses the dispatcher, so no dispatch mode sees those buffers, and a
count of live storages (step_memory.py) would miss them. :func:`buffers_dispatched` binds that
name to ``torch.empty_strided`` for one call of the graph: the same buffers, made where the count
sees them. Where the generated module cannot be found (a C++ wrapper) it says so instead.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

_CPU_ALLOCATION = "empty_strided_cpu"

# Why a CPU count that ran an Inductor graph may fall short.
UNSEEN = (
    "the step ran an Inductor graph on the CPU whose buffers remat's count of live storages "
    "cannot see (its generated code allocates them outside torch's dispatcher, and remat did "
    "not find its Python wrapper: a C++ wrapper, say). On CUDA the allocator counts every byte; "
    "on the CPU, compile with the default Python wrapper or backend='aot_eager'"
)


@contextlib.contextmanager
def buffers_dispatched(graph: Any) -> Iterator[bool]:
    """Inside, the CPU buffers of `graph` (an Inductor CompiledFxGraph) are allocated through
    the dispatcher. Yields whether they are (False: its generated module was not found)."""
    namespace = _generated_namespace(getattr(graph, "current_callable", None))
    if namespace is None:
        yield False
        return
    own = namespace[_CPU_ALLOCATION]
    namespace[_CPU_ALLOCATION] = _dispatched_empty_strided_cpu
    try:
        yield True
    finally:
        namespace[_CPU_ALLOCATION] = own


def _dispatched_empty_strided_cpu(size: Any, stride: Any, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, device="cpu")


def _generated_namespace(function: Any, depth: int = 4) -> dict[str, Any] | None:
    """The globals of the generated module behind an Inductor graph's callable: its own, or
    those of a function it wraps (a bound method, functools.wraps, or a closure)."""
    if function is None or depth < 0:
        return None
    function = getattr(function, "__func__", function)
    namespace = getattr(function, "__globals__", None)
    if namespace is not None and _CPU_ALLOCATION in namespace:
        return namespace
    inner = [getattr(function, "__wrapped__", None)]
    for cell in getattr(function, "__closure__", None) or ():
        try:
            inner.append(cell.cell_contents)
        except ValueError:  # a cell not yet filled
            continue
    for candidate in inner:
        if callable(candidate):
            found = _generated_namespace(candidate, depth - 1)
            if found is not None:
                return found
    return None
