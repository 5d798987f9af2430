"""Op-level (selective) checkpointing: each layer's menu must say what torch's SAC really does.

For every menu entry of a layer of the MLP, GPT-style (dropout), Llama-style and ResNet-style
models: gradients equal the layer without checkpointing (torch.equal), the bytes SAC caches
equal the entry's held bytes, and the ops SAC re-runs in backward are the ones the entry's
re-run time counts."""

from __future__ import annotations

import dataclasses
import sys
import warnings

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import SAC_IGNORED_OPS, checkpoint, create_selective_checkpoint_contexts

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
from remat import eager as remat_eager  # noqa: E402
from remat.eager import policy as sac_policy  # noqa: E402
from remat.eager import table as plan_table  # noqa: E402
from remat.eager._runtime import _PreservedState  # noqa: E402
from remat.eager.measuring import menu as measure_menu  # noqa: E402
from remat.eager.measuring import ops as measure_ops  # noqa: E402
from remat.eager.run.contexts import plan_contexts  # noqa: E402
from remat.saved_memory import storage_key  # noqa: E402
from sac_layers import _flop_like_op_times, layer_and_input


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
        ops = measure_ops.profile_ops(layer, (h,), {}, set(), repeats=1)
    entries = measure_menu.menu(ops)
    assert entries[0].held_bytes == 0 and len(entries) >= 2
    assert all(a.held_bytes < b.held_bytes for a, b in zip(entries, entries[1:]))
    assert all(a.recompute_seconds > b.recompute_seconds for a, b in zip(entries, entries[1:]))
    rng = torch.random.get_rng_state()
    torch.manual_seed(5)
    reference = torch.autograd.grad(layer(h).sum(), [h, *layer.parameters()])
    names = tuple(op.name for op in ops.ops)
    for entry in entries:
        policy = sac_policy._Policy(names, entry.cached, name)
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


@pytest.mark.parametrize("name", ["gpt", "llama"])
def test_modes_cost_is_measured_on_the_layer_and_charged_to_selective_options(name):
    """On CPU each layer's SAC cost is measured on the layer itself; every option that keeps ops
    pays it on top of the ops it re-runs (scaled like every op time), the plain region does not."""
    from remat.eager.measuring.menu import option_seconds

    layer, h = layer_and_input(name)
    with _PreservedState([layer], {h.device}):
        ops = measure_ops.profile_ops(layer, (h,), {}, set(), repeats=1)
    assert ops.replays and ops.modes_seconds is not None
    caching_forward, cached_rerun = ops.modes_seconds
    assert caching_forward > 0 and cached_rerun > 0  # a re-run still runs the layer's Python
    plain_forward = caching_forward / 2  # as if the modes doubled the forward
    forward_extra = caching_forward - plain_forward
    floor = ops.uncached_floor_seconds
    assert 0 < floor < ops.rerun_seconds  # views are never cached, but take little time
    entries = measure_menu.menu(ops)
    for entry in entries:
        seconds = option_seconds(ops, entry, 2.0, plain_forward)
        if entry.cached:
            expected = (entry.recompute_seconds - floor) * 2.0 + forward_extra + cached_rerun
            assert seconds == pytest.approx(expected)
            assert seconds >= forward_extra + cached_rerun
            slower = option_seconds(ops, entry, 2.0, 2 * caching_forward)  # modes cost nothing
            assert slower == pytest.approx(seconds - forward_extra)
        else:
            assert seconds == pytest.approx(entry.recompute_seconds * 2.0)


