"""The auto_checkpoint handle's parts, each on its own: the shared running state, the notices,
the agreement, the call runner, the block planner and the recorder (see eager/run/auto.py)."""

import warnings

import pytest
import torch
from torch import nn

import remat.torch
from remat.eager.blocks import find_blocks
from remat.eager.planning.planner import plan_profile
from remat.eager.run.agreement import Agreement
from remat.eager.run.block_planner import BlockPlanner
from remat.eager.run.call_runner import CallRunner
from remat.eager.run.measured_step import MeasuredStep
from remat.eager.run.options import CheckpointOptions
from remat.eager.run.recorder import StepRecorder
from remat.eager.run.running import Notices, PlanBook, Running
from remat.eager.run.step import _Step
from remat.eager.types import LayerProfile, Profile


def _layers(n: int = 3, width: int = 16) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(n)))


def test_running_is_active_only_with_grad_outside_blocks():
    running = Running()
    assert running.active()
    with running.inside_block():
        assert not running.active() and running.inside == 1
        with running.inside_block():
            assert running.inside == 2
    assert running.inside == 0 and running.active()
    with torch.no_grad():
        assert not running.active()
    with pytest.raises(KeyError), running.inside_block():
        raise KeyError  # the count comes back down when a block raises
    assert running.inside == 0


def test_notices_warn_once_each_and_point_at_the_callers_line():
    notices = Notices("remat.auto_checkpoint")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            notices.warn("a", once_as="same")
            notices.warn("b", once_as="same")  # the same notice, in other words
            notices.warn("c")
    assert notices.messages == ["a", "c"]
    assert [str(w.message) for w in caught] == [
        "remat.auto_checkpoint: a",
        "remat.auto_checkpoint: c",
    ]
    assert all(w.filename == __file__ for w in caught)


def test_alone_a_steps_plan_is_kept_under_its_own_key():
    agreement = Agreement(None)
    assert not agreement.together
    assert agreement.plan_key(("x",), True) == (("x",), False)
    with pytest.raises(ValueError, match="plan_group"):
        Agreement("everyone")


def test_the_call_runner_runs_a_region_as_the_block_would_run_plainly():
    block = _layers(1)[0]
    x = torch.randn(4, 16, requires_grad=True)
    running, notices = Running(), Notices("test")
    runner = CallRunner(block, running, notices, lambda m: "block")
    seen = []
    original = lambda t: (seen.append(running.inside), block.forward(t))[1]  # noqa: E731
    plain = runner.run(block, original, (x,), {}, checkpointed=False)
    region = runner.run(block, original, (x,), {}, checkpointed=True)
    assert torch.equal(plain, region) and seen == [1, 1] and running.inside == 0
    (grad_plain,) = torch.autograd.grad(plain.sum(), x)
    (grad_region,) = torch.autograd.grad(region.sum(), x)
    # The region re-ran its block in backward (where blocks are told apart by in_backward).
    assert torch.equal(grad_plain, grad_region) and len(seen) == 3


def test_the_call_runner_warns_when_a_regions_input_changes_in_place():
    block = _layers(1)[0]
    running, notices = Running(), Notices("test")
    runner = CallRunner(block, running, notices, lambda m: "layers.0")
    running.step = step = _Step(key=None, plan_key=None, plan=None)
    x = torch.randn(4, 16, requires_grad=True) * 1
    runner.run(block, block.forward, (x,), {}, checkpointed=True)
    runner.check_region_inputs(step)
    assert notices.messages == []
    x.add_(1)
    with pytest.warns(RuntimeWarning, match="an input of layers.0 was changed in place"):
        runner.check_region_inputs(step)


def _profile(saved: list[int]) -> Profile:
    layers = tuple(
        LayerProfile(
            name=f"b{i}", saved_bytes=s, output_bytes=100, saves_output=False, forward_seconds=1e-3
        )
        for i, s in enumerate(saved)
    )
    return Profile(input_bytes=100, layers=layers, max_region_layers=1)


