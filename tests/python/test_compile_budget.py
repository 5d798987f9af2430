"""torch.compile to a budget in bytes (CPU): ``remat.torch.use(memory_budget=...)``.

On the GPT-style, ResNet-style, MLP-Mixer and Llama-style models, at 5 byte budgets across each
model's range: predicted peak <= budget, the measured peak (the CPU allocator's events under the
profiler) <= the prediction, the measured peak never rises as the budget falls, and gradients
equal eager's. The liveness walk is checked on hand-built graphs, the choice's monotonicity on
synthetic predictions, and a budget below the least prediction raises at compile time.
"""

from __future__ import annotations

import copy
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

import torch._functorch.config as functorch_config  # noqa: E402
from torch import nn  # noqa: E402

from conftest import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
import remat.torch as rt  # noqa: E402
from compile_cases import (  # noqa: E402, F401  (no_survey_left_behind: an autouse fixture)
    MODELS,
    budgets_across,
    build,
    compiled_run,
    grads,
    no_survey_left_behind,
    step,
    with_loss,
)
from remat.compiled import (  # noqa: E402
    BudgetTooSmall,
    measured_peak,
    survey,  # noqa: E402
)
from remat.compiled.budget import OptimizerStepTooLarge  # noqa: E402
from remat.compiled.tradeoff_curve import _default_loss  # noqa: E402
from remat.optimizer_footprint import optimizer_footprint  # noqa: E402
from remat.step_memory import held_at_start  # noqa: E402
from remat.units import format_bytes  # noqa: E402


@pytest.fixture(scope="module", params=sorted(MODELS))
def curve(request):
    """A model's candidate plans, predicted once (remat.torch.tradeoff, no measurements)."""
    model, x = build(request.param)
    result = rt.tradeoff(model, x, backend="aot_eager", measure=0, loss=models.loss)
    torch._dynamo.reset()
    return request.param, result


def test_byte_budgets_hold_and_the_measured_peak_falls_with_the_budget(curve):
    name, result = curve
    # On the ResNet-style model no plan's peak is below keeping everything: recomputing a
    # BatchNorm's input in the backward of the first (largest) stage adds to that stage's peak.
    assert len(result.curve) >= (1 if name == "resnet" else 2), result
    model, x = build(name)
    step(with_loss(model), x)
    eager = grads(model)
    rows = []
    for budget in budgets_across(result):
        solver, predicted, measured, gradients = compiled_run(name, budget)
        rows.append((budget, predicted, measured))
        assert predicted <= budget
        assert measured <= budget, (
            f"{name}: measured {measured} bytes exceeds the budget {budget} by {measured - budget}"
        )
        assert measured <= predicted, f"{name}: measured {measured} > predicted {predicted}"
        for got, want in zip(gradients, eager):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for (_, p_hi, m_hi), (_, p_lo, m_lo) in zip(rows, rows[1:]):
        assert p_lo <= p_hi, rows
        assert m_lo <= m_hi, f"{name}: measured peak rose as the budget fell: {rows}"


def test_gradients_are_bitwise_those_of_torch_own_plan_on_the_same_backend():
    """Recomputing replays the same aten ops: aot_eager's gradients under a tight byte budget
    equal those of torch's default partition bit for bit."""
    torch._dynamo.reset()
    model, x = build("mixer")
    compiled = torch.compile(with_loss(model), backend="aot_eager")
    step(compiled, x)
    reference = grads(model)
    torch._dynamo.reset()
    result = rt.tradeoff(*build("mixer"), backend="aot_eager", measure=0, loss=models.loss)
    low = min(p.predicted_peak for p in result.curve)
    _, _, _, gradients = compiled_run("mixer", low)
    for got, want in zip(gradients, reference):
        assert torch.equal(got, want)


#: Inductor lowers some backward ops into kernels whose buffers live longer than the fx graph's
#: order says, which the walk does not see. Measured: up to 7.6% above the prediction on this
#: test's Llama-style model (2 blocks), 16.2% on the benchmark's (4 blocks, wider).
INDUCTOR_EXCESS = 0.10


