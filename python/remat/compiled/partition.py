"""One knapsack plan turned into the forward and backward graphs torch's partitioner would emit.

torch's ``choose_saved_values_set`` hands a knapsack solver the recomputable candidates; the
plan it gets back becomes a set of nodes it may recompute (``dont_ban``), a min-cut
(``solve_min_cut`` with the aggressive options) picks the saved values, and
``_extract_fwd_bwd_modules`` cuts the joint graph. This module runs those same steps for a
candidate plan, without changing the joint graph, so its peak can be predicted before torch
commits to it. By default the min-cut's maximum flow comes from remat's core (min_cut.py) and
the split from split.py, both exact reproductions of torch's steps at a tenth of their time
(bench/compile_planning.py); ``fast=False`` runs torch's own. These are torch internals:
``require_partitioner_internals`` names what is missing on a torch that lacks them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Sequence

import torch
import torch.fx as fx
from torch._functorch import config as functorch_config
from torch._functorch import partitioners

from .liveness import StepPeak, step_peak, storages_of
from .min_cut import fast_min_cut
from .split import JointSplit

_INTERNALS = (
    "MinCutOptions",
    "solve_min_cut",
    "_extract_fwd_bwd_modules",
    "reordering_to_mimic_autograd_engine",
    "is_sym_node",
)


def require_partitioner_internals() -> None:
    missing = [name for name in _INTERNALS if not hasattr(partitioners, name)]
    if missing:
        raise RuntimeError(
            "remat.torch.use(memory_budget=...): this torch's partitioner lacks "
            f"{', '.join(missing)}, which remat needs to predict the peak of each plan"
        )


def forward_output_count(joint_graph: fx.Graph) -> int:
    """How many of the joint graph's outputs belong to the forward: the ones before the first
    gradient, from the output descriptors AOTAutograd attaches."""
    try:
        from torch._functorch._aot_autograd.descriptors import GradAOTOutput
    except ImportError as error:
        raise RuntimeError(
            "remat.torch.use(memory_budget=...): this torch has no AOTAutograd output "
            "descriptors, so the forward outputs cannot be told from the gradients"
        ) from error

    output = next(iter(joint_graph.find_nodes(op="output")))
    descs = output.meta.get("desc")
    if not descs:
        raise RuntimeError(
            "remat.torch.use(memory_budget=...): the joint graph's outputs carry no descriptors "
            "('desc' meta), so the forward outputs cannot be told from the gradients"
        )
    import torch.utils._pytree as pytree

    descs = pytree.tree_leaves(descs)
    for index, desc in enumerate(descs):
        if isinstance(desc, GradAOTOutput):
            return index
    return len(descs)


def aggressive_options() -> Any:
    """The min-cut options torch's knapsack path uses (choose_saved_values_set)."""
    config = functorch_config
    options = partitioners.MinCutOptions(
        ban_if_used_far_apart=config.ban_recompute_used_far_apart,
        ban_if_long_fusible_chains=config.ban_recompute_long_fusible_chains,
        ban_if_materialized_backward=config.ban_recompute_materialized_backward,
        ban_if_not_in_allowlist=config.ban_recompute_not_in_allowlist,
        ban_if_reduction=config.ban_recompute_reductions,
    )
    return replace(
        options,
        ban_if_used_far_apart=False,
        ban_if_long_fusible_chains=False,
        ban_if_materialized_backward=False,
        ban_if_not_in_allowlist=False,
    )


@dataclass(frozen=True)
class Partition:
    saved_names: frozenset[str]  # the saved values' node names: equal sets, equal partitions
    peak: StepPeak
    offloaded: frozenset[str] = frozenset()  # of those, the ones moved to the host


