"""CheckpointOptions: auto_checkpoint's options, read and checked once at the call."""

import pytest
import torch
from torch import nn

import remat.torch
from remat.eager.planning.offload import OffloadSettings
from remat.integrations import transformers as hf_integration
from zoo import torchvision_cpu  # noqa: F401  (before transformers, which imports torchvision)


def _model() -> nn.Module:
    return nn.Sequential(*(nn.Linear(8, 8) for _ in range(3)))


def test_the_keywords_are_read_into_one_dataclass_with_offload_inside():
    options = remat.torch.CheckpointOptions.of(
        slots=64, granularity="block", offload=True, host_budget="1MiB", offload_bandwidth="1GB/s"
    )
    assert options.slots == 64 and options.granularity == "block"
    assert options.offload == OffloadSettings(mode=True, host_budget=1 << 20, bandwidth=1e9)
    assert remat.torch.CheckpointOptions.of() == remat.torch.CheckpointOptions()


def test_the_handle_holds_the_options_it_was_given():
    model = _model()
    handle = remat.torch.auto_checkpoint(
        model, activation_budget="1MiB", blocks=list(model), slots=32, tune=False
    )
    try:
        assert handle.options.slots == 32 and handle.options.tune is False
        assert handle.options.blocks == list(model)
    finally:
        handle.remove()


def test_an_unknown_option_is_named_with_the_closest_one():
    with pytest.raises(TypeError, match=r"'slot' \(did you mean slots=\?\)"):
        remat.torch.auto_checkpoint(_model(), memory_budget="1GiB", slot=3)
    with pytest.raises(TypeError, match="'colour'; its options are blocks, example_inputs"):
        remat.torch.auto_checkpoint(_model(), memory_budget="1GiB", colour=3)


@pytest.mark.parametrize(
    "keywords, message",
    [
        ({"granularity": "layer"}, "granularity: expected 'op' or 'block'"),
        ({"slots": 0}, "slots: expected a whole number"),
        ({"microbatches_in_flight": 2.5}, "microbatches_in_flight: expected a whole number"),
        ({"offload": "yes"}, "offload: expected False, 'auto' or True"),
        ({"offload": True, "microbatches_in_flight": 2}, "offload: plans for a pipeline stage"),
        ({"host_budget": "lots"}, "host_budget"),
        (
            {"example_inputs": torch.ones(2)},
            r"example_inputs: expected a tuple .* \(write example_inputs=\(x,\)\)",
        ),
        ({"example_kwargs": [1]}, "example_kwargs: expected a dict"),
        ({"plan_group": "everyone"}, "plan_group"),
    ],
)
def test_each_bad_value_is_refused_at_the_call_naming_its_field(keywords, message):
    model = _model()
    with pytest.raises((TypeError, ValueError), match=message):
        remat.torch.auto_checkpoint(model, memory_budget="1GiB", **keywords)
    assert "forward" not in vars(model[0])  # nothing was wrapped


def test_the_integrations_take_the_same_options():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    model = transformers.LlamaForCausalLM(config)
    with pytest.raises(TypeError, match=r"did you mean granularity=\?"):
        hf_integration.enable(model, memory_budget="1GiB", granulariy="op")
    handle = hf_integration.enable(model, memory_budget="1GiB", granularity="block")
    try:
        assert handle.options.granularity == "block"
    finally:
        handle.remove()
