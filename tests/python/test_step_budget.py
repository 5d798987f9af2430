"""memory_budget bounds the whole training step's peak: parameters, gradients, AdamW's state,
every activation and the backward's working set, each step measured by StepMemoryMeter (which
agrees with torch's MemTracker, test_step_memory.py), the first step included."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

import remat
import remat.torch as rt
from remat.eager.measuring.step_segments import StepRecord, StepSegments
from remat.eager.run.step_budget import StepBudget
from residual import Residual
from step_cases import allocator_peak, same, train, zoo_measured
from zoo import torchvision_cpu  # noqa: F401  (before transformers, which imports torchvision)


def _budgets(measured):
    least, plain = measured.least_budget_bytes, measured.no_checkpoint_step_bytes
    return [least, (least + plain) // 2, plain]


def test_every_step_of_a_residual_model_fits_three_budgets_bit_for_bit():
    torch.manual_seed(0)
    model = Residual()
    x = torch.randn(512, 64)
    _, losses, grads = train(copy.deepcopy(model), lambda m: m(x))
    probe = copy.deepcopy(model)
    measured = rt.measure(probe, x, optimizer=torch.optim.AdamW(probe.parameters()))
    assert measured.least_budget_bytes < measured.no_checkpoint_step_bytes
    for budget in _budgets(measured):
        trained = copy.deepcopy(model)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            handle = rt.auto_checkpoint(trained, memory_budget=budget)
            peaks, got_losses, got_grads = train(trained, lambda m: m(x))
        assert max(peaks) <= budget, (peaks, budget, handle.plan)
        assert handle.plan.step is not None and handle.plan.step.memory_budget == budget
        assert handle.plan.step.predicted_peak_bytes <= budget
        assert same(losses, got_losses) and all(map(same, grads, got_grads))


def _residual_case(**training):
    """A 4-block Residual and its batch, plain training's losses and gradients (`training`:
    train's options), and measure()'s figures with AdamW."""
    torch.manual_seed(0)
    model = Residual(depth=4)
    x = torch.randn(256, 64)
    _, losses, grads = train(copy.deepcopy(model), lambda m: m(x), **training)
    probe = copy.deepcopy(model)
    measured = rt.measure(probe, x, optimizer=torch.optim.AdamW(probe.parameters()))
    return model, x, losses, grads, measured


def test_gradient_accumulation_over_two_micro_steps_fits_the_budget():
    model, x, losses, grads, measured = _residual_case(micro_steps=2)
    for budget in _budgets(measured)[1:]:
        trained = copy.deepcopy(model)
        handle = rt.auto_checkpoint(trained, memory_budget=budget)
        peaks, got_losses, got_grads = train(trained, lambda m: m(x), micro_steps=2)
        assert max(peaks) <= budget, (peaks, budget, handle.plan)
        assert same(losses, got_losses) and all(map(same, grads, got_grads))


def test_a_budget_below_the_least_step_peak_is_refused_naming_it_in_bytes():
    torch.manual_seed(0)
    model = Residual(depth=4)
    x = torch.randn(256, 64)
    measured = rt.measure(copy.deepcopy(model), x)
    budget = measured.least_budget_bytes // 2
    with pytest.raises(
        remat.InputError,
        match=r"memory_budget: \d+ bytes is below the least "
        r"peak of this training step, \d+ bytes, set by",
    ):
        rt.auto_checkpoint(model, memory_budget=budget, example_inputs=(x,))
    # The same at the first steps, without example inputs: the step after the one that
    # measured plans, and refuses.
    handle = rt.auto_checkpoint(model, memory_budget=budget)
    model(x).backward()
    with pytest.raises(remat.InputError, match="below the least peak"):
        model(x)
    handle.remove()


def test_exactly_one_budget_and_auto_only_on_cuda():
    model = Residual(depth=2)
    with pytest.raises(TypeError, match="exactly one of memory_budget= .* activation_budget="):
        rt.auto_checkpoint(model, memory_budget="1GiB", activation_budget="1GiB")
    with pytest.raises(TypeError, match="exactly one"):
        rt.auto_checkpoint(model)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="'auto' reads a CUDA device's free memory.*bytes"):
            rt.auto_checkpoint(model, memory_budget="auto")


def test_a_step_measured_over_its_prediction_replans_with_the_excess_and_warns():
    """The check after a followed step: its measured excess is added to the figures."""
    model = Residual(depth=2)
    budget = StepBudget(1000, model, None)
    said = []
    budget.warn = said.append
    from remat.eager.planning.step_budget import StepFigures

    budget.figures["key"] = StepFigures(100, 200, (), 300)
    budget._checks_left["key"] = 1
    assert budget._checked("key", StepRecord(100, ((("pre",), 1200),))) is True
    assert budget.figures["key"].margin_bytes == 200
    assert said and "1200 bytes" in said[0] and "1000" in said[0]
    assert budget._checked("key", StepRecord(100, ((("pre",), 900),))) is False


def test_every_step_found_over_the_budget_is_warned_about():
    """A loop the plans do not model (the graph retained through the optimizer step) goes over
    the budget on several steps in a row while the plans converge, some by the same bytes. Each
    of those steps is warned about: a message repeated word for word was given once, and a
    step went over silently."""
    torch.manual_seed(0)
    model = Residual(depth=4, classes=1)
    optimizer = torch.optim.AdamW(model.parameters())
    xs = [torch.randn(16, 64, 64) for _ in range(8)]
    budget = rt.measure(model, xs[0], optimizer=optimizer).no_checkpoint_step_bytes
    handle = rt.auto_checkpoint(model, memory_budget=budget, optimizer=optimizer)
    over = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x in xs:
            with rt.StepMemoryMeter(model, optimizer, x) as meter:
                loss = model(x)
                loss.backward(retain_graph=True)
                optimizer.step()
                optimizer.zero_grad()
                del loss
            over += meter.peak_bytes > budget
        model(xs[0])  # the last step's check ends here
    said = [str(w.message) for w in caught if "over the memory_budget" in str(w.message)]
    assert over and len(said) >= over, (over, said)
    handle.remove()


def test_a_step_after_layers_are_unfrozen_is_checked():
    """Gradual unfreezing: the head (outside the blocks) trains from the fifth step on, its
    gradients and optimizer state new. Past the checked steps of its plan, that step went
    over the budget with no word; it is now checked, and its excess is warned about (with the
    budget now below the step's least, the next step is refused)."""
    torch.manual_seed(0)
    model = Residual(depth=4, classes=2000)
    model.head.requires_grad_(False)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    xs = [torch.randn(8, 64) for _ in range(6)]
    budget = rt.measure(model, xs[0], optimizer=optimizer).no_checkpoint_step_bytes
    handle = rt.auto_checkpoint(model, memory_budget=budget, optimizer=optimizer)
    peaks = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step, x in enumerate(xs):
            if step == 4:
                model.head.requires_grad_(True)
                optimizer.add_param_group({"params": list(model.head.parameters())})
            try:
                with rt.StepMemoryMeter(model, optimizer, x) as meter:
                    model(x).backward()
                    optimizer.step()
                    optimizer.zero_grad()
            except remat.InputError:
                break
            peaks.append(meter.peak_bytes)
    assert max(peaks[:4]) <= budget < peaks[4], (peaks, budget)
    said = [str(w.message) for w in caught if "over the memory_budget" in str(w.message)]
    assert any(f"measured {peaks[4]} bytes" in message for message in said), said
    handle.remove()


def test_the_first_two_steps_that_follow_a_plan_are_checked():
    torch.manual_seed(0)
    model = Residual(depth=4)
    x = torch.randn(256, 64)
    probe = copy.deepcopy(model)
    measured = rt.measure(probe, x, optimizer=torch.optim.AdamW(probe.parameters()))
    optimizer = torch.optim.AdamW(model.parameters())
    handle = rt.auto_checkpoint(model, memory_budget=_budgets(measured)[1], optimizer=optimizer)
    measured_steps = []
    for _ in range(4):
        loss = model(x)
        measured_steps.append(handle.step_budget.open is not None)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    # The measuring step, then the first two that follow its plan (a check that finds the
    # optimizer step's peak moved plans again, and checks the next two).
    assert measured_steps[:3] == [True, True, True]


def test_print_plan_shows_the_step_against_the_budget():
    torch.manual_seed(0)
    model = Residual(depth=3)
    x = torch.randn(256, 64)
    measured = rt.measure(copy.deepcopy(model), x)
    handle = rt.auto_checkpoint(model, memory_budget=measured.no_checkpoint_step_bytes)
    for _ in range(2):
        model(x).backward()
    text = str(handle.plan)
    assert "training step: predicted peak" in text and "memory_budget" in text
    # The second step is checked, and with no optimizer step it ends only at the next call or
    # here: its pass-through count stays on the dispatch stack until then.
    handle.remove()


@pytest.mark.parametrize(
    "name", ["llama", "qwen2", "mixtral", "gpt2", "bert", "t5", "vit", "convnext", "resnet"]
)
def test_every_zoo_step_fits_three_budgets_bit_for_bit(name):
    pytest.importorskip("transformers")
    pytest.importorskip("timm")
    from zoo import adopt

    zoo, model, _, step, measured = zoo_measured(name)
    _, losses, grads = train(copy.deepcopy(model), step)
    for budget in _budgets(measured):
        trained = copy.deepcopy(model)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            handle = adopt.enable_step(zoo, trained, budget)
            peaks, got_losses, got_grads = train(trained, step)
        assert max(peaks) <= budget, (name, peaks, budget, handle.plan.step)
        said = [str(w.message) for w in caught if "remat" in str(w.message)]
        assert not said, said
        assert same(losses, got_losses) and all(map(same, grads, got_grads)), name


def test_a_measured_region_frees_its_inputs_with_its_backward():
    """The measuring step's regions free what they saved when their backward is done, as a
    checkpoint does, not when Python's cycle collector next runs: no frame outlives the step."""
    import gc

    from torch.utils.checkpoint import _CheckpointFrame

    model = Residual(depth=3)
    x = torch.randn(64, 64)
    handle = rt.auto_checkpoint(model, activation_budget=2**40)
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        model(x).backward()
        frames = [o for o in gc.get_objects() if isinstance(o, _CheckpointFrame)]
    finally:
        if enabled:
            gc.enable()
        handle.remove()
    assert not frames


class _Noting(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def test_the_step_count_leaves_the_users_dispatch_modes_in_place():
    """On the CPU the count is a dispatch mode from the model's call to the step's end: a mode
    the user enters inside that stays, and one the user leaves inside it (whose exit pops the
    top of the stack, the count) is the one taken off when the step ends."""
    inside = StepSegments(torch.device("cpu"), (), optimizer_follows=True)
    inside.begin()
    user = _Noting().__enter__()
    torch.ones(4) + 1
    inside.finish()
    assert _get_current_dispatch_mode_stack() == [user]
    user.__exit__(None, None, None)
    assert _get_current_dispatch_mode_stack() == []

    user = _Noting().__enter__()
    around = StepSegments(torch.device("cpu"), (), optimizer_follows=True)
    around.begin()
    user.__exit__(None, None, None)
    around.finish()
    assert _get_current_dispatch_mode_stack() == []


def test_no_count_is_left_on_the_stack_after_training_or_remove():
    torch.manual_seed(0)
    model = Residual(depth=2)
    x = torch.randn(64, 64)
    handle = rt.auto_checkpoint(model, memory_budget="1GiB")
    for _ in range(3):  # no optimizer: the count passes ops through after each backward
        model(x).backward()
    assert len(_get_current_dispatch_mode_stack()) == 1
    handle.remove()
    assert _get_current_dispatch_mode_stack() == []
    handle.reinstall()
    train(model, lambda m: m(x))  # the optimizer's step ends each measured step
    assert _get_current_dispatch_mode_stack() == []


def test_a_count_left_after_a_backward_does_not_turn_torch_compile_eager():
    """torch.compile runs a frame eagerly while a dispatch mode is on the stack, unless the
    mode says it ignores compiled code. The count a step without an optimizer step leaves
    passes ops through, and must say so: else the user's compiled code silently runs eager."""
    torch.manual_seed(0)
    model = Residual(depth=2)
    handle = rt.auto_checkpoint(model, memory_budget="1GiB")
    for _ in range(3):
        model(torch.randn(64, 64)).backward()
    assert len(_get_current_dispatch_mode_stack()) == 1
    compiled = []

    def backend(graph, example_inputs):
        compiled.append(graph)
        return graph.forward

    doubled = torch.compile(lambda a: a * 2 + 1, backend=backend)
    assert torch.equal(doubled(torch.ones(3)), torch.full((3,), 3.0))
    assert len(compiled) == 1
    handle.remove()


def _counting_aot_eager():
    """aot_eager, counting the graphs it compiles and the calls of their forwards."""
    from torch._dynamo.backends.debugging import aot_eager

    seen = {"graphs": 0, "calls": 0}

    def backend(graph, example_inputs):
        seen["graphs"] += 1
        forward = aot_eager(graph, example_inputs)

        def run(*args):
            seen["calls"] += 1
            return forward(*args)

        return run

    return backend, seen


@pytest.mark.parametrize("compiled", ["model", "blocks"])
def test_torch_compile_compiles_past_the_steps_counted_on_the_cpu(compiled):
    """torch.compile skips a frame for good when it first meets it under a dispatch mode that
    does not ignore compiled code. The CPU steps a memory_budget counts (the first ones of each
    plan) once left the model eager for all training; they now run it compiled, and the count
    sees its ops (aot_eager runs them through the dispatcher)."""
    model, x, losses, grads, measured = _residual_case(steps=5)
    budget = _budgets(measured)[1]
    backend, seen = _counting_aot_eager()
    trained = copy.deepcopy(model)
    handle = rt.auto_checkpoint(trained, memory_budget=budget)
    if compiled == "model":
        run = torch.compile(trained, backend=backend)
    else:
        for i, layer in enumerate(trained.layers):
            trained.layers[i] = torch.compile(layer, backend=backend)
        run = trained
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        peaks, got_losses, got_grads = train(trained, lambda m: run(x), steps=4)
        calls = seen["calls"]
        more_peaks, more_losses, more_grads = train(trained, lambda m: run(x), steps=1)
    assert seen["graphs"] > 0 and seen["calls"] > calls, seen  # the last step ran compiled
    assert max(peaks + more_peaks) <= budget, (peaks, more_peaks, budget, handle.plan)
    torch.testing.assert_close(got_losses + more_losses, losses)
    for expected, got in zip(grads, got_grads + more_grads):
        torch.testing.assert_close(got, expected)
    handle.remove()


def test_compiled_dropout_runs_under_the_cpu_count():
    """Compiled regions with dropout call higher-order operators (run_and_save_rng_state),
    which reach the count once compiled code runs in the steps it counts."""
    torch.manual_seed(0)
    model = Residual(depth=4)
    for layer in model.layers:
        layer.insert(3, torch.nn.Dropout(0.1))
    x = torch.randn(256, 64)
    probe = copy.deepcopy(model)
    measured = rt.measure(probe, x, optimizer=torch.optim.AdamW(probe.parameters()))
    budget = _budgets(measured)[1]
    handle = rt.auto_checkpoint(model, memory_budget=budget)
    backend, seen = _counting_aot_eager()
    run = torch.compile(model, backend=backend)
    peaks, losses, _ = train(model, lambda m: run(x), steps=4)
    assert seen["calls"] > 0 and max(peaks) <= budget, (peaks, budget, handle.plan)
    assert all(torch.isfinite(loss) for loss in losses)
    handle.remove()


def test_a_cpu_count_sees_the_buffers_of_inductor_graphs():
    """Inductor's generated code allocates its CPU buffers outside the dispatcher; under a count
    they are made through it, so the count equals the allocator's peak (torch's profiler)."""
    expand = torch.compile(lambda a: (a.exp() @ a).sin() @ a.cos())
    x = torch.randn(128, 128)
    expand(x)  # compiled before it is metered
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with rt.StepMemoryMeter(x) as meter:
            expand(x)
    assert not meter.saw_inductor
    assert meter.peak_bytes == x.nbytes + allocator_peak(lambda: expand(x))
    assert meter.peak_bytes >= x.nbytes + 3 * x.nbytes  # intermediates are held at once


def test_a_cpu_count_that_cannot_see_an_inductor_graph_says_so(monkeypatch):
    """Where remat cannot find the generated code's namespace (a C++ wrapper), the count may
    be short, and the meter and auto_checkpoint's checks say so."""
    import remat.inductor_buffers

    monkeypatch.setattr(remat.inductor_buffers, "_generated_namespace", lambda *_: None)
    double = torch.compile(lambda a: (a * 2).sin())
    x = torch.randn(256)
    with pytest.warns(RuntimeWarning, match="StepMemoryMeter: peak_bytes may be short"):
        with rt.StepMemoryMeter(x) as meter:
            y = double(x)
    assert meter.saw_inductor
    assert meter.peak_bytes < x.nbytes + y.nbytes  # the output's buffer went unseen
    model = Residual(depth=2)
    rt.auto_checkpoint(model, memory_budget="1GiB")
    loss = torch.compile(lambda logits: (logits * 2).sin().mean())
    with pytest.warns(RuntimeWarning, match="the check of this step's peak may be short"):
        train(model, lambda m: loss(m(torch.randn(8, 64))), steps=2)


def test_an_optimizer_that_runs_the_model_in_its_step_is_named():
    # LBFGS's step() runs a closure of forwards and backwards: measure() raised a TypeError
    # from inside torch, and auto_checkpoint's steps went 17% over the budget with no word.
    model, x, _, _, measured = _residual_case()
    optimizer = torch.optim.LBFGS(model.parameters(), max_iter=2)
    with pytest.raises(ValueError, match=r"optimizer: LBFGS.step\(\) takes a closure"):
        rt.measure(copy.deepcopy(model), x, optimizer=optimizer)
    rt.auto_checkpoint(model, memory_budget=measured.no_checkpoint_step_bytes)

    def closure():
        optimizer.zero_grad()
        loss = model(x).sum()
        loss.backward()
        return loss

    with pytest.warns(RuntimeWarning, match="runs the model inside its step"):
        for _ in range(2):
            optimizer.step(closure)