class Partitioner:
    """Partitions one joint graph for any set of recomputed candidates.

    ``fast`` (the default) takes the min-cut's maximum flow from remat's core and splits the
    joint graph with split.JointSplit, both exact reproductions of torch's steps; off, torch's
    own networkx min-cut and graph split run. ``check`` runs both and raises AssertionError
    where they differ (the tests)."""

    def __init__(
        self, joint_graph: fx.Graph, node_info: Any, *, fast: bool = True, check: bool = False
    ) -> None:
        require_partitioner_internals()
        self.joint_graph = joint_graph
        self.joint_module = joint_graph.owning_module
        if self.joint_module is None:
            raise RuntimeError("remat.torch.use(memory_budget=...): the joint graph has no module")
        self.node_info = node_info
        self.num_fwd_outputs = forward_output_count(joint_graph)
        self.options = aggressive_options()
        # What this torch's partitioner offers, looked up once rather than per candidate.
        self._is_opaque = _opaque_test()
        self._extract_accepts = _parameters(partitioners._extract_fwd_bwd_modules)
        self._by_saved: dict[tuple[frozenset[str], frozenset[str]], Partition] = {}
        self.fast, self.check = fast or check, check
        self._split = JointSplit(self.joint_module, self.num_fwd_outputs) if self.fast else None
        self._storages: dict[fx.Node, dict[int, int]] = {}  # per node, across the candidates
        self._sizes: dict[fx.Node, int] = {}  # the min-cut's node sizes, across the candidates
        self.fast_splits = 0  # candidates split by JointSplit rather than torch
        # Where predicting the candidates' peaks goes, in seconds: the min-cut that picks the
        # saved values, the split into forward and backward graphs, the liveness walk.
        self.seconds = {"min_cut": 0.0, "split": 0.0, "liveness": 0.0}
        # For lower_bound: the storages of the graph's inputs (not counted by the walk), and
        # the forward's outputs to the user (live at the forward's end with what it saves).
        self._input_keys = set(storages_of(joint_graph.find_nodes(op="placeholder")))
        output = next(iter(joint_graph.find_nodes(op="output")))
        import torch.utils._pytree as pytree

        flat = pytree.arg_tree_leaves(*output.args)
        self._user_outputs = [n for n in flat[: self.num_fwd_outputs] if isinstance(n, fx.Node)]

    def __call__(self, recomputed: Sequence[fx.Node]) -> Partition:
        return self.partition_saving(self.saved_values(recomputed))

    def saved_values(self, recomputed: Sequence[fx.Node]) -> list[fx.Node]:
        """What the min-cut saves when ``recomputed`` may be recomputed."""
        from torch.utils._ordered_set import OrderedSet

        started = time.perf_counter()
        if self.fast:
            with fast_min_cut(self._sizes):
                saved_values, _ = partitioners.solve_min_cut(
                    self.joint_graph, self.node_info, self.options, OrderedSet(recomputed)
                )
        if not self.fast or self.check:
            torch_saved, _ = partitioners.solve_min_cut(
                self.joint_graph, self.node_info, self.options, OrderedSet(recomputed)
            )
            if self.check and list(torch_saved) != list(saved_values):
                raise AssertionError(
                    "remat's min-cut saves "
                    f"{sorted(n.name for n in saved_values)}, networkx's "
                    f"{sorted(n.name for n in torch_saved)}"
                )
            saved_values = torch_saved
        self.seconds["min_cut"] += time.perf_counter() - started
        return list(saved_values)

    def lower_bound(self, saved_values: Sequence[fx.Node]) -> int:
        """A floor under the step peak of the partition saving ``saved_values``, without the
        split: the forward returns the saved tensors and its outputs, so all of them are live at
        its end (those on an input's storage aside, which the walk does not count)."""
        found = storages_of([*saved_values, *self._user_outputs])
        return sum(nbytes for key, nbytes in found.items() if key not in self._input_keys)

    def predict(
        self, recomputed: Sequence[fx.Node], budget: int | None, offload: bool = False
    ) -> Partition | None:
        """The partition of the plan recomputing ``recomputed`` (with ``offload``, its
        offloadable saved values moved to the host); None, without the split, when a lower
        bound on its peak is already above ``budget`` (it cannot fit)."""
        saved = self.saved_values(recomputed)
        moved = self.offloadable(saved) if offload else []
        if budget is not None:
            staying = [node for node in saved if node not in moved]
            if self.lower_bound(staying) > budget:
                return None
        return self._partition(saved, moved)

    def partition_saving(self, saved_values: list[fx.Node], offload: bool = False) -> Partition:
        """The partition that saves exactly ``saved_values`` (torch's choice or a min-cut's);
        with ``offload``, those of them torch's activation offloading accepts (offloadable)
        moved to the host."""
        return self._partition(saved_values, self.offloadable(saved_values) if offload else [])

    def _partition(self, saved_values: list[fx.Node], moved: list[fx.Node]) -> Partition:
        # Keyed by what moves, not by whether offloading was asked: a plan with nothing
        # offloadable is the same partition either way, predicted once.
        names = frozenset(node.name for node in saved_values)
        offloaded = frozenset(node.name for node in moved)
        key = (names, offloaded)
        if key not in self._by_saved:
            peak = self._peak(saved_values, offloaded)
            self._by_saved[key] = Partition(names, peak, offloaded)
        return self._by_saved[key]

    def offloadable(self, saved_values: Sequence[fx.Node]) -> list[fx.Node]:
        """The saved activations torch's enable_activation_offloading would move when tagged
        (its can_offload: not a view, not a getitem, contiguous, not a forward output to the
        user); the graph's inputs (parameters, the user's tensors) are never tagged."""
        from torch._functorch._activation_offloading.activation_offloading import can_offload
        from torch.utils._ordered_set import OrderedSet

        outputs = OrderedSet([*saved_values, *self._user_outputs])
        user = OrderedSet(self._user_outputs)
        static = OrderedSet(self.node_info.static_lifetime_input_nodes or ())
        return [
            node
            for node in saved_values
            if node.op != "placeholder"
            and isinstance(node.meta.get("val"), torch.Tensor)
            and can_offload(node, outputs, user, static)
        ]

    def _peak(self, saved_values: list[fx.Node], offloaded: frozenset[str]) -> StepPeak:
        sym = [n for n in saved_values if partitioners.is_sym_node(n)]
        opaque = [n for n in saved_values if self._is_opaque(n)]
        fast = None
        if self._split is not None and not sym and not opaque:
            started = time.perf_counter()
            split = self._split.split(saved_values)
            walked = time.perf_counter()
            self.seconds["split"] += walked - started
            if split is not None:
                self.fast_splits += 1
                fast = step_peak(
                    *split, self.num_fwd_outputs, storages=self._storages, offloaded=offloaded
                )
                self.seconds["liveness"] += time.perf_counter() - walked
        if fast is not None and not self.check:
            return fast
        exact = self._torch_peak(saved_values, sym, opaque, offloaded)
        if fast is not None and fast != exact:
            raise AssertionError(
                f"remat's split predicts {fast}, torch's {exact}, saving "
                f"{sorted(n.name for n in saved_values)}"
            )
        return exact

    def _torch_peak(
        self,
        saved_values: list[fx.Node],
        sym: list[fx.Node],
        opaque: list[fx.Node],
        offloaded: frozenset[str],
    ) -> StepPeak:
        tensors = [n for n in saved_values if n not in sym and n not in opaque]
        # Keyword arguments torch added over releases (2.11 lacks saved_opaque_nodes).
        optional = {
            "saved_opaque_nodes": opaque,
            "static_lifetime_input_nodes": self.node_info.static_lifetime_input_nodes,
        }
        accepted = self._extract_accepts
        if opaque and "saved_opaque_nodes" not in accepted:
            raise RuntimeError(
                "remat.torch.use(memory_budget=...): the graph saves opaque objects, which this "
                "torch's _extract_fwd_bwd_modules cannot take"
            )
        started = time.perf_counter()
        assert self.joint_module is not None  # set by the partitioner before it asks
        forward, backward = partitioners._extract_fwd_bwd_modules(
            self.joint_module,
            tensors,
            saved_sym_nodes=sym,
            num_fwd_outputs=self.num_fwd_outputs,
            **{name: value for name, value in optional.items() if name in accepted},
        )
        backward = partitioners.reordering_to_mimic_autograd_engine(backward)
        split = time.perf_counter()
        self.seconds["split"] += split - started
        peak = step_peak(forward, backward, self.num_fwd_outputs, offloaded=offloaded)
        self.seconds["liveness"] += time.perf_counter() - split
        return peak


def _parameters(function: Any) -> set[str]:
    import inspect

    return set(inspect.signature(function).parameters)


def _opaque_test() -> Any:
    try:
        from torch._functorch._aot_autograd.graph_compile import is_opaque_node
    except ImportError:
        return lambda node: False
    return is_opaque_node
