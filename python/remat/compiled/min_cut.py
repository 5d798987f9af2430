"""networkx.minimum_cut's answer from remat's C++ maximum flow, for torch's solve_min_cut.

torch's ``solve_min_cut`` builds a networkx graph and takes ``nx.minimum_cut``'s partition:
the nodes that can reach the sink in the residual graph of a maximum flow, and the rest. That
set is the same for every maximum flow, and the capacities torch sets are integers (node sizes,
``INT_INF``) or infinite, so remat's flow (``_core.min_cut``, exact in 64-bit integers) gives
the same partition as networkx's preflow-push, in a fraction of its time. Anything else (a
non-integral or negative capacity, sums past 2^53, an unbounded path, other arguments) goes to
networkx itself, which also raises the errors torch expects.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator

from .. import _core


def minimum_cut(graph: Any, source: Any, sink: Any, *args: Any, **kwargs: Any) -> Any:
    """nx.minimum_cut(graph, source, sink) for a DiGraph with integral capacities."""
    import networkx as nx
    from networkx.algorithms.flow.maxflow import minimum_cut as original

    if args or kwargs or not isinstance(graph, nx.DiGraph) or graph.is_multigraph():
        return original(graph, source, sink, *args, **kwargs)
    if source not in graph or sink not in graph or source == sink:
        return original(graph, source, sink)
    names = list(graph)
    index = {name: i for i, name in enumerate(names)}
    tails, heads, capacities = [], [], []
    unbounded = _core.UNBOUNDED_CAPACITY
    for u, neighbours in graph.adjacency():
        tail = index[u]
        for v, data in neighbours.items():
            capacity = data.get("capacity", math.inf)
            if capacity == math.inf:
                capacity = unbounded
            elif isinstance(capacity, float):
                if not capacity.is_integer() or capacity < 0:
                    return original(graph, source, sink)
                capacity = int(capacity)
            elif not isinstance(capacity, int) or capacity < 0:
                return original(graph, source, sink)
            tails.append(tail)
            heads.append(index[v])
            capacities.append(capacity)
    try:
        is_unbounded, value, sink_side = _core.min_cut(
            len(names), tails, heads, capacities, index[source], index[sink]
        )
    except (ValueError, OverflowError, TypeError):  # sums past 2^53, ints past 64 bits
        return original(graph, source, sink)
    if is_unbounded:
        return original(graph, source, sink)  # raises NetworkXUnbounded, as torch expects
    near_sink = {name for name, side in zip(names, sink_side) if side}
    return value, (set(names) - near_sink, near_sink)


class _ConfigSnapshot:
    """torch._functorch.config read once per option: solve_min_cut asks it per node and edge
    (tens of thousands of reads, each through the config module's __getattr__), and nothing
    changes it while a min-cut runs."""

    def __init__(self, config: Any) -> None:
        self._config = config

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._config, name)
        setattr(self, name, value)
        return value


@contextlib.contextmanager
def fast_min_cut(sizes: dict[Any, int]) -> Iterator[None]:
    """While the block runs, torch's solve_min_cut takes its partition from ``minimum_cut``
    (it looks nx.minimum_cut up at each call), reads its config options once, and sizes each
    node once across calls (``sizes``: node -> bytes, kept by the caller for one joint graph;
    a node's size is its output's, the same for every plan)."""
    import networkx as nx
    from torch._functorch import partitioners

    original = (nx.minimum_cut, partitioners.config, partitioners._size_of)
    size_of = original[2]

    def cached_size_of(node: Any) -> int:
        found = sizes.get(node)
        if found is None:
            found = sizes[node] = size_of(node)
        return found

    nx.minimum_cut = minimum_cut
    partitioners.config = _ConfigSnapshot(original[1])  # type: ignore[assignment]
    partitioners._size_of = cached_size_of
    try:
        yield
    finally:
        nx.minimum_cut, partitioners.config, partitioners._size_of = original
