"""Eager checkpointing to a memory budget on real torch models (CPU): gradients equal those
without checkpointing, measured saved bytes stay within the prediction and the budget, plans
are cached and re-made on a new shape, and errors say what to do."""

from __future__ import annotations

import copy
import sys
import time

import numpy
import pytest
import torch
from torch import nn

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
import remat  # noqa: E402
import remat.torch as rt  # noqa: E402
from remat import eager  # noqa: E402
from remat.units import format_bytes, parse_bytes  # noqa: E402

MODELS = {
    "mlp": lambda: models.make_mlp(depth=8, width=64, batch=32),
    "gpt": lambda: models.make_gpt(depth=4, width=64, heads=4, seq=32, batch=4, dropout=0.1),
    "resnet": lambda: models.make_resnet(per_stage=2, batch=4, size=16),
}


def build(name: str, seed: int = 0):
    torch.manual_seed(seed)
    return MODELS[name]()


def grads(model: nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() for p in model.parameters()]


def reference_step(model: nn.Module, x: torch.Tensor, seed: int = 1) -> list[torch.Tensor]:
    torch.manual_seed(seed)
    models.loss(model(x)).backward()
    return grads(model)


def chain_budgets(model, blocks, x) -> tuple[eager.Profile, int, int]:
    h = copy.deepcopy(model).prologue(x).detach()  # a copy: the stem's BatchNorm stays as it was
    profile = rt.profile_layers(list(blocks), h, exclude=[model])
    p = eager.plan_profile(profile, 2**60)
    return profile, p.minimum_budget_bytes, p.no_checkpoint_bytes


# --- budgets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (1024, 1024),
        ("2GiB", 2 * 2**30),
        ("1.5 GB", 1_500_000_000),
        ("512MiB", 512 * 2**20),
        ("10kb", 10_000),
        ("7", 7),
        (3.9, 3),
        ("1e3 B", 1000),
        # Decimals read exactly: through a float these fell a byte short.
        ("1.005KB", 1005),
        ("0.29MB", 290_000),
        ("4611686018427387903", 2**62 - 1),
        # A budget computed with numpy (a fraction of a measured total, say).
        (numpy.int64(2**40 + 1), 2**40 + 1),
        (numpy.float32(1536.5), 1536),
    ],
)
def test_budgets_read_with_units(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    "bad",
    ["", "two GB", "5 XB", "-1GB", "nan", -5, True, None, float("inf"), numpy.bool_(True)],
)
def test_unreadable_budgets_name_the_field(bad):
    with pytest.raises(ValueError, match="memory_budget"):
        parse_bytes(bad)


@pytest.mark.parametrize("ratio", [0.5, 0.999, numpy.float32(0.5)])
def test_a_fraction_of_a_byte_reads_as_torch_s_ratio_mistaken_for_bytes(ratio):
    # It was floored to a budget of 0 bytes, and the error spoke of 0 B.
    with pytest.raises(ValueError, match="less than a byte.*activation_memory_budget ratio"):
        parse_bytes(ratio)
    assert parse_bytes(0.0) == 0 and parse_bytes(1.0) == 1


def test_format_bytes():
    assert format_bytes(512) == "512 B"
    assert format_bytes(1536) == "1.5 KiB"
    assert format_bytes(3 * 2**30) == "3 GiB"


# --- the meter -----------------------------------------------------------------------------------


def test_meter_counts_plain_and_checkpointed_saves_exactly():
    # 8 x (Linear + ReLU) on 64 x 256 floats: one tensor is 64 KiB. Without checkpointing the
    # input and 8 ReLU outputs are saved (the weights are excluded).
    torch.manual_seed(0)
    chain = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(8)])
    x = torch.randn(64, 256)
    tensor = 64 * 256 * 4
    with rt.SavedTensorMeter(chain) as meter:
        chain(x).sum().backward()
    assert meter.peak_bytes == 9 * tensor
    assert meter.current_bytes == 0
    # torch's own checkpoint_sequential with 2 segments: the first half re-runs.
    with rt.SavedTensorMeter(chain) as meter:
        out = torch.utils.checkpoint.checkpoint_sequential(chain, 2, x, use_reentrant=False)
        out.sum().backward()
    assert meter.peak_bytes == 6 * tensor
    assert meter.current_bytes == 0


