"""auto_checkpoint on real library models (transformers, timm, torchvision), built from small
configs as the libraries ship them: 3 SGD steps bit for bit equal to plain training, measured
saved bytes within the prediction and the prediction within the budget, and no warning, at the
least budget, a tight one and a loose one. The quick set runs here; `bench/zoo.py` runs every
model at both attention implementations and compares step times."""

from __future__ import annotations

import copy
import io
import pickle
import warnings

import pytest
import torch

from zoo import torchvision_cpu  # noqa: F401, E402  (before torchvision, timm, transformers)

pytest.importorskip("transformers")
pytest.importorskip("timm")

import remat.integrations.timm  # noqa: E402
import remat.integrations.transformers  # noqa: E402
import remat.torch as rt  # noqa: E402
from zoo import adopt  # noqa: E402
from zoo.models import ZOO  # noqa: E402
from zoo.training import differences, pair, train  # noqa: E402

# The least budget on every model at both attention implementations where they differ; a tight
# and a loose one on each model at its default.
CASES = [(name, a, 0.0) for name, z in ZOO.items() for a in z.attention] + [
    (name, z.attention[0], f) for name, z in ZOO.items() for f in (0.3, 1.0)
]
# Known: T5 at a tight budget measures 8 KiB (one 1 x heads x 16 x 32 float tensor, the size of
# the cross-attention position bias the first decoder block makes and returns) over the
# prediction. Strict, so that the fix shows.
_T5_TIGHT = pytest.mark.xfail(
    strict=True, reason="T5 at a tight budget: 8 KiB over the prediction, not yet explained"
)
CASES = [pytest.param(*c, marks=_T5_TIGHT) if c == ("t5", "sdpa", 0.3) else c for c in CASES]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name,attention,fraction", CASES)
def test_zoo_model_trains_bit_for_bit_within_its_budget(name, attention, fraction):
    zoo = ZOO[name]
    model, plain = pair(zoo, attention)
    measured = adopt.measure(zoo, model)
    least, everything = measured.least_budget_bytes, measured.no_checkpoint_bytes
    budget = least + int(fraction * (everything - least))
    expected = train(zoo, plain)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handle = adopt.enable(zoo, model, budget)
        got = train(zoo, model, blocks=adopt.block_list(zoo, model))
    remat_warnings = [str(w.message) for w in caught if "remat" in str(w.message)]
    assert not remat_warnings and not handle.warnings, remat_warnings or handle.warnings
    assert differences(got, expected) == []
    predicted = handle.plan.predicted_peak_bytes
    assert predicted <= budget
    # Known gap (the real-models issue, item 3): the per-block prediction leaves out the last
    # block's output, which the model's head saves. Bounded here by that output, and checked
    # exactly in test_measured_saved_bytes_are_within_the_prediction_exactly (strict xfail).
    gap = _last_output_bytes(zoo, model)
    assert max(got.saved_peaks) <= predicted + gap, (got.saved_peaks, gap, handle.plan)


def _last_output_bytes(zoo, model) -> int:
    outputs = []
    last = adopt.block_list(zoo, model)[-1]
    hook = last.register_forward_hook(lambda m, a, o: outputs.append(o))
    args, kwargs = zoo.batch()
    with torch.no_grad():
        model(*args, **kwargs)
    hook.remove()
    from remat.eager._runtime import _tensors

    return sum(t.untyped_storage().nbytes() for t in _tensors(outputs[-1]))


@pytest.mark.xfail(strict=True, reason="the last block's output, saved by the head, is not predicted")
def test_measured_saved_bytes_are_within_the_prediction_exactly():
    zoo = ZOO["llama"]
    model, _ = pair(zoo, "sdpa")
    least = adopt.measure(zoo, model).least_budget_bytes
    handle = adopt.enable(zoo, model, least)
    got = train(zoo, model, blocks=adopt.block_list(zoo, model))
    assert max(got.saved_peaks) <= handle.plan.predicted_peak_bytes


def _remat_warnings(caught):
    return [str(w.message) for w in caught if "remat" in str(w.message)]


@pytest.mark.parametrize("name", ["llama", "gpt2", "t5"])
def test_a_default_cache_is_dropped_with_a_warning_that_names_it(name):
    # With use_cache at its default (True), the blocks got a cache that each call appends to: a
    # block re-run in backward appended again and read past its end (Llama: "start (640) +
    # length (128) exceeds dimension size (640)"); GPT-2 passes it positionally.
    zoo = ZOO[name]
    model, plain = pair(zoo, "sdpa")
    blocks = adopt.block_list(zoo, model)
    handle = rt.auto_checkpoint(model, memory_budget="1GiB", blocks=blocks)
    expected = train(zoo, plain)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = train(zoo, model)
    assert differences(got, expected) == []
    messages = _remat_warnings(caught)
    assert messages == [f"remat.auto_checkpoint: {w}" for w in handle.warnings], messages
    assert len(messages) == 1
    assert "cache" in messages[0] and "Hugging Face's gradient checkpointing" in messages[0]


def test_the_integrations_find_both_stacks_and_refuse_the_library_checkpointing():
    t5 = ZOO["t5"].build("sdpa")
    layers = remat.integrations.transformers.find_layers(t5)
    assert layers == list(t5.encoder.block) + list(t5.decoder.block)
    llama = ZOO["llama"].build("sdpa")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gradient_checkpointing_enable is deprecated in 5.x
        llama.gradient_checkpointing_enable()
    with pytest.raises(ValueError, match="gradient_checkpointing_disable"):
        remat.integrations.transformers.enable(llama, memory_budget="1GiB")
    with pytest.raises(ValueError, match="GradientCheckpointingLayer"):
        remat.integrations.transformers.enable(torch.nn.Linear(2, 2), memory_budget="1GiB")
    vit = ZOO["vit"].build("default")
    vit.set_grad_checkpointing(True)
    with pytest.raises(ValueError, match="set_grad_checkpointing"):
        remat.integrations.timm.enable(vit, memory_budget="1GiB")
    convnext = ZOO["convnext"].build("default")
    assert remat.integrations.timm.find_blocks(convnext) == list(convnext.stages)


def test_a_wrapped_model_refuses_pickling_by_name_and_pickles_after_remove():
    zoo = ZOO["llama"]
    model = zoo.build("sdpa")
    handle = adopt.enable(zoo, model, 2**30)
    train(zoo, model, steps=1)
    for save in (lambda: torch.save(model, io.BytesIO()), lambda: copy.deepcopy(model)):
        with pytest.raises(TypeError, match=r"call handle\.remove\(\) first"):
            save()
    plans = pickle.loads(pickle.dumps(handle.plans))
    assert [p.regions for p in plans.values()] == [p.regions for p in handle.plans.values()]
    handle.remove()
    torch.save(model, io.BytesIO())
    copy.deepcopy(model)
    handle.reinstall()
    assert len(train(zoo, model, steps=1).losses) == 1
