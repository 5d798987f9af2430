"""auto_checkpoint(memory_budget=..., first_step="trace"): the first step for new inputs
follows a plan made from the step traced on fake tensors, times its block calls, and the next
step plans again with those times. Every step, the first included, measures within the budget
(StepMemoryMeter, which agrees with torch's MemTracker), with plain training's gradients; a
step that cannot be traced measures as before, saying why."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import remat.torch as rt
from residual import Residual
from step_cases import same, train, zoo_measured
from zoo import torchvision_cpu  # noqa: F401  (before transformers, which imports torchvision)


def _measured_calls(handle):
    """Counts the block calls the handle's recorder measures (none, when the plan is traced)."""
    calls = []
    measure_and_run = handle.recorder.measure_and_run

    def counted(*args, **kwargs):
        calls.append(1)
        return measure_and_run(*args, **kwargs)

    handle.recorder.measure_and_run = counted
    return calls


def _residual_budgets():
    torch.manual_seed(0)
    model = Residual(depth=6)
    x = torch.randn(64, 64)
    probe = copy.deepcopy(model)
    measured = rt.measure(probe, x, optimizer=torch.optim.AdamW(probe.parameters()))
    least, plain = measured.least_budget_bytes, measured.no_checkpoint_step_bytes
    return model, x, [least, (least + plain) // 2, plain]


def test_the_first_step_follows_a_traced_plan_within_the_budget_bit_for_bit():
    model, x, budgets = _residual_budgets()
    step = lambda m: m(x).sum()  # noqa: E731
    _, losses, grads = train(copy.deepcopy(model), step)
    for budget in budgets:
        trained = copy.deepcopy(model)
        optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-3)
        handle = rt.auto_checkpoint(
            trained, memory_budget=budget, optimizer=optimizer, first_step="trace"
        )
        measured = _measured_calls(handle)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # nothing to say
            peaks, got_losses, got_grads = train(trained, step, optimizer=optimizer)
        assert not measured, "a traced first step measures no block"
        assert max(peaks) <= budget, (peaks, budget)
        assert same(losses, got_losses) and all(map(same, grads, got_grads))
        handle.remove()


def test_the_second_step_plans_again_with_the_first_steps_times():
    model, x, budgets = _residual_budgets()
    handle = rt.auto_checkpoint(model, memory_budget=budgets[1], first_step="trace")
    model(x).sum().backward()
    (key,) = handle.planner.profiles
    traced = handle.planner.profiles[key][0]
    model(x).sum().backward()  # plans again, with the times the first step took
    timed = handle.planner.profiles[key][0]
    assert [l.saved_bytes for l in timed.layers] == [l.saved_bytes for l in traced.layers]
    assert [l.forward_seconds for l in timed.layers] != [l.forward_seconds for l in traced.layers]
    assert all(l.forward_seconds > 0 for l in timed.layers)
    handle.remove()


class _Picky(nn.Module):
    """A block whose output's shape depends on its data: no fake tensor can say it."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(32, 32)

    def forward(self, x):
        kept = torch.nonzero(x[:, 0] > -10).flatten()  # every row, as only the data says
        return x + torch.tanh(self.linear(x[kept]))


def test_a_step_that_cannot_be_traced_measures_saying_why():
    torch.manual_seed(0)
    model = nn.Sequential(*[_Picky() for _ in range(3)])
    x = torch.randn(16, 32)
    plain = copy.deepcopy(model)
    plain(x).sum().backward()
    handle = rt.auto_checkpoint(model, memory_budget="1GiB", first_step="trace")
    with pytest.warns(RuntimeWarning, match="could not be traced on fake tensors .*nonzero"):
        model(x).sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), plain.parameters()))
    assert handle.plan is not None
    handle.remove()


def test_the_users_hooks_and_meters_do_not_see_the_trace():
    """The trace runs on a copy without remat's wrappers: the model keeps its own hooks, the
    blocks stay wrapped, and a meter around the step counts none of the fakes."""
    model, x, budgets = _residual_budgets()
    seen = []
    model.register_forward_hook(lambda m, a, out: seen.append(type(out)))
    handle = rt.auto_checkpoint(model, memory_budget=budgets[0], first_step="trace")
    with rt.StepMemoryMeter(model) as meter:
        model(x).sum().backward()
    assert meter.peak_bytes <= budgets[0]
    assert torch.Tensor in seen
    handle.remove()


@pytest.mark.parametrize(
    "name", ["llama", "qwen2", "mixtral", "gpt2", "bert", "t5", "vit", "convnext", "resnet"]
)
def test_every_zoo_step_fits_the_budget_traced_bit_for_bit(name):
    """At measure()'s least budget and halfway to its no-checkpoint one."""
    pytest.importorskip("transformers")
    pytest.importorskip("timm")
    from zoo import adopt

    zoo, model, _, step, measured = zoo_measured(name)
    _, losses, grads = train(copy.deepcopy(model), step)
    least = measured.least_budget_bytes
    for budget in (least, (least + measured.no_checkpoint_step_bytes) // 2):
        trained = copy.deepcopy(model)
        optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-3)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            handle = adopt.enable_step(
                zoo, trained, budget, optimizer=optimizer, first_step="trace"
            )
            counted = _measured_calls(handle)
            peaks, got_losses, got_grads = train(trained, step, optimizer=optimizer)
        said = [str(w.message) for w in caught if "remat" in str(w.message)]
        assert not said, said
        assert not counted, f"{name}: the first step measured"
        assert max(peaks) <= budget, (name, peaks, budget)
        assert same(losses, got_losses) and all(map(same, grads, got_grads)), name


def test_first_step_values_are_checked():
    model = Residual(depth=2)
    with pytest.raises(ValueError, match="first_step: expected 'measure' or 'trace'"):
        rt.auto_checkpoint(model, memory_budget="1GiB", first_step="guess")
    with pytest.raises(ValueError, match="first_step: 'trace' plans the first step"):
        rt.auto_checkpoint(model, activation_budget="1GiB", first_step="trace")
    with pytest.raises(ValueError, match="first_step: 'trace' plans without offloading"):
        rt.auto_checkpoint(model, memory_budget="1GiB", first_step="trace", offload=True)


def test_a_budget_below_the_least_is_refused_at_the_first_call():
    """The trace plans before the first step runs: a budget one byte under measure()'s least
    is refused at the model's call, naming that least (the optimizer's state to come counted)."""
    import remat

    model, x, budgets = _residual_budgets()
    optimizer = torch.optim.AdamW(model.parameters())
    handle = rt.auto_checkpoint(
        model, memory_budget=budgets[0] - 1, optimizer=optimizer, first_step="trace"
    )
    with pytest.raises(remat.InputError, match=f"least peak of this training step, {budgets[0]}"):
        model(x)
    assert all(p.grad is None for p in model.parameters()) and not optimizer.state
    handle.remove()
