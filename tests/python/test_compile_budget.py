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
from remat.compiled import (  # noqa: E402
    BudgetTooSmall,
    measured_peak,
    survey,  # noqa: E402
)
from remat.compiled.tradeoff_curve import _default_loss  # noqa: E402
from remat.units import format_bytes  # noqa: E402

MODELS = {
    "gpt": lambda: models.make_gpt(depth=2, width=64, heads=4, seq=32, batch=4, dropout=0.0),
    "resnet": lambda: models.make_resnet(per_stage=1, batch=4, size=16),
    "mixer": lambda: models.make_mixer(depth=2, width=64, patch=4, size=16, batch=8),
    "llama": lambda: models.make_llama(depth=2, width=64, heads=4, seq=32, batch=4, vocab=128),
}


def build(name):
    torch.manual_seed(0)
    model, _, x = MODELS[name]()
    return model, x


def step(fn, x):
    fn(x).backward()


def with_loss(model):
    """The model and its loss, compiled together so the step's peak is the graph's."""
    return lambda x: models.loss(model(x))


def grads(model):
    return [p.grad.clone() for p in model.parameters()]


def compiled_run(name, budget, backend="aot_eager"):
    """(solver, predicted peak, measured peak, gradients) of one compiled step at ``budget``."""
    torch._dynamo.reset()
    model, x = build(name)
    with (
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget=budget) as solver,
    ):
        compiled = torch.compile(with_loss(model), backend=backend)
        step(compiled, x)
        model.zero_grad(set_to_none=True)
        measured = measured_peak(lambda: step(compiled, x))
        gradients = grads(model)
    assert len(solver.choices) == 1, "one graph, one decision"
    return solver, solver.choices[0].chosen.peak.peak, measured, gradients


@pytest.fixture(scope="module", params=sorted(MODELS))
def curve(request):
    """A model's candidate plans, predicted once (remat.torch.tradeoff, no measurements)."""
    model, x = build(request.param)
    result = rt.tradeoff(model, x, backend="aot_eager", measure=0, loss=models.loss)
    torch._dynamo.reset()
    return request.param, result


@pytest.fixture(autouse=True)
def _no_survey_left_behind():
    """A survey is remembered for the process (see remat.compiled.survey): one test's curve
    must not make another test's compiles warn."""
    yield
    survey.forget()


def budgets_across(result, count=5):
    """``count`` budgets from above the least-recompute plan's peak down to the least peak (on a
    one-point curve, from 20% above it)."""
    high = max(p.predicted_peak for p in result.curve)
    low = min(p.predicted_peak for p in result.curve)
    if high == low:
        high = int(low * 1.2)
    return [int(high * 1.01 - (high * 1.01 - low) * k / (count - 1)) for k in range(count)]


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


def test_fit_finds_a_budget_that_holds_as_measured_on_inductor(capsys):
    """On the Llama-style model inductor's step measures above the prediction (one more
    logits-sized buffer at the backward's peak): between the two, use() alone misses the budget
    as measured, and fit() retries until a compile measures within it."""
    model, x = build("llama")
    result = rt.tradeoff(model, x, backend="aot_eager", measure=0, loss=models.loss, verbose=0)
    least = min(p.predicted_peak for p in result.points)
    high = max(p.predicted_peak for p in result.curve)
    budget = (least + high) // 2
    torch._dynamo.reset()
    found = rt.fit(model, x, memory_budget=budget, loss=models.loss)
    assert found.measured <= budget and found.attempts[-1].target == found.memory_budget
    assert all(a.measured > budget for a in found.attempts[:-1])
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == len(found.attempts) and "measured" in lines[-1]
    # The target it found holds when compiled again (the plan is deterministic), and use()
    # does not warn about inductor for a target fit() measured.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _, predicted, measured, _ = compiled_run("llama", found.memory_budget, backend="inductor")
    assert measured <= budget and predicted <= found.memory_budget
    assert not [w for w in caught if "inductor compiles this graph" in str(w.message)]
    with pytest.raises(rt.BudgetNotMet, match="the least predicted peak of this compile is"):
        rt.fit(model, x, memory_budget=least // 3, loss=models.loss, verbose=False)


def test_fit_tries_the_least_plan_when_every_plan_is_predicted_over_the_budget():
    # It refused after 0 compiles, though inductor's step measures under the prediction: the
    # least plan of this MLP is predicted at 1.64 MB and measures 1.18 MB.
    torch.manual_seed(0)
    block = lambda: nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))  # noqa: E731
    model, x = nn.Sequential(*(block() for _ in range(3))), torch.randn(256, 64)
    loss = lambda y: y.square().mean()  # noqa: E731
    torch._dynamo.reset()
    with pytest.raises(rt.BudgetTooSmall) as refused:
        with functorch_config.patch(enable_autograd_cache=False), rt.use(memory_budget=1):
            torch.compile(lambda t: loss(model(t)))(x).backward()
    least = refused.value.least_peak
    torch._dynamo.reset()
    found = rt.fit(model, x, memory_budget=int(0.9 * least), loss=loss, verbose=False)
    assert found.memory_budget == least and found.measured <= 0.9 * least
    assert len(found.attempts) == 1


