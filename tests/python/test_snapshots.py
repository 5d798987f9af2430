"""Mapping arguments a block writes into (remat.eager.snapshots): the call writes into the real
mapping, its re-run in backward and the measuring runs into copies of it as the call began.
Gemma 4's ``shared_kv_states`` is the case in the wild."""

from __future__ import annotations

import copy
import warnings
from collections import OrderedDict, UserDict

import pytest
import torch
from torch import nn

import remat.torch as rt
from remat.eager.mutation import ChangesItsArgument
from remat.eager.snapshots import CallSnapshot, is_snapshot_mapping
from zoo import torchvision_cpu  # noqa: F401  (before transformers, which imports torchvision)


class _Holder:
    def __init__(self) -> None:
        self.count = 0


def test_which_mappings_are_replayed_from_a_snapshot():
    with_field = UserDict()
    with_field.extra = 1
    assert is_snapshot_mapping({}) and is_snapshot_mapping(OrderedDict())
    assert is_snapshot_mapping(UserDict(a=1))
    assert not is_snapshot_mapping(with_field)  # state beyond its entries
    assert not is_snapshot_mapping([1]) and not is_snapshot_mapping(_Holder())


def test_a_snapshot_gives_every_replay_the_mapping_as_the_call_began():
    shared = UserDict(a=1)
    snapshot = CallSnapshot((shared,), {"m": {"x": 1}, "n": 2})
    shared["b"] = 2
    (first,), kwargs = snapshot.replayed((shared,), {"m": {}, "n": 2})
    assert dict(first) == {"a": 1} and first is not shared and kwargs == {"m": {"x": 1}, "n": 2}
    first["c"] = 3
    (second,), _ = snapshot.replayed((shared,), {"m": {}, "n": 2})
    assert dict(second) == {"a": 1}
    assert not CallSnapshot((torch.ones(1), [1]), {})


class StoreOrReuse(nn.Module):
    """A layer that stores its keys in `shared` for its kind, or reuses the stored ones."""

    def __init__(self, kind: str, stores: bool) -> None:
        super().__init__()
        self.kind, self.stores = kind, stores
        self.q, self.k, self.o = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, x: torch.Tensor, shared: dict) -> torch.Tensor:
        keys = self.k(x).tanh() if self.stores or self.kind not in shared else shared[self.kind]
        if self.stores:
            shared[self.kind] = keys
        weights = torch.softmax(self.q(x) @ keys.transpose(-1, -2), dim=-1)
        return x + self.o(weights @ keys)


class KVSharing(nn.Module):
    def __init__(self, mapping: type = dict) -> None:
        super().__init__()
        pattern = [("a", True), ("b", True), ("a", False), ("b", False), ("a", True), ("a", False)]
        self.layers = nn.ModuleList(StoreOrReuse(k, s) for k, s in pattern)
        self.mapping = mapping

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shared = self.mapping()
        for layer in self.layers:
            x = layer(x, shared=shared)
        return x.square().mean()


@pytest.mark.parametrize("mapping", [dict, UserDict])
def test_layers_that_store_and_reuse_through_a_mapping_train_bit_for_bit(mapping):
    torch.manual_seed(0)
    model = KVSharing(mapping)
    plain = copy.deepcopy(model)
    x = torch.randn(4, 16, 32)
    least = rt.measure(model, x, verbose=False).least_activation_budget_bytes
    handle = rt.auto_checkpoint(model, activation_budget=least)
    for _ in range(3):
        with rt.SavedTensorMeter(model) as meter:
            model(x).backward()
        plain(x).backward()
        for a, b in zip(model.parameters(), plain.parameters()):
            assert (a.grad is None) == (b.grad is None)
            assert a.grad is None or torch.equal(a.grad, b.grad)
    assert handle.plan.regions and not handle.warnings
    assert 0 < meter.peak_bytes


class AppendsInsideAMapping(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, state: dict) -> torch.Tensor:
        state["seen"].append(1)  # the list is shared by every copy of the mapping
        return self.linear(x)


class Counts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, counter: _Holder) -> torch.Tensor:
        counter.count += 1
        return self.linear(x)


@pytest.mark.parametrize(
    "block,argument,name",
    [(AppendsInsideAMapping, lambda: {"seen": []}, "state"), (Counts, _Holder, "counter")],
)
def test_what_a_snapshot_cannot_replay_is_still_refused_naming_the_argument(block, argument, name):
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(block() for _ in range(2))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            value = argument()
            for layer in self.layers:
                x = layer(x, **{name: value})
            return x.sum()

    model = Model()
    rt.auto_checkpoint(model, activation_budget="1GiB", blocks=list(model.layers))
    with pytest.raises(ChangesItsArgument, match=f"changed its argument {name} during its call"):
        model(torch.randn(2, 8)).backward()


_LAYER_TYPES = ["sliding_attention", "full_attention"] * 3


def _gemma4(kind: str, kv_shared_layers: int) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    unified = kind.startswith("unified")
    text_class = transformers.Gemma4UnifiedTextConfig if unified else transformers.Gemma4TextConfig
    per_layer = (
        {} if unified else dict(vocab_size_per_layer_input=128, hidden_size_per_layer_input=8)
    )
    text = text_class(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=6,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        global_head_dim=32,
        sliding_window=8,
        max_position_embeddings=64,
        num_kv_shared_layers=kv_shared_layers,
        layer_types=list(_LAYER_TYPES),
        use_cache=False,
        **per_layer,
    )
    if kind.endswith("causal"):
        config = text
        model_class = "Gemma4UnifiedForCausalLM" if unified else "Gemma4ForCausalLM"
    else:
        outer = transformers.Gemma4UnifiedConfig if unified else transformers.Gemma4Config
        config = outer(text_config=text.to_dict(), vision_config=None, audio_config=None)
        config.text_config._attn_implementation = "sdpa"
        model_class = (
            "Gemma4UnifiedForConditionalGeneration" if unified else "Gemma4ForConditionalGeneration"
        )
    config._attn_implementation = "sdpa"
    return getattr(transformers, model_class)(config).train()


@pytest.mark.parametrize("kv_shared_layers", [0, 3])
@pytest.mark.parametrize("kind", ["causal", "conditional", "unified_causal", "unified_conditional"])
def test_every_gemma4_type_trains_through_enable_bit_for_bit(kind, kv_shared_layers):
    """Layers that store keys and values (and, with KV sharing, layers that reuse them,
    interleaved by attention type): refused at the first step before snapshots."""
    import remat.integrations.transformers as hf

    torch.manual_seed(0)
    model = _gemma4(kind, kv_shared_layers)
    modes = model.config.get_text_config().kv_sharing_modes
    assert "store" in modes and ("reuse" in modes) == (kv_shared_layers > 0)
    plain = copy.deepcopy(model)
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    measured = rt.measure(
        model,
        input_ids=ids,
        labels=ids,
        blocks=hf.find_layers(model),
        verbose=False,
        loss_fn=lambda out: out.loss,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handle = hf.enable(model, activation_budget=measured.least_activation_budget_bytes)
        for step in range(2):
            for net in (model, plain):
                net.zero_grad(set_to_none=True)
                torch.manual_seed(step)
                net(input_ids=ids, labels=ids).loss.backward()
            for (name, a), b in zip(model.named_parameters(), plain.parameters()):
                assert (a.grad is None) == (b.grad is None), name
                assert a.grad is None or torch.equal(a.grad, b.grad), name
    assert handle.plan.regions and not handle.warnings
    assert not [str(w.message) for w in caught if "remat" in str(w.message)]
