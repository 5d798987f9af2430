"""The least step peak measure() reports under memory_budget: what the steps at it hold, never
above Hugging Face checkpointing's step peak, on models whose blocks hold more than their
activations (returned attention weights, a region's own working set)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import remat.torch as rt
from step_cases import same, train, zoo_measured
from zoo import torchvision_cpu  # noqa: F401  (before transformers, which imports torchvision)


@pytest.mark.parametrize("name", ["llama", "qwen2", "mixtral", "gpt2", "bert", "t5"])
def test_the_least_step_peak_is_at_most_hf_checkpointings(name):
    """measure()'s least feasible step peak is no more than the step peak of Hugging Face's own
    checkpointing (remat never refuses what HF reaches); on a decoder, a step planned to that
    peak holds no more than HF's, bit for bit with plain training."""
    pytest.importorskip("transformers")
    from zoo import adopt

    # The batch counts as the step's, as remat counts it (and CUDA's allocator does).
    zoo, model, batch, step, measured = zoo_measured(name)
    _, losses, grads = train(copy.deepcopy(model), step, batch=batch)
    hf = copy.deepcopy(model)
    hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    hf_peak = max(train(hf, step, batch=batch)[0])
    assert measured.least_budget_bytes <= hf_peak, (name, measured.least_budget_bytes, hf_peak)
    if not zoo.decoder:
        return
    trained = copy.deepcopy(model)
    adopt.enable_step(zoo, trained, hf_peak)
    peaks, got_losses, got_grads = train(trained, step, batch=batch)
    assert max(peaks) <= hf_peak, (name, peaks, hf_peak)
    assert same(losses, got_losses) and all(map(same, grads, got_grads)), name


# Small configs, not the zoo's, at batch 4 x 128: the first step's profiling of a block's ops
# (its saves kept, then every cacheable op cached) holds more than HF checkpointing's whole step.
_SMALL_DECODERS = {
    "llama": (
        "LlamaForCausalLM",
        "LlamaConfig",
        dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=256,
            max_position_embeddings=128,
        ),
    ),
    "gpt2": (
        "GPT2LMHeadModel",
        "GPT2Config",
        dict(n_embd=64, n_layer=4, n_head=4, vocab_size=256, n_positions=128),
    ),
}
# Blocks returning their attention weights (each held by the loop through the next block).
_GPT_NEO = (
    "GPTNeoForCausalLM",
    "GPTNeoConfig",
    dict(
        hidden_size=64,
        num_layers=4,
        num_heads=4,
        attention_types=[[["global", "local"], 2]],
        window_size=64,
        vocab_size=256,
        max_position_embeddings=128,
    ),
)


def _small_decoder(spec):
    """A decoder from a small config, its batch (4 x 128) and a step of it."""
    transformers = pytest.importorskip("transformers")
    model_class, config_class, config = spec
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
    model.train()
    ids = torch.randint(0, 256, (4, 128), generator=torch.Generator().manual_seed(1))

    def step(m):
        return m(input_ids=ids, labels=ids).loss

    return model, ids, step


def _least_step_peak(model, ids):
    import remat.integrations.transformers as hf

    probe = copy.deepcopy(model)
    return rt.measure(
        probe,
        input_ids=ids,
        labels=ids,
        blocks=hf.find_layers(probe),
        loss_fn=lambda out: out.loss,
        optimizer=torch.optim.AdamW(probe.parameters()),
    ).least_budget_bytes