@pytest.mark.parametrize("name", sorted(MODELS))
def test_fit_holds_each_budget_on_inductor_as_the_budget_falls(name):
    """On inductor, at 5 budgets from twice the highest predicted peak down to the least (the
    ResNet-style test model's step measures 1.46 times its prediction there):
    fit() meets each as measured or refuses it, naming a least measured peak above it; what it
    meets never measures more as the budget falls; and a step compiled at the lowest target it
    found has eager's gradients."""
    model, x = build(name)
    step(with_loss(model), x)
    eager = grads(model)
    result = rt.tradeoff(*build(name), backend="inductor", measure=0, loss=models.loss, verbose=0)
    high = 2 * max(p.predicted_peak for p in result.curve)
    low = min(p.predicted_peak for p in result.curve)
    met = []
    for budget in [high - (high - low) * k // 4 for k in range(5)]:
        torch._dynamo.reset()
        try:
            found = rt.fit(*build(name), memory_budget=budget, loss=models.loss, verbose=False)
        except rt.BudgetNotMet as refused:  # no plan measured within it (or none predicted)
            least = min((a.measured for a in refused.attempts), default=None)
            assert least is None or least > budget, str(refused)
            continue
        # A target above the budget is the least plan's (tried when all are predicted over).
        assert found.measured <= budget and found.memory_budget <= max(budget, low)
        met.append((budget, found.measured, found.memory_budget))
    assert met, f"{name}: no budget met, even at twice every plan's prediction"
    measured = [m for _, m, _ in met]
    assert measured == sorted(measured, reverse=True), met
    _, _, target = met[-1]
    _, _, _, gradients = compiled_run(name, target, backend="inductor")
    for got, want in zip(gradients, eager):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_fit_holds_on_a_hugging_face_decoder_under_inductor():
    """A Hugging Face LlamaForCausalLM built from a small config (masks, rotary embeddings,
    the library's own loss), compiled with inductor: fit() finds a target under which a step
    measures within the budget, its gradients match eager's, and a budget under every plan's
    prediction is refused naming the least predicted peak. Every plan of this graph predicts
    the same peak (the parameters' gradients and the logits, which the knapsack does not
    decide, set it), so one budget that holds and one that cannot are the cases."""
    pytest.importorskip("transformers")
    from zoo.models import ZOO

    zoo = ZOO["llama"]
    torch.manual_seed(0)
    model = zoo.build("sdpa")
    model.config.use_cache = False
    for module in model.modules():  # compiled and eager runs draw differently
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    model.config.attention_dropout = 0.0
    args, kwargs = zoo.batch()
    budget = 64 << 20
    torch._dynamo.reset()
    found = rt.fit(model, *args, memory_budget=budget, loss=zoo.loss, verbose=False, **kwargs)
    assert found.measured <= budget and found.memory_budget <= budget
    torch._dynamo.reset()
    model.zero_grad(set_to_none=True)
    with functorch_config.patch(enable_autograd_cache=False):
        with rt.use(memory_budget=found.memory_budget):
            compiled = torch.compile(lambda *a, **k: zoo.loss(model(*a, **k)), backend="inductor")
            compiled(*args, **kwargs).backward()
    got = grads(model)
    model.zero_grad(set_to_none=True)
    zoo.loss(model(*args, **kwargs)).backward()
    for a, b in zip(got, grads(model)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()
    with pytest.raises(rt.BudgetNotMet, match="the least predicted peak of this compile is"):
        rt.fit(
            model, *args, memory_budget=found.measured // 2, loss=zoo.loss, verbose=False, **kwargs
        )


def test_a_budget_below_every_plan_raises_at_compile_time_naming_the_least_peak(curve):
    name, result = curve
    least = min(p.predicted_peak for p in result.points)
    with pytest.raises(BudgetTooSmall, match=f"least predicted peak.*{least} bytes") as raised:
        compiled_run(name, least - 1)
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
        rt.use(memory_budget=least - 1),
        pytest.raises(BudgetTooSmall, match="not the one remat.torch.tradeoff.. surveyed") as err,
    ):
        torch.compile(model, backend="aot_eager")(x).mean().backward()
    assert f"the curve's least predicted peak is {format_bytes(least)}" in str(err.value)
    assert f"this graph's is {format_bytes(err.value.least_peak)}" in str(err.value)
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
