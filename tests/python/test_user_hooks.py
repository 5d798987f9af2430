"""The user's saved-tensor hooks under auto_checkpoint: entered around a step, they are called
for every tensor the step keeps for backward, as in plain training, on every step (the step
that measures included), on a stock nn.Sequential chain, a ModuleList loop and a Hugging Face
model. remat's own hooks compose with them; measuring runs that plain training does not make
never reach them."""

from __future__ import annotations

import copy
import functools

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import remat.torch as rt
from zoo import torchvision_cpu  # noqa: F401  (before transformers, which imports torchvision)


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))


class Chain(nn.Module):
    """Blocks in a stock nn.Sequential called as a whole (timm's ViT, torchvision's encoder)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(64, 64)
        self.layers = nn.Sequential(*(_mlp() for _ in range(4)))
        self.out = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.layers(self.inp(x))).mean()


class Loop(nn.Module):
    """Blocks in a ModuleList, called by the model's loop with a residual outside them."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(64, 64)
        self.layers = nn.ModuleList(_mlp() for _ in range(4))
        self.out = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for layer in self.layers:
            h = h + layer(h)
        return self.out(h).mean()


def _llama():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
    )
    config._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(config).train()
    ids = torch.randint(0, 128, (2, 16), generator=torch.Generator().manual_seed(0))
    return model, list(model.model.layers), lambda m: m(input_ids=ids, labels=ids).loss


def _chain():
    model = Chain()
    x = torch.randn(8, 64)
    return model, None, lambda m: m(x)


def _loop():
    model = Loop()
    x = torch.randn(8, 64)
    return model, list(model.layers), lambda m: m(x)


MODELS = {"chain": _chain, "loop": _loop, "llama": _llama}


class _Counting(torch.autograd.graph.saved_tensors_hooks):
    """A user's hook: counts its packs and the bytes they keep (on copies, as save_on_cpu)."""

    def __init__(self) -> None:
        self.calls = 0
        self.bytes = 0
        super().__init__(self._pack, lambda packed: packed)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.bytes += tensor.numel() * tensor.element_size()
        return tensor.clone()  # what backward gets is the copy, as save_on_cpu gives


def _step(model: nn.Module, loss_fn, hooks) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    with hooks:
        loss_fn(model).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _as_regions(model: nn.Module, blocks: list[nn.Module]) -> None:
    """Every block a non-reentrant torch checkpoint, keyword tensors passed as its inputs (as
    the step that measures runs them)."""
    for block in blocks:

        def region(forward, *args, **kwargs):
            names, count = list(kwargs), len(args)

            def run(*inputs):
                return forward(*inputs[:count], **dict(zip(names, inputs[count:])))

            return checkpoint(run, *args, *kwargs.values(), use_reentrant=False)

        block.forward = functools.partial(region, block.forward)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_users_hook_sees_what_plain_training_keeps_on_every_step(kind):
    torch.manual_seed(0)
    model, blocks, loss_fn = MODELS[kind]()
    plain = copy.deepcopy(model)
    regions = copy.deepcopy(model)  # the step that measures runs each block as a region
    if blocks is not None:
        _as_regions(regions, [dict(regions.named_modules())[n] for n in _names(model, blocks)])
    expected = _Counting()
    _step(plain, loss_fn, expected)
    assert expected.calls > 0
    handle = rt.auto_checkpoint(model, activation_budget="1GiB")
    for step in range(3):
        hooks = _Counting()
        grads = _step(model, loss_fn, hooks)
        assert not handle.plan.regions, handle.plan  # 1 GiB keeps every block's activations
        reference = _Counting()
        first_reference = regions if step == 0 and blocks is not None else plain
        reference_grads = _step(first_reference, loss_fn, reference)
        assert (hooks.calls, hooks.bytes) == (reference.calls, reference.bytes), step
        assert all(torch.equal(a, b) for a, b in zip(grads, reference_grads))
        if step > 0:
            assert (hooks.calls, hooks.bytes) == (expected.calls, expected.bytes)
    handle.remove()


def _names(model: nn.Module, blocks: list[nn.Module]) -> list[str]:
    names = {id(m): n for n, m in model.named_modules()}
    return [names[id(b)] for b in blocks]


def _under_remat_and_plain(kind: str):
    """The model under auto_checkpoint at a budget that keeps everything, a plain copy, and
    the loss of a step."""
    torch.manual_seed(0)
    model, _, loss_fn = MODELS[kind]()
    plain = copy.deepcopy(model)
    rt.auto_checkpoint(model, activation_budget="1GiB")
    return model, plain, loss_fn


class _CountedSaveOnCpu(torch.autograd.graph.save_on_cpu):
    """torch's save_on_cpu, counting the bytes it moves."""

    def __init__(self) -> None:
        super().__init__()
        self.moved = 0
        pack = self.pack_hook

        def counted(tensor: torch.Tensor):
            self.moved += tensor.numel() * tensor.element_size()
            return pack(tensor)

        self.pack_hook = counted


@pytest.mark.parametrize("kind", ["chain", "loop"])
def test_save_on_cpu_under_auto_checkpoint_moves_what_it_moves_plainly(kind):
    model, plain, loss_fn = _under_remat_and_plain(kind)
    moved, plain_moved = [], []
    for _ in range(3):
        for net, log in ((model, moved), (plain, plain_moved)):
            hooks = _CountedSaveOnCpu()
            _step(net, loss_fn, hooks)
            log.append(hooks.moved)
        assert all(
            torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), plain.parameters())
        )
    assert moved[1:] == plain_moved[1:] and moved[1] > 0
    if kind == "chain":  # a chain plans before it runs: its first step keeps what plain keeps
        assert moved[0] == plain_moved[0]


@pytest.mark.parametrize("kind", ["chain", "loop"])
def test_the_saved_tensor_meter_reads_under_auto_checkpoint_what_it_reads_plainly(kind):
    model, plain, loss_fn = _under_remat_and_plain(kind)
    _step(model, loss_fn, rt.SavedTensorMeter(model))  # the step that measures
    with rt.SavedTensorMeter(plain) as expected:
        loss_fn(plain).backward()
    with rt.SavedTensorMeter(model) as meter:
        loss_fn(model).backward()
    assert meter.peak_bytes == expected.peak_bytes > 0
