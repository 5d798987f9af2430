"""Op-level (selective) plans under torch.compile: the plan holds when the model or its blocks are
compiled, past the recompile limit, and the policy realigns on ops traced otherwise."""

from __future__ import annotations

import copy
import sys
import warnings

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
from remat import eager as remat_eager  # noqa: E402
from remat.eager import policy as sac_policy  # noqa: E402
from remat.eager._runtime import _PreservedState  # noqa: E402
from remat.eager.measuring import menu as measure_menu  # noqa: E402
from remat.eager.measuring import ops as measure_ops  # noqa: E402
from remat.eager.run.contexts import plan_contexts  # noqa: E402
from sac_layers import _flop_like_op_times, layer_and_input


@pytest.mark.parametrize("compiled", ["blocks", "model"])
def test_op_level_plans_under_torch_compile(compiled, monkeypatch):
    """auto_checkpoint's op-level plan with the blocks (or the whole model) under
    torch.compile (AOTAutograd, eager kernels): the first step measures eagerly (its recording
    is never traced), later steps run compiled with the same plan. Gradients equal the eager,
    uncompiled model's bit for bit; no op diverges from the profile; the only graph break is
    the first step's measuring call (planned steps trace whole); no recompiles after the first
    planned step; SAC's policy reaches the partitioner: a selective block's compiled forward saves only
    ops the plan keeps (tagged MUST_SAVE), at most the plan's held bytes; a whole region saves
    none of its ops; and the compiled step saves no more than the eager one."""

    import torch._dynamo
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.backends.debugging import boxed_nop
    from torch._dynamo.utils import counters
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch.utils.checkpoint import CheckpointPolicy

    import remat.torch as rt

    _flop_like_op_times(monkeypatch)
    torch.manual_seed(0)
    model, blocks, tokens = models.make_llama(depth=4, width=64, heads=4, seq=32, batch=2)
    measured = rt.measure(model, tokens, verbose=False)
    least, everything = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
    budget = least + int(0.35 * (everything - least))
    params = list(model.parameters())

    def grads(run):
        for p in params:
            p.grad = None
        models.loss(run(tokens)).backward()
        return [p.grad.clone() for p in params]

    reference = grads(model)

    saved_by_graph = []  # per compiled forward graph: (policy, bytes) of each op output saved

    def partition(joint, inputs, **kwargs):
        forward, backward = min_cut_rematerialization_partition(joint, inputs, **kwargs)
        needed = {n.name for n in backward.graph.nodes if n.op == "placeholder"}
        outputs = next(n for n in forward.graph.nodes if n.op == "output").args[0]
        saved = [
            (
                n.meta.get("recompute"),
                n.meta["val"].numel() * n.meta["val"].element_size(),
                n.meta.get("ac_graph_id"),
            )
            for n in outputs
            if isinstance(n, torch.fx.Node)
            and n.op == "call_function"
            and n.name in needed
            and isinstance(n.meta.get("val"), torch.Tensor)
        ]
        saved_by_graph.append(saved)
        return forward, backward

    backend = aot_autograd(fw_compiler=boxed_nop, bw_compiler=boxed_nop, partition_fn=partition)
    torch._dynamo.reset()
    counters.clear()
    handle = rt.auto_checkpoint(model, activation_budget=budget, granularity="op")
    originals = list(blocks)
    if compiled == "blocks":
        for i, block in enumerate(originals):
            blocks[i] = torch.compile(block, backend=backend)
        run = model
    else:
        run = torch.compile(model, backend=backend)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first = grads(run)  # measures (eagerly) and plans
            plan = handle.plan
            saved_by_graph.clear()
            second = grads(run)
            graphs = counters["stats"]["unique_graphs"]
            third = grads(run)
        assert counters["stats"]["unique_graphs"] == graphs, "recompiled after the plan"
        assert not [str(w.message) for w in caught if "remat" in str(w.message)]
        for grads_ in (first, second, third):
            assert all(torch.equal(a, b) for a, b in zip(grads_, reference))
        # The measuring call, only in the first step; planned steps trace without a break.
        reasons = [reason for reason in counters["graph_break"]]
        assert all("compiler.disable" in r for r in reasons), "\n---\n".join(reasons)
        assert plan_contexts(plan), plan  # some region keeps some of its ops

        # Saved op outputs by checkpoint region (torch numbers its regions in call order).
        by_region: dict[int, list] = {}
        for saved in saved_by_graph:
            for policy, nbytes, region in saved:
                if policy is not None:
                    by_region.setdefault(region, []).append((policy, nbytes))
        regions = [(first_, option) for (first_, _, _), option in zip(plan.regions, plan.options)]
        selective_regions = [r for i, r in enumerate(regions) if plan.keeps_ops(i)]
        assert len(by_region) == len(selective_regions), (saved_by_graph, plan)
        musts = (CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_SAVE)
        for region, (first_, option) in zip(sorted(by_region), selective_regions):
            saved = by_region[region]
            assert all(p in musts for p, _ in saved), saved
            held = plan.profile.layers[first_].options[option][0]
            assert 0 < sum(b for _, b in saved) <= held

        # (The meter's saved-tensor hooks are seen by dynamo: this step may recompile.)
        with rt.SavedTensorMeter(model) as compiled_meter:
            assert all(torch.equal(a, b) for a, b in zip(grads(run), reference))
        handle.remove()
        handle.reinstall()
        for i, block in enumerate(originals):
            blocks[i] = block
        with rt.SavedTensorMeter(model) as eager_meter:
            assert all(torch.equal(a, b) for a, b in zip(grads(model), reference))
        assert handle.plan is plan
        assert compiled_meter.peak_bytes <= eager_meter.peak_bytes
    finally:
        handle.remove()
        for i, block in enumerate(originals):
            blocks[i] = block
        torch._dynamo.reset()


