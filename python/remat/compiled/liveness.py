"""The peak of live bytes of a training step as torch.compile's partitioner emits it.

Algorithm: a liveness walk over the forward graph, then over the backward graph, in node order.
A storage is allocated by the first node that produces a tensor on it and freed after the last
node that reads any tensor on it (views share their base's storage, so they neither allocate nor
end a lifetime early). Storages a graph returns stay live: the forward returns the tensors it
saves for backward and the user's outputs; the backward returns gradients. The backward starts
with the saved tensors, the incoming gradients (tangents) and the forward's outputs live, and
frees each saved tensor after its last use, as AOTAutograd's backward does (it clears the saved
tensors and steals its arguments); ENGINE_RESERVE bytes are added for the autograd engine's own
scalars. Storages of the graph inputs (parameters, the user's inputs)
existed before the step and are not counted.

Time O(N + E) for a graph of N nodes and E edges; memory O(N).

This is the execution order of ``aot_eager``: each node's result is materialized and dropped
after its last use. Inductor fuses pointwise chains and never materializes their intermediates,
so on inductor this is an upper bound up to its reordering; the tests and
``bench/compile_budget.py`` measure both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef


def _hint(value: Any) -> int:
    """An int for a possibly symbolic size (dynamic shapes take their traced hint)."""
    if isinstance(value, int):
        return value
    from torch.fx.experimental import symbolic_shapes

    # optimization_hint in torch 2.13, hint_int before it: neither adds a guard.
    hint = getattr(symbolic_shapes, "optimization_hint", None) or symbolic_shapes.hint_int  # type: ignore[attr-defined]
    return int(hint(value, fallback=4096))


def _tensors(node: fx.Node) -> list[torch.Tensor]:
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, torch.Tensor)]
    return []


def _storages(node: fx.Node) -> dict[int, int]:
    """Storage key -> bytes for every tensor a node produces."""
    found: dict[int, int] = {}
    for tensor in _tensors(node):
        storage = tensor.untyped_storage()
        found[StorageWeakRef(storage).cdata] = _hint(storage.nbytes())
    return found


def storages_of(nodes: Iterable[fx.Node]) -> dict[int, int]:
    """Storage key -> bytes for the distinct storages behind ``nodes``."""
    found: dict[int, int] = {}
    for node in nodes:
        found.update(_storages(node))
    return found


@dataclass(frozen=True)
class GraphWalk:
    peak: int  # most bytes live at once, counting what was live on entry
    held_at_end: int  # bytes of the storages the graph returns that it allocated or was given


@dataclass(frozen=True)
class Subgraph:
    """A graph as the walk sees it: its inputs (placeholders), the nodes it runs in order, and
    its flat outputs (None for a non-tensor output). Nodes may be a joint graph's own nodes,
    which a split graph copies with the same ``val`` metadata (see split.py)."""

    inputs: Sequence[fx.Node]
    body: Sequence[fx.Node]
    outputs: Sequence[Any]

    @staticmethod
    def of(graph: fx.Graph) -> "Subgraph":
        nodes = list(graph.nodes)
        output = next(n for n in reversed(nodes) if n.op == "output")
        return Subgraph(
            inputs=[n for n in nodes if n.op == "placeholder"],
            body=[n for n in nodes if n.op not in ("placeholder", "output")],
            outputs=list(torch.utils._pytree.arg_tree_leaves(*output.args)),
        )


StorageCache = dict[fx.Node, dict[int, int]]


def _cached_storages(node: fx.Node, cache: StorageCache) -> dict[int, int]:
    found = cache.get(node)
    if found is None:
        found = cache[node] = _storages(node)
    return found


def walk_graph(
    graph: fx.Graph | Subgraph,
    live_on_entry: dict[int, int],
    kept: set[int],
    storages: StorageCache | None = None,
    released: set[int] | frozenset[int] = frozenset(),
    arriving: dict[int, int] | None = None,
) -> GraphWalk:
    """Runs the liveness walk over one graph.

    ``live_on_entry``: storages live when the graph starts, freed after their last use here
    unless in ``kept``. ``kept``: storages that outlive the graph whatever it does (the
    parameters, the user's inputs, outputs still held by the caller); never counted unless
    they are also in ``live_on_entry``. ``storages``: a cache of each node's storages.
    ``released``: storages the graph returns that leave the device after their last use here
    (offloaded: the graph returns a host copy). ``arriving``: storages (with their bytes) the
    graph is given on the host and copies to the device just before their first use."""
    sub = graph if isinstance(graph, Subgraph) else Subgraph.of(graph)
    cache: StorageCache = {} if storages is None else storages

    def keys(node: fx.Node) -> dict[int, int]:
        return _cached_storages(node, cache)

    # What the graph returns is never freed, so its last use does not matter.
    output_keys: set[int] = set()
    for arg in sub.outputs:
        if isinstance(arg, fx.Node):
            output_keys.update(keys(arg))
    output_keys -= released
    last_use: dict[int, int] = {}
    for index, node in enumerate(sub.body):
        for arg in node.all_input_nodes:
            for key in keys(arg):
                last_use[key] = index

    live = dict(live_on_entry)
    placeholders: set[int] = set()
    for node in sub.inputs:
        placeholders.update(keys(node))
    total = sum(live.values())
    peak = total
    free_after: dict[int, list[int]] = {}
    for key in live:
        if key not in kept and key not in output_keys:
            free_after.setdefault(last_use.get(key, -1), []).append(key)
    for key in list(free_after.get(-1, [])):  # given but never read: gone at the start
        total -= live.pop(key)
    arrive_at: dict[int, list[int]] = {}
    if arriving:
        first_use: dict[int, int] = {}
        for index, node in enumerate(sub.body):
            for arg in node.all_input_nodes:
                for key in keys(arg):
                    first_use.setdefault(key, index)
        for key in arriving:
            if key in first_use:
                arrive_at.setdefault(first_use[key], []).append(key)
                free_after.setdefault(last_use[key], []).append(key)
    for index, node in enumerate(sub.body):
        for key in arrive_at.get(index, ()):
            live[key] = arriving[key]  # type: ignore[index]
            total += arriving[key]  # type: ignore[index]
        for key, nbytes in keys(node).items():
            if key in live or key in placeholders or key in kept:
                continue
            live[key] = nbytes
            total += nbytes
            if key not in output_keys:
                free_after.setdefault(max(last_use.get(key, index), index), []).append(key)
        peak = max(peak, total)
        for key in free_after.get(index, ()):
            if key in live:
                total -= live.pop(key)
    held = sum(nbytes for key, nbytes in live.items() if key in output_keys)
    return GraphWalk(peak=peak, held_at_end=held)


#: Bytes reserved in the backward for the autograd engine's own small tensors outside both
#: graphs (the seed gradient of a scalar loss and the like): measured 4 bytes on the test models.
ENGINE_RESERVE = 512


@dataclass(frozen=True)
class StepPeak:
    """Predicted bytes of one training step through a compiled forward and backward."""

    peak: int  # max(forward_peak, backward_peak)
    forward_peak: int
    saved: int  # bytes the forward saves for backward, not counting parameters and inputs
    backward_peak: int  # includes the saved bytes, the incoming gradients and the outputs


def input_name(node: fx.Node) -> str:
    """A backward input's placeholder name: a joint graph's placeholder keeps its target, a
    saved value becomes a placeholder named after its node."""
    return str(node.target) if node.op == "placeholder" else node.name


def step_peak(
    forward: fx.GraphModule | Subgraph,
    backward: fx.GraphModule | Subgraph,
    num_user_outputs: int,
    storages: StorageCache | None = None,
    offloaded: frozenset[str] = frozenset(),
) -> StepPeak:
    """Walks the forward, then the backward, of one partition (see the module docstring).

    ``offloaded``: names of saved values torch's activation offloading moves to the host
    (torch._functorch's enable_activation_offloading, synchronous): each leaves the device after
    its last use in the forward and comes back just before its first use in the backward."""
    fwd = forward if isinstance(forward, Subgraph) else Subgraph.of(forward.graph)
    bwd = backward if isinstance(backward, Subgraph) else Subgraph.of(backward.graph)
    cache: StorageCache = {} if storages is None else storages

    def keys_of(nodes: Iterable[fx.Node]) -> dict[int, int]:
        found: dict[int, int] = {}
        for node in nodes:
            found.update(_cached_storages(node, cache))
        return found

    inputs = keys_of(fwd.inputs)
    returned = list(dict.fromkeys(n for n in fwd.outputs if isinstance(n, fx.Node)))
    user_nodes = [arg for arg in fwd.outputs[:num_user_outputs] if isinstance(arg, fx.Node)]
    user = {k: v for k, v in keys_of(user_nodes).items() if k not in inputs}
    staying = [n for n in returned if n not in user_nodes and n.name not in offloaded]
    saved = {k: v for k, v in keys_of(staying).items() if k not in inputs and k not in user}
    # A storage another returned tensor still holds (a view saved beside it) does not leave.
    moved = {
        k: v
        for k, v in keys_of(n for n in returned if n.name in offloaded).items()
        if k not in inputs and k not in user and k not in saved
    }
    forward_walk = walk_graph(fwd, {}, kept=set(inputs), storages=cache, released=set(moved))
    tangents = keys_of(n for n in bwd.inputs if input_name(n).startswith("tangents"))
    on_entry = {**saved, **user, **tangents}
    backward_walk = walk_graph(
        bwd, on_entry, kept=set(inputs) | set(user), storages=cache, arriving=moved
    )
    backward_peak = backward_walk.peak + ENGINE_RESERVE
    return StepPeak(
        peak=max(forward_walk.peak, backward_peak),
        forward_peak=forward_walk.peak,
        saved=sum(saved.values()),
        backward_peak=backward_peak,
    )
