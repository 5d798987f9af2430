"""Models written here, in the styles users bring: per-block keyword arguments, masks and
positions, tuple outputs, residuals and functions outside blocks, a block used twice, nested
ModuleLists, BatchNorm, buffers changed in forward, objects passed every step, dropout from the
model's own generators and from Python's and NumPy's, state a forward keeps on its modules (an
MoE router's loss). SHAPES names each with its inputs, for the
tests that compare auto_checkpoint with the unwrapped model."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy
import torch
import torch.nn.functional as F
from torch import nn


class MLPBlock(nn.Module):
    def __init__(self, width: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.dropout(self.down(F.gelu(self.up(x)))) * scale


class KwargsPerBlock(nn.Module):
    """x = block(x, scale=i + 1): every block gets its own keyword argument."""

    def __init__(self, depth=6, width=32):
        super().__init__()
        self.blocks = nn.ModuleList(MLPBlock(width) for _ in range(depth))

    def forward(self, x):
        for i, block in enumerate(self.blocks):
            x = torch.tanh(block(x, scale=float(i + 1)))
        return x


class ResidualOutside(nn.Module):
    """x = x + block(x): the residual is the model's, not the block's."""

    def __init__(self, depth=6, width=32, dropout=0.1):
        super().__init__()
        self.layers = nn.ModuleList(MLPBlock(width, dropout) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x


class FunctionsBetween(nn.Module):
    """A function applied between blocks, and a block's output used twice."""

    def __init__(self, depth=5, width=32):
        super().__init__()
        self.blocks = nn.ModuleList(MLPBlock(width) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            y = block(x)
            x = F.layer_norm(y * torch.sigmoid(y), y.shape[-1:]) + 0.5 * x
        return x


class SharedBlock(nn.Module):
    """One block used twice in the loop (weight sharing)."""

    def __init__(self, width=32):
        super().__init__()
        self.blocks = nn.ModuleList(MLPBlock(width) for _ in range(3))

    def forward(self, x):
        for index in (0, 1, 0, 2, 1):
            x = x + self.blocks[index](x)
        return x


class RMSNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class HFDecoderLayer(nn.Module):
    """Written like Hugging Face decoder layers: keyword inputs (mask, position ids), a tuple
    output with None in it, dropout on attention probabilities."""

    def __init__(self, width=32, heads=4, dropout=0.1):
        super().__init__()
        self.heads = heads
        self.input_layernorm = RMSNorm(width)
        self.q_proj = nn.Linear(width, width, bias=False)
        self.k_proj = nn.Linear(width, width, bias=False)
        self.v_proj = nn.Linear(width, width, bias=False)
        self.o_proj = nn.Linear(width, width, bias=False)
        self.post_attention_layernorm = RMSNorm(width)
        self.gate_proj = nn.Linear(width, 2 * width, bias=False)
        self.up_proj = nn.Linear(width, 2 * width, bias=False)
        self.down_proj = nn.Linear(2 * width, width, bias=False)
        self.dropout = dropout

    def forward(
        self,
        hidden_states,
        attention_mask=None,
        position_ids=None,
        output_attentions=False,
        use_cache=False,
    ):
        b, t, d = hidden_states.shape
        residual = hidden_states
        h = self.input_layernorm(hidden_states)
        q, k, v = (
            p(h).view(b, t, self.heads, d // self.heads).transpose(1, 2)
            for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        angle = position_ids[:, None, :, None].float() / 100.0
        q, k = q * torch.cos(angle) + q.roll(1, -1) * torch.sin(angle), k * torch.cos(angle)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + attention_mask
        probs = F.dropout(scores.softmax(-1), self.dropout, self.training)
        attn = (probs @ v).transpose(1, 2).reshape(b, t, d)
        hidden_states = residual + self.o_proj(attn)
        residual = hidden_states
        h = self.post_attention_layernorm(hidden_states)
        hidden_states = residual + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))
        return (hidden_states, probs if output_attentions else None)


class HFModel(nn.Module):
    def __init__(self, depth=4, width=32, vocab=50):
        super().__init__()
        self.embedtokens = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(HFDecoderLayer(width) for _ in range(depth))
        self.norm = RMSNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, input_ids, attention_mask=None):
        b, t = input_ids.shape
        causal = torch.full((t, t), float("-inf")).triu(1)
        mask = causal[None, None] + (0.0 if attention_mask is None else attention_mask)
        position_ids = torch.arange(t)[None].expand(b, t)
        hidden = self.embedtokens(input_ids)
        for layer in self.layers:
            outputs = layer(hidden, attention_mask=mask, position_ids=position_ids)
            hidden = outputs[0]
        return self.lm_head(self.norm(hidden))