def test_blocks_compiled_one_by_one_past_the_recompile_limit_are_said_to_run_eagerly():
    # torch.compile traces remat's block wrapper once per block call and keeps at most
    # recompile_limit graphs of it: past 8 blocks the rest ran eagerly, without a word.
    import torch._dynamo

    limit = torch._dynamo.config.recompile_limit
    model = nn.Module()
    model.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(limit + 2))
    model.forward = lambda x: [x := torch.tanh(layer(x)) for layer in model.layers][-1]
    handle = remat_eager.auto_checkpoint(model, activation_budget=2**30, blocks=list(model.layers))
    for i, layer in enumerate(model.layers):
        model.layers[i] = torch.compile(layer, backend="eager")
    model(torch.randn(4, 8)).sum().backward()
    assert any(f"recompile_limit = {limit}" in w for w in handle.warnings), handle.warnings


def test_a_model_compiled_before_its_first_step_is_traced_whole_afterwards():
    # The first step's measuring call breaks the graph inside the model's loop over its blocks,
    # and torch.compile skipped that frame for good: later steps compiled remat's block wrapper
    # once per block call, and past recompile_limit the blocks ran eagerly.
    import torch._dynamo
    from torch._dynamo.utils import counters

    limit = torch._dynamo.config.recompile_limit
    torch.manual_seed(0)
    model = _LoopModel(limit + 4)
    reference = copy.deepcopy(model)
    x = torch.randn(8, 16)
    reference(x).sum().backward()
    torch._dynamo.reset()
    counters.clear()
    handle = remat_eager.auto_checkpoint(model, activation_budget=2**30)
    compiled = torch.compile(model, backend="aot_eager")
    try:
        new_graphs = []
        for _ in range(3):
            before = counters["stats"]["unique_graphs"]
            model.zero_grad(set_to_none=True)
            compiled(x).sum().backward()
            new_graphs.append(counters["stats"]["unique_graphs"] - before)
        assert new_graphs[1:] == [1, 0], new_graphs  # one graph of the whole forward
        assert not [w for w in handle.warnings if "recompile_limit" in w]
        for a, b in zip(model.parameters(), reference.parameters()):
            assert torch.equal(a.grad, b.grad)
    finally:
        handle.remove()
        torch._dynamo.reset()


class _LoopModel(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)) for _ in range(depth)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return x


def test_policy_realigns_on_ops_traced_otherwise_under_torch_compile():
    """What differs under torch.compile is said, not hidden: tracing dispatches CPU dropout as
    aten.native_dropout where eager (and so the profile) ran empty_like, bernoulli_, div_ and
    mul. The policy warns, re-computes the differing ops and keeps the plan's ops after them
    (in eager, a difference re-computes everything after it); gradients stay exact."""
    import torch._dynamo

    layer, h = layer_and_input("gpt")
    with _PreservedState([layer], {h.device}):
        ops = measure_ops.profile_ops(layer, (h,), {}, set(), repeats=0)
    entry = measure_menu.menu(ops)[-1]  # caches the most
    names = tuple(op.name for op in ops.ops)
    policies = []

    def contexts():
        policies.append(sac_policy._Policy(names, entry.cached, "gpt block"))
        return create_selective_checkpoint_contexts(policies[-1])

    def run(x):
        return checkpoint(layer, x, use_reentrant=False, context_fn=contexts)

    torch.manual_seed(5)
    reference = torch.autograd.grad(layer(h).sum(), [h, *layer.parameters()])
    torch._dynamo.reset()
    try:
        compiled = torch.compile(run, backend="aot_eager")
        torch.manual_seed(5)
        with pytest.warns(RuntimeWarning, match="native_dropout.*realigns"):
            out = compiled(h)
        grads = torch.autograd.grad(out.sum(), [h, *layer.parameters()])
    finally:
        torch._dynamo.reset()
    assert all(torch.equal(a, b) for a, b in zip(grads, reference))
    first_dropout = min(i for i, name in enumerate(names) if "bernoulli" in name)
    assert policies  # one per trace AOTAutograd makes of the region
    for policy in policies:
        assert policy.realigned and not policy.diverged
        assert set(policy.kept) <= entry.cached
        assert any(i > first_dropout for i in policy.kept), (policy.kept, first_dropout)