@pytest.mark.parametrize("name", sorted(_SMALL_DECODERS))
def test_profiling_ops_in_the_first_step_never_raises_the_least_step_peak(name):
    """The runs that profile a block's ops in the first step are not counted in later steps'
    plans (they never run them), and a first step under a budget leaves them out where they
    would not fit (the block is then planned whole). So measure()'s least step peak is at most
    HF checkpointing's step peak (before: Llama 8.6%, GPT-2 35% above), and a step planned to
    HF's peak holds no more, the first included, bit for bit with plain training."""
    import remat.integrations.transformers as hf

    model, ids, step = _small_decoder(_SMALL_DECODERS[name])
    least = _least_step_peak(model, ids)
    # The batch counts as the step's, as remat counts it (and CUDA's allocator does).
    _, losses, grads = train(copy.deepcopy(model), step, batch=ids)
    checkpointed = copy.deepcopy(model)
    checkpointed.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False}
    )
    hf_peak = max(train(checkpointed, step, batch=ids)[0])
    assert least <= hf_peak, (least, hf_peak)
    trained = copy.deepcopy(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf.enable(trained, memory_budget=hf_peak)
        peaks, got_losses, got_grads = train(trained, step, batch=ids)
    assert max(peaks) <= hf_peak, (peaks, hf_peak)
    said = [str(w.message) for w in caught if "remat" in str(w.message)]
    assert not said, said
    assert same(losses, got_losses) and all(map(same, grads, got_grads))


class _ScoresBlock(torch.nn.Module):
    """Attention that returns its scores beside its output, as GPT-Neo's blocks do."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 16 * width), torch.nn.GELU(), torch.nn.Linear(16 * width, width)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = torch.softmax(q @ k.transpose(1, 2) / 8, dim=-1)
        x = x + self.out(scores @ v)
        return x + self.mlp(x), scores


class _ScoresModel(torch.nn.Module):
    """Its loop keeps each block's scores until the next block returns, and drops the last
    block's before the head runs."""

    def __init__(self, width: int = 32, depth: int = 4) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(_ScoresBlock(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 192)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            outputs = block(x)
            x = outputs[0]
        return torch.log_softmax(self.head(torch.layer_norm(x, x.shape[-1:])), -1).mean()


def test_a_last_block_output_the_model_drops_is_not_planned_as_held():
    # The last block's scores were planned as held through the head, as its hidden output is.
    # measure()'s step, which runs every block as a region, dropped them there, so the head's
    # figure was short by their bytes; a plan keeping the last block (whose saves hold them)
    # went over measure()'s least, and the step after was refused at it.
    torch.manual_seed(0)
    model, x = _ScoresModel(), torch.randn(8, 128, 32)
    _, losses, grads = train(copy.deepcopy(model), lambda m: m(x))
    probe = copy.deepcopy(model)
    measured = rt.measure(probe, x, optimizer=torch.optim.AdamW(probe.parameters()))
    trained = copy.deepcopy(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        handle = rt.auto_checkpoint(trained, memory_budget=measured.least_budget_bytes)
        peaks, got_losses, got_grads = train(trained, lambda m: m(x))
    assert max(peaks) <= measured.least_budget_bytes, (peaks, handle.plan)
    assert same(losses, got_losses) and all(map(same, grads, got_grads))


def test_a_region_s_forward_is_planned_as_the_region_holds_it():
    """A region's forward lets go of what its block saves as the block's code drops it; the
    first step measured it holding them all, as a block run plainly does. measure()'s least
    step peak on GPT-Neo was 12% above HF checkpointing's, which runs the same regions; it is
    what the steps at it hold, and steps at it warn of nothing."""
    import remat.integrations.transformers as hf

    model, ids, step = _small_decoder(_GPT_NEO)
    least = _least_step_peak(model, ids)
    checkpointed = copy.deepcopy(model)
    checkpointed.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False}
    )
    hf_peak = max(train(checkpointed, step, batch=ids)[0])
    assert least <= hf_peak, (least, hf_peak)
    _, losses, grads = train(copy.deepcopy(model), step, batch=ids)
    trained = copy.deepcopy(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hf.enable(trained, memory_budget=least)
        peaks, got_losses, got_grads = train(trained, step, batch=ids)
    assert max(peaks) == least, (peaks, least)
    said = [str(w.message) for w in caught if "remat" in str(w.message)]
    assert not said, said
    assert same(losses, got_losses) and all(map(same, grads, got_grads))
