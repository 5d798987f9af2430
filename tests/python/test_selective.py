"""Op-level (selective) checkpointing: each layer's menu must say what torch's SAC really does.

For every menu entry of a layer of the MLP, GPT-style (dropout), Llama-style and ResNet-style
models: gradients equal the layer without checkpointing (torch.equal), the bytes SAC caches
equal the entry's held bytes, and the ops SAC re-runs in backward are the ones the entry's
re-run time counts."""

from __future__ import annotations

import copy
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
from remat.eager.measuring import chain as measure_chain  # noqa: E402
from remat.eager.measuring import menu as measure_menu  # noqa: E402
from remat.eager.measuring import ops as measure_ops  # noqa: E402
from remat.eager.run import first_step  # noqa: E402
from remat.eager.run.contexts import plan_contexts  # noqa: E402
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


def _flop_like_op_times(monkeypatch) -> None:
    """Op times by kind instead of by clock (matmuls and attention 20 units, every other op 1),
    every block's forward 1 ms, and no fixed cost per region or per op SAC's modes see (the
    modes still run, checking that SAC replays each layer). The plan then depends on bytes and
    these ratios, not on a loaded machine's timings (with measured times, noise could make
    whole regions the cheaper plan and leave nothing selective to check)."""
    heavy = ("mm", "attention", "convolution")

    def flop_like(ops):
        timed = tuple(
            dataclasses.replace(op, seconds=1e-4 * (20 if any(k in op.name for k in heavy) else 1))
            for op in ops.ops
        )
        return dataclasses.replace(ops, ops=timed)

    measured_ops = measure_ops.profile_ops

    def profile_ops(*args, **kwargs):
        return flop_like(measured_ops(*args, **kwargs))

    measured_with_ops = measure_ops.measure_with_ops

    def measure_with_ops(*args, **kwargs):
        call, ops = measured_with_ops(*args, **kwargs)
        return dataclasses.replace(call, forward_seconds=1e-3), flop_like(ops)

    complete = measure_ops.ModesCache.complete

    def without_modes_cost(self, function, args, kwargs, profile, forward_seconds, repeats=0, **_):
        found = complete(self, function, args, kwargs, profile, None, repeats)
        return dataclasses.replace(found, modes_seconds=None)

    monkeypatch.setattr(measure_ops, "profile_ops", profile_ops)
    monkeypatch.setattr(measure_chain, "measure_with_ops", measure_with_ops)
    recorded_ops, recorded_profile = measure_ops.record_ops, first_step.recorded_profile
    monkeypatch.setattr(measure_ops, "record_ops", lambda *a, **k: flop_like(recorded_ops(*a, **k)))
    monkeypatch.setattr(
        first_step, "recorded_profile", lambda *a, **k: flop_like(recorded_profile(*a, **k))
    )
    monkeypatch.setattr(measure_ops.ModesCache, "complete", without_modes_cost)
    # The fixed cost of a region too: on these tiny blocks it is comparable to a block's forward,
    # and its noise alone can flip the plan between selective and whole regions.
    monkeypatch.setattr(first_step, "_region_overhead", lambda *args: 0.0)
    monkeypatch.setattr(measure_chain, "_region_overhead", lambda *args: 0.0)
    measure = measure_chain.measure_call

    def measure_call(*args, **kwargs):
        return dataclasses.replace(measure(*args, **kwargs), forward_seconds=1e-3)

    class CallWatch(first_step.CallWatch):
        def measurement(self, out, seconds):
            return super().measurement(out, 1e-3)

    monkeypatch.setattr(measure_chain, "measure_call", measure_call)
    monkeypatch.setattr(first_step, "CallWatch", CallWatch)


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
            assert handle.granularity == granularity
            models.loss(model(tokens)).backward()
            count += len(plan_contexts(handle.plan))
            handle.remove()
        selective_regions[granularity] = count
    assert selective_regions["block"] == 0 and selective_regions["op"] > 0, selective_regions
    with pytest.raises(ValueError):
        rt.auto_checkpoint(model, activation_budget="1GiB", granularity="ops")


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
    import warnings

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