def test_inductor_within_its_stated_excess_over_byte_budgets():
    """On inductor the measured peak may exceed the prediction (and so a tight budget) by what
    its lowering adds; the test states that excess and holds it under INDUCTOR_EXCESS, with
    gradients close to eager's, at 3 budgets on the Llama-style model."""
    name = "llama"
    model, x = build(name)
    step(with_loss(model), x)
    eager = grads(model)
    result = rt.tradeoff(*build(name), backend="aot_eager", measure=0, loss=models.loss)
    for budget in budgets_across(result, 3):
        # Said at the compile: the prediction follows aot_eager's order, not inductor's.
        with pytest.warns(UserWarning, match="inductor compiles this graph"):
            _, predicted, measured, gradients = compiled_run(name, budget, backend="inductor")
        excess = measured / budget - 1
        print(
            f"inductor {name}: budget {budget}, predicted {predicted}, measured {measured}, "
            f"excess over the budget {100 * excess:+.1f}%"
        )
        assert predicted <= budget and excess <= INDUCTOR_EXCESS
        for got, want in zip(gradients, eager):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_a_budget_below_every_plan_raises_at_compile_time_naming_the_least_peak(curve):
    name, result = curve
    least = result.start_bytes + min(p.predicted_peak for p in result.points)
    with pytest.raises(BudgetTooSmall, match=f"least predicted peak.*{least} bytes") as raised:
        compiled_run(name, least - result.start_bytes - 1)
    # The step's peak: what it begins holding and the graph's least peak beyond it.
    assert raised.value.start == result.start_bytes
    assert "the step holds as it begins (parameters, buffers, inputs)" in str(raised.value)
    # Not wrapped in dynamo's BackendCompilerFailed, and no frame of dynamo's but its entry.
    assert type(raised.value) is BudgetTooSmall and raised.value.least_peak == least
    assert "not the one remat.torch.tradeoff() surveyed" not in str(raised.value)
    frames = [str(entry.path) for entry in raised.traceback]
    assert sum("torch/_dynamo" in path for path in frames) <= 2, frames
    assert len(frames) <= 12, frames


def test_a_compile_of_another_graph_than_the_survey_is_told_apart():
    """tradeoff() compiles the loss with the model; a user who compiles the model alone (the
    loss outside) partitions another graph, with another least peak, and is told so."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
    x = torch.randn(128, 64)
    result = rt.tradeoff(model, x, backend="aot_eager", measure=0, verbose=False)
    least = min(p.predicted_peak for p in result.points)
    torch._dynamo.reset()
    with (
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget=result.start_bytes + least - 1),
        pytest.raises(BudgetTooSmall, match="not the one remat.torch.tradeoff.. surveyed") as err,
    ):
        torch.compile(model, backend="aot_eager")(x).mean().backward()
    assert f"the curve's least predicted peak is {format_bytes(least)}" in str(err.value)
    # Both beyond the step's start: the graphs' own peaks.
    beyond = err.value.least_peak - err.value.start
    assert f"this graph's is {format_bytes(beyond)}" in str(err.value)
    torch._dynamo.reset()
    with (
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget=2**40),
        pytest.warns(UserWarning, match="not the one remat.torch.tradeoff.. surveyed"),
    ):
        torch.compile(model, backend="aot_eager")(x).mean().backward()
    torch._dynamo.reset()
    with (  # the surveyed graph itself: no warning
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget=2**40),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("error")
        model.zero_grad(set_to_none=True)
        torch.compile(lambda t: _default_loss(model(t)), backend="aot_eager")(x).backward()
    torch._dynamo.reset()
    survey.forget()


def test_tradeoff_says_what_it_does_and_how_long_the_rest_takes(capsys):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU())
    rt.tradeoff(model, torch.randn(128, 64), backend="aot_eager", measure=2)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("remat.torch.tradeoff: compiling (aot_eager)")
    assert "plans predicted in" in lines[1]
    assert "s more (measure=0 skips this)" in lines[2]
    assert all("measured" in line and "predicted" in line for line in lines[3:])
    rt.tradeoff(model, torch.randn(128, 64), backend="aot_eager", measure=0, verbose=False)
    assert capsys.readouterr().err == ""
    torch._dynamo.reset()
    survey.forget()


def test_the_budget_reaches_plans_torch_would_not_make_from_its_ratio():
    """Recomputing every candidate is not the least peak: the curve turns back up, and the
    byte budget's choice at the least peak recomputes fewer ops than ratio 0 does."""
    model = nn.Sequential(
        *[nn.Sequential(nn.Linear(128, 512), nn.GELU(), nn.Linear(512, 128)) for _ in range(4)]
    )
    x = torch.randn(256, 128)
    result = rt.tradeoff(model, x, backend="aot_eager", measure=0, loss=lambda y: y.sum())
    all_recomputed = max(result.points, key=lambda p: p.recomputed_ops)
    least = min(result.points, key=lambda p: p.predicted_peak)
    assert least.predicted_peak < all_recomputed.predicted_peak
    assert least.recomputed_ops < all_recomputed.recomputed_ops