class _EveryOtherCallDiffers(torch.nn.Module):
    """Data-dependent control flow: every second call runs one more op."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = torch.relu(self.linear(x))
        return y * 2.0 if self.calls % 2 else y


def test_what_goes_off_the_plan_reaches_the_given_warn():
    # auto_checkpoint hands its handle's _warn, so handle.warnings lists a diverging policy too
    # (it went to warnings.warn alone).
    layer, h = layer_and_input("gpt")
    with _PreservedState([layer], {h.device}):
        ops = measure_ops.profile_ops(layer, (h,), {}, set(), repeats=0)
    said: list[str] = []
    contexts = sac_policy.context_fn(ops, measure_menu.menu(ops)[-1], "gpt block", said.append)
    other = nn.Sequential(nn.Linear(h.shape[-1], 8), nn.Tanh())  # not the ops profiled
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing through warnings.warn
        checkpoint(other, h, use_reentrant=False, context_fn=contexts).sum().backward()
    assert len(said) == 1 and "gpt block ran op" in said[0], said


def test_a_layer_sac_does_not_replay_gets_no_selective_options():
    """A layer that does not replay the ops it was profiled with (here every other call runs
    one more op) is found out while it is profiled, without an error or a warning, and is
    planned as a block: under SAC its backward would fail (an op the caching forward did not
    run) or its policy diverge from the plan."""
    from remat.eager.measuring.menu import with_menus
    from remat.eager.types import LayerProfile, Profile

    layer = _EveryOtherCallDiffers()
    x = torch.randn(4, 8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _PreservedState([layer], {x.device}):
            ops = measure_ops.profile_ops(layer, (x,), {}, set(), repeats=1)
    assert not ops.replays and ops.modes_seconds is None
    assert any(op.cacheable for op in ops.ops)  # it would have had a menu
    replaying = dataclasses.replace(ops, replays=True)
    layer_profile = LayerProfile("layer", 1024, 128, False, 1e-3)
    profile = Profile(128, (layer_profile, layer_profile), 0.0)
    planned = with_menus(profile, [ops, replaying])
    assert planned.layers[0].options == () and planned.selective[0] is None
    assert planned.layers[1].options and planned.selective[1] is not None


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
        ops = measure_ops.profile_ops(layer, (h,), {}, set(), repeats=0)
    reasons = {op.why_not for op in ops.ops if not op.cacheable}
    assert {"random", "view or in-place", "not re-run"} <= reasons
    assert all(not op.cacheable for op in ops.ops if "dropout" in op.name or "bernoulli" in op.name)
    table = plan_table.describe(ops, measure_menu.menu(ops)[-1])
    assert table.startswith("keeps ") and f"of {len(ops.ops)} ops" in table


class WritesThroughOut(nn.Module):
    """Accumulates into a fresh tensor through out=, as statistics code does."""

    def __init__(self, width=16):
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        h = self.fc(x)
        with torch.no_grad():
            stats = torch.zeros(x.shape[0], 1)
            torch.add(stats, h.detach().amax(dim=-1, keepdim=True), out=stats)
        return h * stats


def test_a_tensor_written_through_out_is_never_cached():
    # The write went unseen (only positional arguments were read): zeros was cached, and the
    # re-run added the statistics again to the cached, already-updated tensor, so gradients were
    # silently wrong.
    layer, x = WritesThroughOut(), torch.randn(8, 16)
    with _PreservedState([layer], {x.device}):
        ops = measure_ops.profile_ops(layer, (x,), {}, set(), repeats=0)
    zeros = [op for op in ops.ops if op.name.startswith("aten.zeros")]
    assert zeros and all(op.why_not == "mutated later" for op in zeros), ops.ops


class RoutesAndReturnsLogits(nn.Module):
    """A mixture-of-experts layer's shape: returns its output and its router's logits."""

    def __init__(self, width=16):
        super().__init__()
        self.router, self.fc = nn.Linear(width, 4), nn.Linear(width, width)

    def forward(self, x):
        logits = self.router(x)
        h = torch.tanh(self.fc(x)) * logits.softmax(-1).amax(-1, keepdim=True)
        return x + h, logits


def test_ops_that_create_an_output_are_never_cached():
    # They were free items, cached by every entry: the cache held logits that the model's code
    # dropped (measured 57% over the prediction and over the budget), and an output the model
    # changed in place made SAC raise in backward.
    layer, x = RoutesAndReturnsLogits(), torch.randn(8, 16)
    with _PreservedState([layer], {x.device}):
        ops = measure_ops.profile_ops(layer, (x,), {}, set(), repeats=0)
    returned = {i for i, op in enumerate(ops.ops) if op.why_not == "returned"}
    assert len(returned) == 2, ops.ops  # the router's addmm and the residual add
    assert all(not entry.cached & returned for entry in measure_menu.menu(ops))


def test_layers_that_cast_weights_under_autocast_get_no_selective_options():
    # A shared block's later calls found autocast's weight casts cached (as did the profiling
    # runs, after the measuring one), while its re-run in backward cast them again: SAC raised
    # "_to_copy ... not found in storage" in backward. Such calls are planned as blocks.
    block = WritesThroughOut()
    model = nn.Module()
    model.block = block
    model.forward = lambda x: block(torch.tanh(block(x)))  # one block, called twice
    handle = remat_eager.auto_checkpoint(model, activation_budget=2**30, blocks=[block])
    with torch.autocast("cpu", torch.bfloat16):
        model(torch.randn(8, 16)).float().sum().backward()
    assert len(handle.plan.profile.layers) == 2
    assert all(not layer.options for layer in handle.plan.profile.layers)
    layer, x = WritesThroughOut().to(torch.bfloat16), torch.randn(8, 16, dtype=torch.bfloat16)
    with _PreservedState([layer], {x.device}), torch.autocast("cpu", torch.bfloat16):
        # Nothing to cast: selective as without autocast.
        assert measure_ops.profile_ops(layer, (x,), {}, set(), repeats=0).replays


def test_attention_is_random_only_with_dropout():
    """torch tags every scaled_dot_product_attention kernel seeded (for its dropout): with
    dropout_p > 0 (the GPT block in training) it draws from the RNG and is never cached; with
    dropout_p == 0 (Llama's) it draws nothing and the menu may cache it, as torchtitan's policy
    does. test_menu_matches_what_sac_caches_and_reruns checks such entries bit for bit."""
    for name, random in (("gpt", True), ("llama", False)):
        layer, h = layer_and_input(name)
        with _PreservedState([layer], {h.device}):
            ops = measure_ops.profile_ops(layer, (h,), {}, set(), repeats=0)
        attention = [op for op in ops.ops if "attention" in op.name]
        # (On CPU, attention with dropout runs as the math path's ops, its dropout random.)
        assert attention or random, [op.name for op in ops.ops]
        assert all((op.why_not == "random") == random for op in attention), (name, attention)
    assert any(
        any("attention" in ops.ops[i].name for i in e.cached) for e in measure_menu.menu(ops)
    )


def test_op_level_plans_fit_measured_with_the_cache_counted(monkeypatch):
    """A chain of Llama-style blocks planned at op level: the meter counts SAC's cache too, and
    measured <= predicted <= budget with selective regions in the plan; gradients exact."""
    import remat.torch as rt

    _flop_like_op_times(monkeypatch)
    torch.manual_seed(0)
    model, blocks, tokens = models.make_llama(depth=4, width=64, heads=4, seq=32, batch=2)
    h = model.prologue(tokens).detach().requires_grad_()
    blocks = list(blocks)
    top = rt.plan(blocks, h, activation_budget=2**40, tune=False)
    used = 0
    for fraction in (0.6, 0.35, 0.15):
        budget = top.minimum_budget_bytes + int(
            fraction * (top.no_checkpoint_bytes - top.minimum_budget_bytes)
        )
        plan = rt.plan(blocks, h, activation_budget=budget, tune=False)
        used += len(plan_contexts(plan))
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


def test_auto_checkpoint_passes_granularity_on(monkeypatch):
    """auto_checkpoint(granularity="block") plans whole-block regions only (the keyword used
    to be dropped on the way to the handle, so every plan was op-level)."""
    import remat.torch as rt

    _flop_like_op_times(monkeypatch)
    torch.manual_seed(0)
    model, _, tokens = models.make_llama(depth=4, width=64, heads=4, seq=32, batch=2)
    measured = rt.measure(model, tokens, verbose=False)
    least, everything = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
    selective_regions = {}
    for granularity in ("block", "op"):
        count = 0
        for fraction in (0.6, 0.35, 0.15):
            budget = least + int(fraction * (everything - least))
            handle = rt.auto_checkpoint(model, activation_budget=budget, granularity=granularity)
            assert handle.options.granularity == granularity
            models.loss(model(tokens)).backward()
            count += len(plan_contexts(handle.plan))
            handle.remove()
        selective_regions[granularity] = count
    assert selective_regions["block"] == 0 and selective_regions["op"] > 0, selective_regions
    with pytest.raises(ValueError):
        rt.auto_checkpoint(model, activation_budget="1GiB", granularity="ops")
