"""torch's forward/backward split of a joint graph, as node lists, for predicting peaks fast.

Algorithm: what ``partitioners._extract_fwd_bwd_modules`` followed by
``reordering_to_mimic_autograd_engine`` produce, without building graphs. A subgraph keeps, in
the joint graph's order, each node all of whose inputs are valid (a subgraph input, or a kept
node) and that may run on its side (``_must_be_in_forward``/``_must_be_in_backward``), then
drops what neither an output nor an impure node needs (``eliminate_dead_code``). The backward
is cut first with every saved value, saved values it never reads are dropped, and both sides
are cut again; the backward is then reordered as the autograd engine would run it. Each result
is a ``Subgraph`` of the joint graph's own nodes, whose ``val`` metadata the split graphs share,
so the liveness walk gives the same peak.

Time O(N + E) per split for a joint graph of N nodes and E edges, against torch's copy of every
kept node into three new graphs; memory O(N). Source: torch/_functorch/partitioners.py (2.13).

Where the split would need what this module does not model (symbolic sizes, opaque objects,
backward state, activation quantization, an output torch must substitute), ``JointSplit.split``
returns None and the caller splits with torch. tests/python/test_compile_split.py checks both
agree on every candidate plan of the bench models.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx as fx
from torch._functorch import partitioners

from .liveness import Subgraph, input_name


def _impure_random() -> bool:
    """Whether eliminate_dead_code keeps random ops, as it decides at the split."""
    if torch._guards.TracingContext.try_get():
        return bool(torch._inductor.config.fallback_random)
    return True


def _has_symbols(node: fx.Node) -> bool:
    from torch.fx.experimental.symbolic_shapes import free_symbols

    value = node.meta.get("val")
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    try:
        return bool(free_symbols(value))
    except Exception:  # a value free_symbols cannot walk: treat it as symbolic, split with torch
        return True


def _quantizes_activations() -> bool:
    options = getattr(torch._inductor.config, "post_grad_fusion_options", {}) or {}
    return options.get("activation_quantization_aten_pass") is not None


class JointSplit:
    """One joint graph, indexed once; ``split(saved_values)`` for each candidate plan."""

    def __init__(self, joint_module: fx.GraphModule, num_fwd_outputs: int) -> None:
        graph = joint_module.graph
        self.nodes: list[fx.Node] = list(graph.nodes)
        self.index = {node: i for i, node in enumerate(self.nodes)}
        self.inputs: list[tuple[int, ...]] = [
            tuple(self.index[arg] for arg in node.all_input_nodes) for node in self.nodes
        ]
        self.users: list[list[int]] = [[] for _ in self.nodes]
        for i, args in enumerate(self.inputs):
            for a in args:
                self.users[a].append(i)
        impure_random = _impure_random()
        self.impure = [node.op != "output" and node.is_impure(impure_random) for node in self.nodes]
        self.forward_only = [partitioners._must_be_in_forward(n) for n in self.nodes]
        self.backward_only = [partitioners._must_be_in_backward(n) for n in self.nodes]
        fwd_outputs, bwd_outputs, _, _ = partitioners._extract_fwd_bwd_outputs(
            joint_module, num_fwd_outputs=num_fwd_outputs
        )
        self.fwd_outputs, self.bwd_outputs = list(fwd_outputs), list(bwd_outputs)
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        self.primals = [n for n in placeholders if partitioners._is_primal(n)]
        self.tangents = [n for n in placeholders if partitioners._is_tangent(n)]
        self.fwd_seeds = [n for n in placeholders if partitioners._is_fwd_seed_offset(n)]
        self.bwd_seeds = [n for n in placeholders if partitioners._is_bwd_seed_offset(n)]
        # What this module does not model: the caller splits with torch instead.
        self.supported = (
            not any(partitioners._is_backward_state(n) for n in placeholders)
            and all(
                n.op in ("placeholder", "call_function", "get_attr", "output") for n in self.nodes
            )
            and not any(_has_symbols(n) for n in self.nodes)
            and not _quantizes_activations()
        )
        self._copy = torch.ops.aten.copy_.default
        self._wait = getattr(getattr(torch.ops, "_c10d_functional", None), "wait_tensor", None)
        self._forward_valid: list[bool] | None = None
        self._bwd_output_indices = {
            self.index[o] for o in self.bwd_outputs if isinstance(o, fx.Node)
        }

    def split(self, saved_values: Sequence[fx.Node]) -> tuple[Subgraph, Subgraph] | None:
        """(forward, backward) as torch would emit them saving ``saved_values`` (tensors only:
        no symbolic or opaque values); None where torch must split instead."""
        if not self.supported:
            return None
        saved = list(dict.fromkeys(saved_values))
        first = self._extract(saved + self.tangents + self.bwd_seeds, self.bwd_outputs, False)
        if first is None:
            return None
        given, kept, _ = first
        given_set = set(given)
        saved = [n for n in saved if self._read(self.index[n], given_set, kept)]
        if self._forward_valid is None:
            self._forward_valid = self._valid(self.primals + self.fwd_seeds, True)
        forward = self._extract(
            self.primals + self.fwd_seeds, self.fwd_outputs + saved, True, self._forward_valid
        )
        backward = self._extract(saved + self.tangents + self.bwd_seeds, self.bwd_outputs, False)
        if forward is None or backward is None:
            return None
        return self._subgraph(*forward), self._reordered(*backward)

    def _valid(self, inputs: Sequence[fx.Node], forward: bool) -> list[bool]:
        """Per node: whether _extract_graph_with_inputs_outputs copies it (or it is an input)."""
        given = {self.index[n] for n in inputs}
        valid = [False] * len(self.nodes)
        for i, node in enumerate(self.nodes):
            if i in given:
                valid[i] = True
            elif (self.backward_only[i] and forward) or (self.forward_only[i] and not forward):
                continue
            elif node.op == "call_function":
                valid[i] = all(valid[a] for a in self.inputs[i])
            elif node.op == "get_attr":
                valid[i] = True
        return valid

    def _extract(
        self,
        inputs: Sequence[fx.Node],
        outputs: Sequence[Any],
        forward: bool,
        valid: list[bool] | None = None,
    ) -> tuple[list[int], set[int], list[Any]] | None:
        """(inputs, kept nodes after dead-code elimination, outputs) by index; None when an
        output is not valid (torch would substitute one, or fail)."""
        if valid is None:
            valid = self._valid(inputs, forward)
        given = [self.index[n] for n in inputs]
        given_set = set(given)
        roots = [self.index[o] for o in outputs if isinstance(o, fx.Node)]
        if not all(valid[r] for r in roots):
            return None
        kept: set[int] = set()
        stack = roots + [i for i, v in enumerate(valid) if v and self.impure[i]]
        while stack:
            i = stack.pop()
            if i in kept:
                continue
            kept.add(i)
            if i not in given_set:
                stack.extend(self.inputs[i])
        kept.update(given_set)  # placeholders are never eliminated
        return given, kept, list(outputs)

    def _read(self, i: int, given_set: set[int], kept: set[int]) -> bool:
        """Whether the backward reads saved value ``i``: torch drops the saved values whose
        placeholder has no user, or only collective waits that nothing reads."""
        if i in self._bwd_output_indices:
            return True  # the output node reads it
        users = [u for u in self.users[i] if u in kept and u not in given_set]
        if not users:
            return False
        if torch.distributed.is_available() and all(
            self.nodes[u].target is self._wait
            and not any(w in kept and w not in given_set for w in self.users[u])
            and u not in self._bwd_output_indices
            for u in users
        ):
            return False
        return True

    def _subgraph(self, given: list[int], kept: set[int], outputs: list[Any]) -> Subgraph:
        inputs = [self.nodes[i] for i in given]
        given_set = set(given)
        # Kept nodes besides the inputs are valid ones: call_function and get_attr nodes.
        body = [self.nodes[i] for i in sorted(kept) if i not in given_set]
        return Subgraph(inputs=inputs, body=body, outputs=outputs)

    def _reordered(self, given: list[int], kept: set[int], outputs: list[Any]) -> Subgraph:
        """reordering_to_mimic_autograd_engine: from the first node that reads a gradient
        input, each node is run with the part of its inputs' subgraph not run yet, in graph
        order; before it, only copy_ nodes are run."""
        plain = self._subgraph(given, kept, outputs)
        order = list(plain.body)
        position = {node: k for k, node in enumerate(order)}
        # torch's _is_tangent on the backward's placeholders, named after their joint nodes.
        tangents = [n for n in plain.inputs if "tangents" in input_name(n)]
        returned = {o for o in outputs if isinstance(o, fx.Node)}
        first = None
        for tangent in tangents:
            users = [position[u] for u in tangent.users if u in position]
            if tangent in returned:
                users.append(len(order))  # the output node, after the body
            if users and (first is None or min(users) < first):
                first = min(users)
        if first is None:
            return plain
        done: set[fx.Node] = set(plain.inputs)
        body: list[fx.Node] = []

        def run(roots: Sequence[fx.Node]) -> None:
            pending, stack = set(), list(roots)
            while stack:
                current = stack.pop()
                if current in pending or current in done:
                    continue
                pending.add(current)
                stack.extend(current.all_input_nodes)
            for found in sorted(pending, key=position.__getitem__):
                body.append(found)
                done.add(found)

        for node in order[:first]:
            if node.op == "call_function" and node.target is self._copy:
                run([node])
        for node in order[first:]:
            run([node])
        run([o for o in outputs if isinstance(o, fx.Node)])  # the output node's inputs
        return Subgraph(inputs=plain.inputs, body=body, outputs=outputs)