def test_use_restores_everything_it_changed():
    from torch._functorch import partitioners

    before = (
        functorch_config.activation_memory_budget_solver,
        functorch_config.activation_memory_budget,
        partitioners.choose_saved_values_set,
    )
    with rt.use(memory_budget="1GiB") as solver:
        assert solver.memory_budget == 2**30
        assert functorch_config.activation_memory_budget < 1e-6
        assert partitioners.choose_saved_values_set is not before[2]
    after = (
        functorch_config.activation_memory_budget_solver,
        functorch_config.activation_memory_budget,
        partitioners.choose_saved_values_set,
    )
    assert after == before


def test_a_use_entered_again_is_in_place_again():
    # Its settings went in at construction only: a second `with` ran on torch's own.
    model, x = nn.Linear(64, 64), torch.randn(32, 64, requires_grad=True)
    tiny = rt.use(memory_budget=16)
    for _ in range(2):
        torch._dynamo.reset()
        with pytest.raises(Exception, match="least predicted peak"):
            with functorch_config.patch(enable_autograd_cache=False), tiny:
                torch.compile(model, backend="aot_eager")(x).sum().backward()
        assert functorch_config.activation_memory_budget_solver != tiny.knapsack_solver
    torch._dynamo.reset()


def test_a_graph_with_dynamic_sizes_is_planned_at_its_traced_sizes_and_said_so():
    # A smaller last batch recompiles with a symbolic batch size: the liveness walk once
    # crashed on it (an import torch 2.13 no longer has).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    reference = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    full, last = torch.randn(128, 64), torch.randn(100, 64)
    with (
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget="100MB") as solver,
    ):
        compiled(full).sum().backward()
        with pytest.warns(UserWarning, match="dynamic sizes.*dynamic=False"):
            compiled(last).sum().backward()
    for batch in (full, last):
        reference(batch).sum().backward()
    assert len(solver.choices) == 2
    pairs = zip(model.parameters(), reference.parameters())
    assert all(torch.allclose(a.grad, b.grad) for a, b in pairs)
    torch._dynamo.reset()


def test_a_model_with_nothing_to_train_is_named_by_tradeoff_and_fit():
    # The default loss summed no tensor into the int 0: an AttributeError on .backward().
    model = nn.Sequential(nn.Linear(16, 16), nn.GELU()).requires_grad_(False)
    x = torch.randn(8, 16)
    for call in (
        lambda: rt.tradeoff(model, x, backend="aot_eager", verbose=False),
        lambda: rt.fit(model, x, memory_budget="10MB", backend="aot_eager", verbose=False),
    ):
        torch._dynamo.reset()
        with pytest.raises(ValueError, match="loss: no output of the model needs a gradient"):
            call()
    torch._dynamo.reset()


def test_tradeoff_of_a_model_with_a_graph_break_is_the_first_graph_s_unmeasured():
    # Measuring compiled every graph at a budget read off the first one's curve: a bigger
    # second graph raised BudgetTooSmall out of tradeoff() itself.
    class Break(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 64))
            self.b = nn.Sequential(nn.Linear(64, 1024), nn.GELU(), nn.Linear(1024, 64))

        def forward(self, x):
            y = self.a(x)
            torch._dynamo.graph_break()
            return self.b(y)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the second graph partitioned
        result = rt.tradeoff(Break(), torch.randn(128, 64), backend="aot_eager", verbose=False)
    assert result.graphs == 2 and not result.measured
    assert "no point is measured" in str(result)
    torch._dynamo.reset()


