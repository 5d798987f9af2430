"""The torch.compile test models and one compiled step at a budget, shared by the budget and
fit() tests."""

from __future__ import annotations

import sys

import pytest
import torch
import torch._functorch.config as functorch_config

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
import remat.torch as rt  # noqa: E402
from remat.compiled import measured_peak, survey  # noqa: E402
from remat.step_memory import held_at_start  # noqa: E402

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
    """(solver, predicted peak, measured peak, gradients) of one compiled step at ``budget``
    beyond what the step holds as it begins (the model and the input): the curve's unit, and
    the measured one's. use() takes the whole step's peak: it is given the start too."""
    torch._dynamo.reset()
    model, x = build(name)
    start = held_at_start("cpu", model, x)
    with (
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget=start + budget) as solver,
    ):
        compiled = torch.compile(with_loss(model), backend=backend)
        step(compiled, x)
        model.zero_grad(set_to_none=True)
        measured = measured_peak(lambda: step(compiled, x))
        gradients = grads(model)
    assert len(solver.choices) == 1, "one graph, one decision"
    assert solver.choices[0].start_bytes == start
    return solver, solver.choices[0].chosen.peak.peak, measured, gradients


def budgets_across(result, count=5):
    """``count`` budgets from above the least-recompute plan's peak down to the least peak (on a
    one-point curve, from 20% above it)."""
    high = max(p.predicted_peak for p in result.curve)
    low = min(p.predicted_peak for p in result.curve)
    if high == low:
        high = int(low * 1.2)
    return [int(high * 1.01 - (high * 1.01 - low) * k / (count - 1)) for k in range(count)]


@pytest.fixture(autouse=True)
def no_survey_left_behind():
    """A survey is remembered for the process (see remat.compiled.survey): one test's curve
    must not make another test's compiles warn. Autouse where a test module imports it."""
    yield
    survey.forget()