# --- plans on real models ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MODELS))
def test_gradients_equal_and_measured_peak_within_budget(name):
    model, blocks, x = build(name)
    expected = reference_step(copy.deepcopy(model), x)
    profile, least, everything = chain_budgets(model, blocks, x)
    assert least < everything
    seen_regions = set()
    for fraction in (1.0, 0.6, 0.3, 0.0):
        budget = least + int(fraction * (everything - least))
        plan = rt.plan(list(blocks), None, activation_budget=budget, profile=profile)
        assert plan.predicted_peak_bytes <= budget
        seen_regions.add(plan.regions)
        model.zero_grad()
        torch.manual_seed(1)
        h = model.prologue(x)
        chain_input = h.detach().requires_grad_()
        # Only the chain is metered; the epilogue's saves go to a hook that counts nothing.
        with rt.SavedTensorMeter(model) as meter:
            out = eager.run_plan(list(blocks), plan, chain_input)
            with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                loss = models.loss(model.epilogue(out))
            loss.backward()
        if h.requires_grad:
            h.backward(chain_input.grad)
        assert meter.peak_bytes <= plan.predicted_peak_bytes <= budget, (fraction, plan)
        assert meter.peak_bytes >= 0.8 * plan.predicted_peak_bytes  # the model is not loose
        for got, want in zip(grads(model), expected):
            assert torch.equal(got, want), f"{name} at {fraction}: gradients differ"
    assert len(seen_regions) >= 3, "the budgets should give different plans"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_auto_checkpoint_follows_the_plan_and_matches_plain_training(name):
    model, blocks, x = build(name)
    plain = copy.deepcopy(model)
    _, least, everything = chain_budgets(model, blocks, x)
    handle = rt.auto_checkpoint(model, activation_budget=least + (everything - least) // 4)
    assert list(handle.blocks.modules) == list(blocks)
    keys = list(model.state_dict())
    for step in range(2):  # the second step reuses the plan
        expected = reference_step(plain, x, seed=step)
        got = reference_step(model, x, seed=step)
        for a, b in zip(got, expected):
            assert torch.equal(a, b)
        plain.zero_grad()
        model.zero_grad()
    assert len(handle.plans) == 1
    assert handle.plan.regions, "a quarter of the way down needs checkpoints"
    if handle.blocks.chain is not None:  # an nn.Sequential: one chain, re-runs are timed
        assert handle.chain.last_execution.recompute_seconds > 0
    # BatchNorm running statistics: re-runs do not count as batches.
    for a, b in zip(model.buffers(), plain.buffers()):
        assert torch.equal(a, b)
    assert list(model.state_dict()) == keys
    handle.remove()
    assert all("forward" not in b.__dict__ for b in blocks)


def test_auto_checkpoint_replans_on_a_new_shape_and_skips_without_grad():
    model, blocks, x = build("gpt")
    _, least, everything = chain_budgets(model, blocks, x)
    handle = rt.auto_checkpoint(model, activation_budget=(least + everything) // 2)
    models.loss(model(x)).backward()
    models.loss(model(x[:, :16])).backward()
    models.loss(model(x)).backward()
    assert len(handle.plans) == 2
    with torch.no_grad():
        before = len(handle.plans)
        model(x[:, :8])
    assert len(handle.plans) == before


def test_auto_checkpoint_twice_is_refused_until_removed():
    model, blocks, x = build("mlp")
    handle = rt.auto_checkpoint(model, activation_budget="1GiB")
    with pytest.raises(ValueError, match=r"blocks\[0\]: already under auto_checkpoint"):
        rt.auto_checkpoint(model, activation_budget="2GiB")
    handle.remove()
    again = rt.auto_checkpoint(model, activation_budget="2GiB")
    models.loss(model(x)).backward()
    assert again.plan is not None
    again.remove()
    assert "forward" not in model.blocks.__dict__


def test_auto_checkpoint_finds_blocks():
    model, blocks, _ = build("resnet")
    assert list(rt.auto_checkpoint(model, activation_budget="1GiB").blocks.modules) == list(blocks)
    with pytest.raises(ValueError, match="blocks="):
        rt.auto_checkpoint(nn.Linear(3, 3), activation_budget="1GiB")


def test_budget_below_the_minimum_states_it():
    model, blocks, x = build("mlp")
    _, least, _ = chain_budgets(model, blocks, x)
    with pytest.raises(remat.InputError, match=f"least peak any plan reaches, {least} bytes"):
        rt.checkpoint_sequential(blocks, x, activation_budget=least - 1)
    with pytest.raises(ValueError, match="activation_budget: cannot read 'lots'"):
        rt.checkpoint_sequential(blocks, x, activation_budget="lots")
    # The step's peak is auto_checkpoint's: a call inside the step refuses it, saying so.
    with pytest.raises(TypeError, match="memory_budget= is the whole training step's peak"):
        rt.checkpoint_sequential(blocks, x, memory_budget="1GiB")
    with pytest.raises(TypeError, match="plan: missing activation_budget="):
        rt.plan(blocks, x)


def test_checkpoint_sequential_profiles_once_per_shape():
    calls = []

    class Counted(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(32, 32)

        def forward(self, x):
            calls.append(x.shape)
            return torch.tanh(self.linear(x))

    torch.manual_seed(0)
    chain = [Counted() for _ in range(6)]
    x = torch.randn(16, 32)
    first = rt.plan(chain, x, activation_budget=2**40)
    budget = first.minimum_budget_bytes
    calls.clear()
    rt.checkpoint_sequential(chain, x, activation_budget=budget).sum().backward()
    profiled = len(calls)
    calls.clear()
    rt.checkpoint_sequential(chain, x, activation_budget=budget).sum().backward()
    again = len(calls)
    assert again < profiled  # no profiling the second time
    plan = rt.plan(chain, x, activation_budget=budget)
    assert again == sum(plan.runs())  # each layer runs as often as the plan says
    calls.clear()
    rt.checkpoint_sequential(chain, x[:8], activation_budget=budget * 4).sum().backward()
    assert len(calls) >= 3 * len(chain)  # a new shape is profiled (2 runs a layer), then run


def test_checkpoint_sequential_without_grad_just_runs():
    torch.manual_seed(0)
    chain = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(4, 8)
    with torch.no_grad():
        assert torch.equal(rt.checkpoint_sequential(chain, x, activation_budget=1), chain(x))


def test_profile_leaves_rng_and_batchnorm_statistics_alone():
    model, blocks, x = build("resnet")
    h = model.prologue(x).detach()
    buffers = [b.clone() for b in model.buffers()]
    torch.manual_seed(3)
    state = torch.random.get_rng_state()
    rt.profile_layers(list(blocks), h, exclude=[model])
    assert torch.equal(torch.random.get_rng_state(), state)
    assert all(torch.equal(a, b) for a, b in zip(model.buffers(), buffers))


def test_measure_leaves_what_a_forward_keeps_on_its_modules():
    # measure() runs the step on the user's model: a recurrent state kept on a module
    # (truncated backprop through time) was left set, and training after it differed.
    from zoo.shapes import RouterModel

    class Carried(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.routers = RouterModel()
            self.state = None

        def forward(self, x):
            x = x if self.state is None else x + self.state
            out = self.routers(x)
            self.state = out.detach()
            return out

    torch.manual_seed(0)
    model = Carried()
    rt.measure(model, torch.randn(16, 32), optimizer=torch.optim.SGD(model.parameters()))
    assert model.state is None
    assert not hasattr(model.routers.blocks[0], "aux_loss")
    assert all(block.routed == [] for block in model.routers.blocks)


def test_plan_table_is_readable():
    model, blocks, x = build("mlp")
    _, least, everything = chain_budgets(model, blocks, x)
    plan = rt.plan(list(blocks), x, activation_budget=(least + everything) // 2)
    text = str(plan)
    assert "predicted peak saved" in text and "least possible" in text
    assert len([line for line in text.splitlines() if "MLPBlock" in line]) == len(blocks)
    assert plan.kept() == [r == 1 for r in plan.runs()]
    assert any(r > 1 for r in plan.runs()) and any(r == 1 for r in plan.runs())


def test_profile_must_match_the_functions():
    model, blocks, x = build("mlp")
    profile = rt.profile_layers(list(blocks)[:3], x)
    with pytest.raises(ValueError, match="profile: has 3 layers"):
        rt.plan(list(blocks), x, activation_budget="1GiB", profile=profile)


def test_example_trains_within_the_budget():
    import subprocess

    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "eager_checkpoint.py"), "--steps", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("within the budget: True; gradients equal: True") == 2
    assert "training step: predicted peak" in done.stdout and "memory_budget 12 MiB" in done.stdout


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_peak_allocated_falls_with_the_budget():
    model, blocks, x = build("gpt")
    model.cuda()
    x = x.cuda()

    def peak_allocated() -> int:
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        models.loss(model(x)).backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    plain = peak_allocated()
    measured = rt.measure(model, x, verbose=False)  # per-block budgets: the blocks are a list
    least, everything = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
    rt.auto_checkpoint(model, activation_budget=least)
    peak_allocated()  # measures and plans
    assert peak_allocated() < plain - (everything - least) // 2


def test_work_clock_is_thread_cpu_time_on_one_cpu_thread():
    """With one intra-op thread and no CUDA, measurements use the thread's CPU time (a shared
    machine's load is not counted); with more threads, the wall clock."""
    import time

    from remat.eager._runtime import clock

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        expected = time.perf_counter if torch.cuda.is_initialized() else time.thread_time
        assert clock() is expected
        torch.set_num_threads(2)
        assert clock() is time.perf_counter
    finally:
        torch.set_num_threads(threads)


def _linear_chain(width=64, depth=6):
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)]


def test_lambdas_over_modules_do_not_count_their_weights():
    """`lambda h, block=block: block(h)` hides the module from a plain look: its weights were
    counted as saved activations (3x the no-checkpoint bytes), so a budget that needs no region
    got five. Default arguments and closure cells are looked into now."""
    blocks = _linear_chain()
    lambdas = [lambda h, block=block: block(h) for block in blocks]

    def closure(block):
        return lambda h: block(h)

    x = torch.randn(32, 64, requires_grad=True)
    modules = rt.plan(blocks, x, activation_budget=10**12, tune=False)
    for functions in (lambdas, [closure(b) for b in blocks]):
        made = rt.plan(functions, x, activation_budget=modules.no_checkpoint_bytes, tune=False)
        assert made.no_checkpoint_bytes == modules.no_checkpoint_bytes
        assert made.regions == ()


def test_checkpoint_sequential_replans_when_a_block_is_rebuilt():
    """Its plan cache once matched a chain whose inner Linear was swapped for a wider one (same
    function objects, shapes and flags): the step then held 1.6x the budget. The parameters are
    part of the key now: the rebuilt chain gets its own plan, which fits."""
    blocks = _linear_chain(width=64)
    x = torch.randn(32, 64, requires_grad=True)
    budget = rt.plan(blocks, x, activation_budget=10**12, tune=False).no_checkpoint_bytes
    rt.checkpoint_sequential(blocks, x, activation_budget=budget).sum().backward()
    for block in blocks[2:4]:
        block[0] = nn.Sequential(nn.Linear(64, 128), nn.Linear(128, 64))
    rt.checkpoint_sequential(blocks, x, activation_budget=budget).sum().backward()  # plans again
    with rt.SavedTensorMeter(blocks) as meter:
        out = rt.checkpoint_sequential(blocks, x, activation_budget=budget)
        out.sum().backward()
    assert meter.peak_bytes <= budget


def test_run_plan_warns_for_an_input_the_plan_was_not_made_for():
    blocks = _linear_chain()
    made = rt.plan(blocks, torch.randn(8, 64, requires_grad=True), activation_budget="1GiB")
    with pytest.warns(RuntimeWarning, match=r"input: shape \(64, 64\), planned \(8, 64\)"):
        eager.run_plan(blocks, made, torch.randn(64, 64, requires_grad=True))
    with pytest.warns(RuntimeWarning, match="input: requires_grad False, planned True"):
        eager.run_plan(blocks, made, torch.randn(8, 64))


@pytest.mark.parametrize(
    "option,value,message",
    [
        ("slots", 0, "slots: expected a whole number >= 1"),  # once silently the default
        ("slots", 1.5, "slots: expected a whole number >= 1"),  # once nanobind's raw TypeError
        ("microbatches_in_flight", 2.7, "microbatches_in_flight: expected a whole number"),
        ("microbatches_in_flight", 0, "microbatches_in_flight: expected a whole number"),
    ],
)
def test_planner_options_are_checked_by_name(option, value, message):
    blocks = _linear_chain(depth=2)
    with pytest.raises(ValueError, match=message):
        rt.plan(blocks, torch.randn(4, 64), activation_budget="1GiB", tune=False, **{option: value})


def test_parse_bytes_sizes_up_huge_exponents_before_computing():
    # Read exactly, 1e-999999999 would take a power of ten of a billion digits.
    started = time.perf_counter()
    assert parse_bytes("1e-999999999") == 0
    with pytest.raises(ValueError, match="too large"):
        parse_bytes("1e999999999KB")
    assert time.perf_counter() - started < 1


def test_parse_bytes_takes_ints_exactly():
    # Through a float, 2**60 - 1 came back as 2**60 and 10**400 raised OverflowError.
    assert parse_bytes(2**60 - 1) == 2**60 - 1
    with pytest.raises(ValueError, match="memory_budget: .* is too large"):
        parse_bytes(10**400)
    with pytest.raises(ValueError, match="memory_budget: -1 is not"):
        parse_bytes(-1)


def test_input_signatures_take_dicts_with_keys_of_mixed_types():
    from remat.eager._runtime import _signature  # sorting such keys raised TypeError

    assert _signature({1: torch.zeros(2), "a": 3}) == _signature({"a": 3, 1: torch.zeros(2)})