@pytest.mark.parametrize("budget", [10**9, 1_300, 700])
def test_the_block_planner_plans_a_profile_and_books_it(budget):
    model = _layers()
    blocks = find_blocks(model, list(model))
    book, running = PlanBook(), Running()
    planner = BlockPlanner(
        model,
        blocks,
        CheckpointOptions(),
        budget,
        None,
        running,
        Agreement(None),
        book,
        Notices("test"),
    )
    calls = tuple((m, ("signature", i), ()) for i, m in enumerate(model))
    profile = _profile([400, 400, 400])
    found = planner.make_block_plan("key", "key", profile, calls)
    assert planner.block_plans["key"] is found and book.plans["key"] is found.plan
    assert book.last is found.plan and found.calls == calls
    # The plan the planner gives for the profile alone, every region a whole-block checkpoint.
    assert found.plan.regions == plan_profile(profile, budget).regions
    assert set(found.regions) == {region.first for region in found.plan.regions}
    assert all(context is None for context in found.regions.values())
    assert (budget == 10**9) == (not found.regions)


def test_the_recorder_measures_each_call_inside_its_region():
    model = _layers()
    running = Running()
    runner = CallRunner(model, running, Notices("test"), lambda m: "block")
    options = CheckpointOptions(granularity="block")
    recorder = StepRecorder(model, options, running, runner, lambda: None, lambda m: "block")
    step = running.step = _Step(key=None, plan_key=None, plan=None)
    step.modes = recorder.modes_for(together=False)
    assert recorder.modes_for(together=False) is step.modes  # kept across measuring steps
    assert recorder.modes_for(together=True) is not step.modes  # fresh for every group step
    x = torch.randn(8, 16, requires_grad=True)
    plain = model(x)
    h = x
    for block in model:
        h = recorder.measure_and_run(step, block, block.forward, ((), {}), (h,), {})
    assert torch.equal(h, plain) and len(step.calls) == 3 and step.position == 0
    # Each block saves, besides its input, the Linear's output for the GELU: 8 x 16 floats.
    assert [call.own_bytes for call in step.calls] == [8 * 16 * 4] * 3
    assert all(len(call.input_keys) == len(call.output_keys) == 1 for call in step.calls)


def test_the_handle_wires_its_parts_to_one_running_state_and_book():
    model = _layers()
    handle = remat.torch.auto_checkpoint(model, activation_budget="1MiB", blocks=list(model))
    try:
        parts = (handle.calls, handle.runner, handle.recorder, handle.planner, handle.chain)
        assert all(part.running is handle.running for part in parts)
        assert handle.planner.book is handle.chain.book is handle.calls.book is handle.book
        model(torch.randn(4, 16, requires_grad=True)).sum().backward()
        assert handle.plan is handle.book.last and handle.plans is handle.book.plans
        assert handle.running.step is None and handle.running.inside == 0
    finally:
        handle.remove()


def test_the_measured_step_records_each_block_call_and_unwraps_them_after():
    model = _layers()
    blocks = find_blocks(model, list(model))
    originals = [block.forward for block in model]
    x = torch.randn(8, 16, requires_grad=True)
    plain = model(x)
    with MeasuredStep(model, blocks, None, None, by_parts=True) as measured:
        out = model(x)  # the step: its blocks run as regions, measured
        assert measured.ended and measured.segments is not None
        again = model(x)  # a second call is not measured
        out.sum().backward()
        record = measured.finish()
    assert torch.equal(out, plain) and torch.equal(again, plain)
    assert [block.forward for block in model] == originals
    assert record is not None and record.peak_bytes >= record.start_bytes > 0
    found = measured.plan()
    assert found is not None and len(found.profile.layers) == 3
    # Each block saves, besides its input, the Linear's output for the GELU: 8 x 16 floats.
    assert [layer.saved_bytes for layer in found.profile.layers] == [8 * 16 * 4] * 3


def test_a_step_that_called_no_block_has_no_plan():
    model = _layers()
    with MeasuredStep(model, find_blocks(model, list(model)), None, None, True) as measured:
        with torch.no_grad():
            model(torch.randn(2, 16))
    assert measured.plan() is None
