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
from zoo.training import differences, metered_within, pair, train  # noqa: E402

# The least budget on every model at both attention implementations where they differ; a tight
# and a loose one on each model at its default.
CASES = [(name, a, 0.0) for name, z in ZOO.items() for a in z.attention] + [
    (name, z.attention[0], f) for name, z in ZOO.items() for f in (0.3, 1.0)
]


def _remat_warnings(caught):
    return [str(w.message) for w in caught if "remat" in str(w.message)]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", ["llama", "gpt2", "t5", "convnext", "resnet"])
def test_zoo_model_offloads_bit_for_bit_within_its_budget(name):
    """Offload plans (auto_checkpoint(..., offload=True), copies between host tensors on the
    CPU) at a budget with room to offload: exact, and the blocks' measured device bytes within
    the prediction. (The zoo's chains of 2-4 blocks peak at their last block, so moving inputs
    buys nothing below keep/recompute's least here: test_offload_run.py covers that.)"""
    zoo = ZOO[name]
    model, plain = pair(zoo, zoo.attention[0])
    measured = adopt.measure(zoo, model)
    least, everything = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
    budget = least + int(0.6 * (everything - least))
    expected = train(zoo, plain)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handle = adopt.enable(zoo, model, budget, offload=True, offload_bandwidth="1TB/s")
        got = train(zoo, model, blocks=adopt.block_list(zoo, model))
    remat_warnings = _remat_warnings(caught)
    assert not remat_warnings and not handle.warnings, remat_warnings or handle.warnings
    assert differences(got, expected) == []
    assert handle.plan.offloaded or handle.plan.inputs_offloaded, handle.plan
    metered_within(got, handle.plan, budget)


@pytest.mark.parametrize("name,attention,fraction", CASES)
def test_zoo_model_trains_bit_for_bit_within_its_budget(name, attention, fraction):
    zoo = ZOO[name]
    model, plain = pair(zoo, attention)
    measured = adopt.measure(zoo, model)
    least, everything = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
    budget = least + int(fraction * (everything - least))
    expected = train(zoo, plain)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handle = adopt.enable(zoo, model, budget)
        got = train(zoo, model, blocks=adopt.block_list(zoo, model))
    remat_warnings = _remat_warnings(caught)
    assert not remat_warnings and not handle.warnings, remat_warnings or handle.warnings
    assert differences(got, expected) == []
    metered_within(got, handle.plan, budget)


@pytest.mark.parametrize("name", ["llama", "gpt2", "t5"])
def test_a_default_cache_is_dropped_with_a_warning_that_names_it(name):
    # With use_cache at its default (True), the blocks got a cache that each call appends to: a
    # block re-run in backward appended again and read past its end (Llama: "start (640) +
    # length (128) exceeds dimension size (640)"); GPT-2 passes it positionally.
    zoo = ZOO[name]
    model, plain = pair(zoo, "sdpa")
    blocks = adopt.block_list(zoo, model)
    handle = rt.auto_checkpoint(model, activation_budget="1GiB", blocks=blocks)
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
    with pytest.raises(ValueError, match=r"model\.activation_checkpointing_disable\(\)"):
        remat.integrations.transformers.enable(llama, activation_budget="1GiB")
    with pytest.raises(ValueError, match="GradientCheckpointingLayer"):
        remat.integrations.transformers.enable(torch.nn.Linear(2, 2), activation_budget="1GiB")
    vit = ZOO["vit"].build("default")
    vit.set_grad_checkpointing(True)
    with pytest.raises(ValueError, match="set_grad_checkpointing"):
        remat.integrations.timm.enable(vit, activation_budget="1GiB")
    convnext = ZOO["convnext"].build("default")
    assert remat.integrations.timm.find_blocks(convnext) == [
        b for stage in convnext.stages for b in stage.blocks
    ]


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


def _trainer_run(model, tmp_path, label):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    g = torch.Generator().manual_seed(4)
    rows = [
        {"input_ids": ids, "labels": ids} for ids in torch.randint(0, 512, (8, 32), generator=g)
    ]
    arguments = transformers.TrainingArguments(
        output_dir=str(tmp_path / label),
        max_steps=3,
        per_device_train_batch_size=2,
        learning_rate=1e-3,
        seed=7,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        logging_strategy="steps",
        logging_steps=1,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=rows)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_the_transformers_integration_trains_under_the_trainer_bit_for_bit(tmp_path):
    # GPT-2 with dropout, through the Trainer's own loop (its seeding, data loader, optimizer,
    # gradient clipping): the same losses and weights as the Trainer without remat.
    model, plain = pair(ZOO["gpt2"], "sdpa")
    handle = remat.integrations.transformers.enable(model, activation_budget="2MiB")
    expected = _trainer_run(plain, tmp_path, "plain")
    got = _trainer_run(model, tmp_path, "remat")
    assert got[0] == expected[0] and len(got[0]) == 3
    assert all(torch.equal(got[1][k], expected[1][k]) for k in expected[1])
    assert handle.plan is not None and handle.plan.regions  # 2 MiB needs regions
    assert not handle.warnings


def test_a_dotted_path_may_start_at_the_hugging_face_models_own_model_member():
    # LlamaForCausalLM keeps its layers at model.layers; "model." was always taken as the root,
    # so blocks="model.layers" failed ("model has no member 'layers'").
    llama = ZOO["llama"].build("sdpa")
    assert rt.find_blocks(llama, "model.layers").modules == tuple(llama.model.layers)
    assert rt.find_blocks(llama, "model.model.layers").modules == tuple(llama.model.layers)
    with pytest.raises(ValueError, match="has no member 'layerz'"):
        rt.find_blocks(llama, "model.layerz")


def test_a_meter_hidden_by_an_inner_hook_fails_the_zoo_check():
    """The check the zoo tests make cannot pass on a meter that saw nothing: an inner
    saved-tensor hook around the blocks (as remat's first step once pushed on every step of a
    chain model) hides every save from the meter, and the check fails on it."""
    zoo = ZOO["vit"]
    model = zoo.build("default")
    budget = adopt.measure(zoo, model).no_checkpoint_bytes
    handle = adopt.enable(zoo, model, budget)
    blocks = adopt.block_list(zoo, model)
    metered_within(train(zoo, model, blocks=blocks), handle.plan, budget)
    hiding = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    model.register_forward_pre_hook(lambda *_: hiding.__enter__())
    model.register_forward_hook(lambda *_: hiding.__exit__(None, None, None))
    hidden = train(zoo, model, blocks=blocks)
    assert hidden.saved_peaks and max(hidden.saved_peaks) == 0
    with pytest.raises(AssertionError, match="the meter read 0 on a plan that saves"):
        metered_within(hidden, handle.plan, budget)