def test_plain_calls_replace_each_other_instead_of_stacking():
    from torch._functorch import partitioners

    torch_choice = partitioners.choose_saved_values_set
    ratio = functorch_config.activation_memory_budget
    try:
        rt.use(memory_budget="1GiB")
        second = rt.use(memory_budget="2GiB").knapsack_solver
        guard = partitioners.choose_saved_values_set
        assert guard._remat_unguarded == (torch_choice, ratio)  # wraps torch's, not the first
        model = nn.Linear(8, 8)
        torch._dynamo.reset()
        with functorch_config.patch(enable_autograd_cache=False):
            torch.compile(model, backend="aot_eager")(torch.randn(4, 8)).sum().backward()
        assert len(second.choices) == 1
        rt.use()  # back to torch's ratio: the guard and the routing ratio go
        assert partitioners.choose_saved_values_set is torch_choice
        assert functorch_config.activation_memory_budget == ratio
    finally:
        partitioners.choose_saved_values_set = torch_choice
        functorch_config.activation_memory_budget = ratio
        functorch_config.activation_memory_budget_solver = "dp"
        torch._dynamo.reset()


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"memory_budget": "lots"}, "memory_budget: cannot read 'lots'"),
        ({"memory_budget": -1}, "memory_budget: -1 is not a finite number"),
        ({"memory_budget": "1GiB", "max_candidates": 1}, "max_candidates: expected an int >= 2"),
        # Once only raised when a graph compiled, wrapped in BackendCompilerFailed.
        ({"time_limit": -1}, "time_limit: must be a positive number of seconds"),
        ({"time_limit": float("nan")}, "time_limit: must be a positive number of seconds"),
    ],
)
def test_bad_arguments_name_the_field(kwargs, error):
    with pytest.raises(ValueError, match=error):
        rt.use(**kwargs)


def test_a_time_limit_that_is_not_a_number_is_named_at_the_call():
    with pytest.raises(TypeError, match="time_limit: expected a number"):
        rt.use(time_limit="x")


def test_a_graph_torch_decides_alone_is_still_checked():
    """A graph with no recomputable candidate never reaches the solver; its peak is still
    predicted and a budget below it raises."""
    model = nn.Linear(64, 64)
    x = torch.randn(32, 64, requires_grad=True)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="least predicted peak"):
        with functorch_config.patch(enable_autograd_cache=False), rt.use(memory_budget=16):
            torch.compile(model, backend="aot_eager")(x).sum().backward()
    torch._dynamo.reset()
    with functorch_config.patch(enable_autograd_cache=False), rt.use(memory_budget="1MiB") as s:
        torch.compile(model, backend="aot_eager")(x).sum().backward()
    assert len(s.choices) == 1 and s.choices[0].chosen.peak.peak <= 2**20
    torch._dynamo.reset()


def test_the_bound_is_below_every_plans_peak(monkeypatch):
    """On the four models, every candidate plan's lower bound (Partitioner.lower_bound) is at
    most its predicted peak: with the test above (a bound at most the peak never skips a plan
    that fits), the choice is that of predicting every plan."""
    from remat.compiled.partition import Partitioner

    checked = []
    original = Partitioner.predict

    def checking(self, recomputed, budget, offload=False):
        saved = self.saved_values(recomputed)
        checked.append((self.lower_bound(saved), self.partition_saving(saved).peak.peak))
        moved = set(self.offloadable(saved))
        staying = [node for node in saved if node not in moved]
        checked.append((self.lower_bound(staying), self.partition_saving(saved, True).peak.peak))
        return original(self, recomputed, budget, offload)

    monkeypatch.setattr(Partitioner, "predict", checking)
    for name in sorted(MODELS):
        model, x = build(name)
        before = len(checked)
        rt.tradeoff(model, x, backend="aot_eager", measure=0, loss=models.loss, verbose=False)
        assert len(checked) > before
        torch._dynamo.reset()
    assert all(bound <= peak for bound, peak in checked), checked
    assert any(bound > 0 for bound, _ in checked)