class NestedStages(nn.Module):
    """Blocks in a ModuleList of ModuleLists (stages)."""

    def __init__(self, width=32):
        super().__init__()
        self.stages = nn.ModuleList(
            nn.ModuleList(MLPBlock(width) for _ in range(2)) for _ in range(3)
        )

    def forward(self, x):
        for stage in self.stages:
            for block in stage:
                x = x + block(x)
            x = x * 0.5
        return x


class GatedBlock(nn.Module):
    """Returns (x * gate, gate): sigmoid saves the gate, which the next block does not take."""

    def __init__(self, width):
        super().__init__()
        self.gate = nn.Linear(width, width)

    def forward(self, x):
        gate = torch.sigmoid(self.gate(x))
        return x * gate, gate


class GatesKeptOutside(nn.Module):
    """x, gate = block(x): the model's own code keeps each gate (an auxiliary term)."""

    def __init__(self, width=32):
        super().__init__()
        self.blocks = nn.ModuleList(GatedBlock(width) for _ in range(4))

    def forward(self, x):
        aux = x.new_zeros(())
        for block in self.blocks:
            x, gate = block(x)
            aux = aux + gate.mean()
        return x + aux


@dataclasses.dataclass
class Hidden:
    """A block's output as a dataclass (the hidden state and a running count)."""

    states: torch.Tensor
    depth: int = 0


class DataclassBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.mlp = MLPBlock(width)

    def forward(self, x: torch.Tensor, depth: int) -> Hidden:
        return Hidden(x + self.mlp(x), depth + 1)


class DataclassOut(nn.Module):
    """Blocks that return a dataclass holding the hidden state the next block takes, and a head
    that saves the last one's."""

    def __init__(self, width=32):
        super().__init__()
        self.blocks = nn.ModuleList(DataclassBlock(width) for _ in range(4))
        self.head = nn.Linear(width, width)

    def forward(self, x):
        hidden = Hidden(x)
        for block in self.blocks:
            hidden = block(hidden.states, hidden.depth)
        return self.head(hidden.states)


class ConvBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x):
        return F.relu(x + self.bn(self.conv(x)))


class BatchNormNet(nn.Module):
    def __init__(self, channels=8, depth=4):
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.ModuleList(ConvBlock(channels) for _ in range(depth))
        self.head = nn.Linear(channels, 10)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean((2, 3)))


class EMABlock(nn.Module):
    """Buffers its forward changes: an EMA of its input updated in place and then read into a
    tensor backward saves (x * ema), a step counter, and a scale assigned a new tensor each
    call. A re-run must start from them as the forward found them, and leave them as it left
    them."""

    def __init__(self, width=32):
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.register_buffer("ema", torch.ones(width))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("scale", torch.ones(()))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.ema.mul_(0.9).add_(x.detach().mean(0), alpha=0.1)
                self.steps += 1
                self.scale = self.scale * 0.5 + x.detach().abs().mean() * 0.5
        return self.down(torch.tanh(self.up(x * self.ema))) * self.scale


