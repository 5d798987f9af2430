"""Op-level (selective) checkpointing: each layer's menu must say what torch's SAC really does.

For every menu entry of a layer of the MLP, GPT-style (dropout), Llama-style and ResNet-style
models: gradients equal the layer without checkpointing (torch.equal), the bytes SAC caches
equal the entry's held bytes, and the ops SAC re-runs in backward are the ones the entry's
re-run time counts."""

from __future__ import annotations

import sys

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import SAC_IGNORED_OPS, checkpoint, create_selective_checkpoint_contexts

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402

from remat import eager as remat_eager  # noqa: E402
from remat.eager import selective  # noqa: E402
from remat.eager._runtime import _PreservedState  # noqa: E402
from remat.saved_memory import storage_key  # noqa: E402


def layer_and_input(name: str):
    torch.manual_seed(0)
    if name == "gpt":
        model, blocks, x = models.make_gpt(depth=2, width=32, heads=4, seq=16, batch=2, dropout=0.2)
        h = model.prologue(x)
    elif name == "llama":
        model, blocks, x = models.make_llama(depth=2, width=64, heads=4, seq=16, batch=2)
        h = model.prologue(x)
    elif name == "resnet":
        model, blocks, x = models.make_resnet(per_stage=1, batch=2, size=8)
        h = model.prologue(x)
    else:
        model, blocks, x = models.make_mlp(depth=2, width=32, batch=8)
        h = x
    return blocks[0], h.detach().requires_grad_()


class _Executed(TorchDispatchMode):
    """Counts the ops that really run (below SAC's mode: cached ones never reach it)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func not in SAC_IGNORED_OPS:
            self.names.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("name", ["mlp", "gpt", "llama", "resnet"])
def test_menu_matches_what_sac_caches_and_reruns(name):
    layer, h = layer_and_input(name)
    with _PreservedState([layer], {h.device}):
        ops = selective.profile_ops(layer, (h,), {}, set(), repeats=1)
    entries = selective.menu(ops)
    assert entries[0].held_bytes == 0 and len(entries) >= 2
    assert all(a.held_bytes < b.held_bytes for a, b in zip(entries, entries[1:]))
    assert all(a.recompute_seconds > b.recompute_seconds for a, b in zip(entries, entries[1:]))
    rng = torch.random.get_rng_state()
    torch.manual_seed(5)
    reference = torch.autograd.grad(layer(h).sum(), [h, *layer.parameters()])
    names = tuple(op.name for op in ops.ops)
    for entry in entries:
        policy = selective._Policy(names, entry.cached, name)
        executed = _Executed()

        def contexts():
            forward, recompute = create_selective_checkpoint_contexts(policy)
            return forward, _Stacked(executed, recompute)

        torch.manual_seed(5)
        out = checkpoint(
            layer, h, use_reentrant=False, preserve_rng_state=True, context_fn=contexts
        )
        outputs = {storage_key(out)}  # the layer's output: held anyway, as the boundary
        grads = torch.autograd.grad(out.sum(), [h, *layer.parameters()])
        assert all(torch.equal(a, b) for a, b in zip(grads, reference)), entry
        assert sum(k[2] for k in policy.cached_storages - outputs) == entry.held_bytes
        rerun = [i for i in range(ops.last_needed + 1) if i not in entry.cached]
        assert executed.names == [names[i] for i in rerun], entry
        predicted = sum(ops.ops[i].seconds for i in rerun)
        assert entry.recompute_seconds == pytest.approx(predicted)
    torch.random.set_rng_state(rng)


class _Stacked:
    """Enters the counting mode first, then SAC's: SAC's mode sees each op first, and only the
    ops it re-computes reach the counter."""

    def __init__(self, below: TorchDispatchMode, above: TorchDispatchMode) -> None:
        self.below, self.above = below, above

    def __enter__(self):
        self.below.__enter__()
        self.above.__enter__()

    def __exit__(self, *exc):
        self.above.__exit__(*exc)
        self.below.__exit__(*exc)


def test_random_views_and_late_ops_are_never_cached():
    layer, h = layer_and_input("gpt")
    with _PreservedState([layer], {h.device}):
        ops = selective.profile_ops(layer, (h,), {}, set(), repeats=0)
    reasons = {op.why_not for op in ops.ops if not op.cacheable}
    assert {"random", "view or in-place", "not re-run"} <= reasons
    assert all(not op.cacheable for op in ops.ops if "dropout" in op.name or "bernoulli" in op.name)
    table = selective.describe(ops, selective.menu(ops)[-1])
    assert table.startswith("keeps ") and f"of {len(ops.ops)} ops" in table


def test_op_level_plans_fit_measured_with_the_cache_counted():
    """A chain of Llama-style blocks planned at op level: the meter counts SAC's cache too, and
    measured <= predicted <= budget with selective regions in the plan; gradients exact."""
    import remat.torch as rt

    torch.manual_seed(0)
    model, blocks, tokens = models.make_llama(depth=4, width=64, heads=4, seq=32, batch=2)
    h = model.prologue(tokens).detach().requires_grad_()
    blocks = list(blocks)
    top = rt.plan(blocks, h, memory_budget=2**40, tune=False)
    used = 0
    for fraction in (0.6, 0.35, 0.15):
        budget = top.minimum_budget_bytes + int(
            fraction * (top.no_checkpoint_bytes - top.minimum_budget_bytes)
        )
        plan = rt.plan(blocks, h, memory_budget=budget, tune=False)
        used += sum(option >= 0 for option in plan.options)
        torch.manual_seed(3)
        reference = torch.autograd.grad(
            models.loss(model.epilogue(_plain(blocks, h))),
            [h, *model.parameters()],
            allow_unused=True,
        )
        torch.manual_seed(3)
        with rt.SavedTensorMeter(model) as meter:
            out = remat_eager.run_plan(blocks, plan, h)
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                loss = models.loss(model.epilogue(out))
            grads = torch.autograd.grad(loss, [h, *model.parameters()], allow_unused=True)
        assert meter.peak_bytes <= plan.predicted_peak_bytes <= budget, plan
        assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(grads, reference))
    assert used > 0, "op-level options should appear at some budget"


def _plain(blocks, h):
    for block in blocks:
        h = block(h)
    return h