def test_plot_tradeoff(tmp_path, curve):
    import remat.plot

    _, result = curve
    path = remat.plot.plot_tradeoff(result, tmp_path / "tradeoff.png")
    assert path.stat().st_size > 1000
    assert "predicted peak" in str(result)


def _mlp(batch):
    torch.manual_seed(0)
    block = lambda: nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))  # noqa: E731
    return nn.Sequential(*(block() for _ in range(3))), torch.randn(batch, 64)


def test_the_budget_is_the_whole_steps_with_the_optimizer_counted_before_its_state_exists():
    """use(memory_budget=) takes the training step's peak: a graph gets what the step's start
    leaves (the parameters and the batch; with optimizer=, AdamW's state before its first step
    creates it). Every step, the first included, measures within the budget."""
    model, x = _mlp(256)
    loss = lambda y: y.square().mean()  # noqa: E731
    optimizer = torch.optim.AdamW(model.parameters())
    curve = rt.tradeoff(model, x, backend="aot_eager", measure=0, loss=loss, verbose=False)
    state = optimizer_footprint(optimizer).state_bytes
    middle = sorted(p.predicted_peak for p in curve.curve)[len(curve.curve) // 2]
    budget = curve.start_bytes + state + middle
    torch._dynamo.reset()
    with (
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget=budget, optimizer=optimizer) as solver,
    ):
        compiled = torch.compile(lambda t: loss(model(t)), backend="aot_eager")
        for _ in range(3):
            start = held_at_start("cpu", model, optimizer, x)

            def train_step():
                compiled(x).backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            with warnings.catch_warnings():
                warnings.simplefilter("error")  # optimizer= given: nothing to say
                assert start + measured_peak(train_step, "cpu") <= budget
    (choice,) = solver.choices
    assert choice.start_bytes == curve.start_bytes + state
    assert choice.start_bytes + choice.chosen.peak.peak <= budget
    # Without optimizer=, the CPU count sees the graph's inputs only, not the state: the same
    # budget would leave the graph the state's bytes more, and later steps go over.
    torch._dynamo.reset()
    with (
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget=budget) as alone,
    ):
        model.zero_grad(set_to_none=True)
        torch.compile(lambda t: loss(model(t)), backend="aot_eager")(x).backward()
        with pytest.warns(UserWarning, match="planned without its gradients, state and step"):
            optimizer.step()
    assert alone.choices[0].start_bytes == curve.start_bytes
    torch._dynamo.reset()


def test_an_optimizer_step_over_the_budget_is_refused_naming_it():
    """With a small batch AdamW's step is the step's peak: a budget under it is refused at
    compile time, though a plan of the graph would fit, since no plan lowers it."""
    model, x = _mlp(2)
    loss = lambda y: y.square().mean()  # noqa: E731
    optimizer = torch.optim.AdamW(model.parameters())
    footprint = optimizer_footprint(optimizer)
    start = held_at_start("cpu", model, x) + footprint.state_bytes
    peak = start + footprint.gradient_bytes + footprint.step_bytes
    torch._dynamo.reset()
    with (
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget=peak - 1, optimizer=optimizer),
        pytest.raises(rt.BudgetTooSmall, match=f"optimizer's step, .* \\({peak} bytes") as err,
    ):
        torch.compile(lambda t: loss(model(t)), backend="aot_eager")(x).backward()
    assert isinstance(err.value, OptimizerStepTooLarge) and err.value.least_peak == peak
    torch._dynamo.reset()
    with (
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget=peak, optimizer=optimizer) as solver,
    ):
        torch.compile(lambda t: loss(model(t)), backend="aot_eager")(x).backward()
    assert solver.choices[0].start_bytes + solver.choices[0].chosen.peak.peak < peak
    torch._dynamo.reset()


def test_the_optimizer_needs_a_byte_budget_and_must_be_one():
    model, _ = _mlp(2)
    with pytest.raises(ValueError, match="optimizer: counts toward a memory_budget"):
        rt.use(optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(TypeError, match="optimizer: expected a torch.optim.Optimizer, got list"):
        rt.use(memory_budget="1GiB", optimizer=[])