class EMAModel(nn.Module):
    def __init__(self, depth=6, width=32):
        super().__init__()
        self.layers = nn.ModuleList(EMABlock(width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x


class AttributeEMABlock(EMABlock):
    """EMABlock's state kept as plain tensor attributes, not buffers."""

    def __init__(self, width=32):
        super().__init__(width)
        for name in ("ema", "steps", "scale"):
            value = self._buffers.pop(name)
            setattr(self, name, value)


class AttributeEMAModel(EMAModel):
    def __init__(self, depth=6, width=32):
        super().__init__(depth, width)
        self.layers = nn.ModuleList(AttributeEMABlock(width) for _ in range(depth))


class RunningStats(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.register_buffer("mean", torch.zeros(width))


class StatsBlock(nn.Module):
    """Updates and reads the buffer of a module the model passes it, not one of its own."""

    def __init__(self, width=32):
        super().__init__()
        self.mlp = MLPBlock(width)

    def forward(self, x, stats):
        with torch.no_grad():
            stats.mean.mul_(0.9).add_(x.detach().mean(0), alpha=0.1)
        return x + self.mlp(x - stats.mean)


class StatsPassedIn(nn.Module):
    def __init__(self, depth=4, width=32):
        super().__init__()
        self.stats = RunningStats(width)
        self.layers = nn.ModuleList(StatsBlock(width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x, self.stats)
        return x


def _ema_chain():
    """The same blocks in a stock nn.Sequential: planned as one chain with nested regions."""
    return nn.Sequential(*(EMABlock(32) for _ in range(6)))


@dataclasses.dataclass(frozen=True)
class Rotary:
    """Hashable, and its == compares the tensors elementwise (an ambiguous bool)."""

    cos: torch.Tensor
    sin: torch.Tensor


class AttentionBias:
    """An object of the model's own, rebuilt every step (as FlexAttention's BlockMask)."""

    def __init__(self, bias: torch.Tensor, kind: str) -> None:
        self.bias, self.kind = bias, kind


class ObjectBlock(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.mlp = MLPBlock(width)

    def forward(self, x, rotary, bias, step):
        h = x * rotary.cos + x.flip(-1) * rotary.sin + bias.bias
        return x + self.mlp(h) * (1 + 1 / (10 + step))


class ObjectsEveryStep(nn.Module):
    """Passes its blocks objects built anew each step (a frozen dataclass of tensors, an object of
    its own) and a Python float that changes every step (a diffusion timestep). An int would
    count by value (see test_an_int_argument_that_changes_what_a_block_saves_is_not_planned_past).
    """

    def __init__(self, depth=4, width=32):
        super().__init__()
        self.layers = nn.ModuleList(ObjectBlock(width) for _ in range(depth))
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        t = torch.arange(x.shape[-1], dtype=x.dtype)
        rotary, bias = Rotary(t.cos(), t.sin()), AttentionBias(t / 10, "causal")
        for layer in self.layers:
            x = layer(x, rotary, bias, float(self.calls))
        return x


class NoisyBlock(nn.Module):
    """Draws noise from a generator of its own, and from one its caller passes (a re-run must
    draw the same numbers; torch's checkpoint preserves only the default generators)."""

    def __init__(self, width=32):
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.gen = torch.Generator().manual_seed(5)

    def forward(self, x, generator=None):
        x = x + 0.1 * torch.randn(x.shape, generator=self.gen)
        h = torch.tanh(self.up(x))
        if generator is not None:
            h = h * (torch.rand(h.shape, generator=generator) > 0.2)
        return self.down(h)


class NoisyModel(nn.Module):
    def __init__(self, depth=4, width=32):
        super().__init__()
        self.layers = nn.ModuleList(NoisyBlock(width) for _ in range(depth))
        self.masks = torch.Generator().manual_seed(7)

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x, generator=self.masks)
        return x


class HostRandomBlock(nn.Module):
    """Scales its branch by a draw of Python's and NumPy's global generators (stochastic-depth
    code often uses them): a re-run must draw the same scale."""

    def __init__(self, width=32):
        super().__init__()
        self.mlp = MLPBlock(width)

    def forward(self, x):
        # tanh saves its output, so a re-run that drew another scale would change the gradient.
        return x + torch.tanh(self.mlp(x) * (0.5 + random.random() + float(numpy.random.rand())))


class HostRandomModel(nn.Module):
    def __init__(self, depth=4, width=32):
        super().__init__()
        self.layers = nn.ModuleList(HostRandomBlock(width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class RouterBlock(nn.Module):
    """A mixture-of-experts layer that keeps its load-balancing loss on itself, and a list of
    what it routed, for the model to read after the forward."""

    def __init__(self, width: int, experts: int = 4) -> None:
        super().__init__()
        self.gate = nn.Linear(width, experts)
        self.experts = nn.ModuleList(MLPBlock(width) for _ in range(experts))
        self.routed: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.softmax(self.gate(x), dim=-1)
        self.aux_loss = (weights.mean(0) ** 2).sum() * weights.shape[-1]
        self.routed.append(weights.argmax(-1))
        return x + sum(w.unsqueeze(-1) * e(x) for w, e in zip(weights.unbind(-1), self.experts))


class RouterModel(nn.Module):
    def __init__(self, width: int = 32, depth: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(RouterBlock(width) for _ in range(depth))
        self.head = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            block.routed.clear()
        for block in self.blocks:
            x = block(x)
        routed = sum(len(b.routed) for b in self.blocks)  # one per block call
        aux = sum(b.aux_loss for b in self.blocks)
        return self.head(x) * routed / len(self.blocks) + 0.01 * aux


def _noisy_chain():
    return nn.Sequential(*(NoisyBlock(32) for _ in range(6)))


def tokens():
    return (torch.arange(4 * 16).reshape(4, 16) * 7) % 50


SHAPES = {
    "kwargs_per_block": (KwargsPerBlock, lambda: (torch.randn(16, 32),), {}),
    "residual_outside": (ResidualOutside, lambda: (torch.randn(16, 32),), {}),
    "functions_between": (FunctionsBetween, lambda: (torch.randn(16, 32),), {}),
    "shared_block": (SharedBlock, lambda: (torch.randn(16, 32),), {}),
    "gates_kept_outside": (GatesKeptOutside, lambda: (torch.randn(16, 32),), {}),
    "dataclass_out": (DataclassOut, lambda: (torch.randn(16, 32),), {}),
    "hf_decoder": (HFModel, lambda: (tokens(),), {"attention_mask": torch.zeros(4, 1, 1, 16)}),
    "nested_modulelists": (NestedStages, lambda: (torch.randn(16, 32),), {}),
    "batchnorm": (BatchNormNet, lambda: (torch.randn(4, 3, 12, 12),), {}),
    "buffers_changed_in_forward": (EMAModel, lambda: (torch.randn(16, 32),), {}),
    "buffers_changed_in_forward_chain": (_ema_chain, lambda: (torch.randn(16, 32),), {}),
    "tensor_attributes_changed_in_forward": (AttributeEMAModel, lambda: (torch.randn(16, 32),), {}),
    "buffers_of_a_module_passed_in": (StatsPassedIn, lambda: (torch.randn(16, 32),), {}),
    "objects_every_step": (ObjectsEveryStep, lambda: (torch.randn(16, 32),), {}),
    "own_generators": (NoisyModel, lambda: (torch.randn(16, 32),), {}),
    "own_generators_chain": (_noisy_chain, lambda: (torch.randn(16, 32),), {}),
    "python_and_numpy_random": (HostRandomModel, lambda: (torch.randn(16, 32),), {}),
    "state_kept_on_modules": (RouterModel, lambda: (torch.randn(16, 32),), {}),
}
