"""Small models that checkpointing is tested and benchmarked on.

- ``mlp``: a stack of residual MLP blocks of alternating widths (layers of unequal cost);
- ``gpt``: a GPT-style decoder (token embedding, causal self-attention blocks with dropout,
  blocks in an nn.ModuleList applied in a loop);
- ``resnet``: a ResNet-style CNN (BatchNorm, stride-2 stages, so activations shrink as it goes);
- ``llama``: a Llama-style decoder (RMSNorm, fused qkv, causal SDPA, SwiGLU);
- ``mixer``: an MLP-Mixer (token-mixing and channel-mixing MLPs over image patches).

Each ``make_*`` returns (model, blocks, example input): ``blocks`` is the chain to checkpoint;
``model(x) == model.epilogue(blocks(model.prologue(x)))``. ``loss`` is a training loss for any
of them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLPBlock(nn.Module):
    def __init__(self, width: int, hidden: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(self.down(F.gelu(self.up(self.norm(x)))))


class MLP(nn.Module):
    def __init__(self, depth: int, width: int, dropout: float) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *[MLPBlock(width, width * (8 if i % 3 == 0 else 2), dropout) for i in range(depth)]
        )

    def prologue(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def epilogue(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.epilogue(self.blocks(self.prologue(x)))


def make_mlp(depth: int = 12, width: int = 256, batch: int = 256, dropout: float = 0.0):
    model = MLP(depth, width, dropout)
    return model, model.blocks, torch.randn(batch, width)


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class DecoderBlock(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attn(self.ln1(x)))
        return x + self.dropout(self.mlp(self.ln2(x)))


class GPT(nn.Module):
    def __init__(self, vocab: int, width: int, depth: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(DecoderBlock(width, heads, dropout) for _ in range(depth))
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def prologue(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)

    def epilogue(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln(x))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def make_gpt(
    depth: int = 6,
    width: int = 128,
    heads: int = 4,
    seq: int = 64,
    batch: int = 8,
    vocab: int = 512,
    dropout: float = 0.0,
):
    model = GPT(vocab, width, depth, heads, dropout)
    return model, model.blocks, torch.randint(0, vocab, (batch, seq))


class BasicBlock(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inputs, outputs, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(outputs)
        self.conv2 = nn.Conv2d(outputs, outputs, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(outputs)
        self.shortcut = (
            nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride, bias=False), nn.BatchNorm2d(outputs)
            )
            if stride != 1 or inputs != outputs
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(
        self, widths: tuple[int, ...] = (16, 32, 64), per_stage: int = 3, classes: int = 10
    ) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], 3, 1, 1, bias=False), nn.BatchNorm2d(widths[0]), nn.ReLU()
        )
        blocks, inputs = [], widths[0]
        for stage, width in enumerate(widths):
            for i in range(per_stage):
                blocks.append(BasicBlock(inputs, width, 2 if stage > 0 and i == 0 else 1))
                inputs = width
        self.body = nn.Sequential(*blocks)
        self.fc = nn.Linear(inputs, classes)

    def prologue(self, images: torch.Tensor) -> torch.Tensor:
        return self.stem(images)

    def epilogue(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=(2, 3)))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.epilogue(self.body(self.prologue(images)))


def make_resnet(per_stage: int = 3, batch: int = 16, size: int = 32):
    model = ResNet(per_stage=per_stage)
    return model, model.body, torch.randn(batch, 3, size, size)


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


class LlamaBlock(nn.Module):
    """RMSNorm, fused qkv, causal SDPA, out projection, RMSNorm, SwiGLU; no biases."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        hidden = int(8 * width / 3) // 64 * 64
        self.heads = heads
        self.attention_norm = RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.ffn_norm = RMSNorm(width)
        self.gate_up = nn.Linear(width, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.attention_norm(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(b, t, c))
        gate, up = self.gate_up(self.ffn_norm(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, vocab: int, width: int, depth: int, heads: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(LlamaBlock(width, heads) for _ in range(depth))
        self.norm = RMSNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def prologue(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)

    def epilogue(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(x))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def make_llama(
    depth: int = 4,
    width: int = 128,
    heads: int = 4,
    seq: int = 64,
    batch: int = 4,
    vocab: int = 512,
):
    """A Llama-style decoder; the op-level issue's GPU size is depth 16, width 2048, heads 16,
    seq 2048, batch 4 in bf16."""
    model = Llama(vocab, width, depth, heads)
    return model, model.layers, torch.randint(0, vocab, (batch, seq))


class MixerBlock(nn.Module):
    """MLP-Mixer: an MLP across patches (token mixing), then one across channels."""

    def __init__(self, patches: int, width: int) -> None:
        super().__init__()
        self.token_norm = nn.LayerNorm(width)
        self.token_mlp = nn.Sequential(
            nn.Linear(patches, 2 * patches), nn.GELU(), nn.Linear(2 * patches, patches)
        )
        self.channel_norm = nn.LayerNorm(width)
        self.channel_mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.token_norm(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.channel_norm(x))


class Mixer(nn.Module):
    def __init__(self, depth: int, width: int, patch: int, size: int, classes: int = 10) -> None:
        super().__init__()
        patches = (size // patch) ** 2
        self.stem = nn.Conv2d(3, width, patch, stride=patch)
        self.layers = nn.Sequential(*[MixerBlock(patches, width) for _ in range(depth)])
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def prologue(self, images: torch.Tensor) -> torch.Tensor:
        return self.stem(images).flatten(2).transpose(1, 2)

    def epilogue(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(x).mean(dim=1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.epilogue(self.layers(self.prologue(images)))


def make_mixer(depth: int = 4, width: int = 128, patch: int = 4, size: int = 32, batch: int = 16):
    model = Mixer(depth, width, patch, size)
    return model, model.layers, torch.randn(batch, 3, size, size)


MODELS = {
    "mlp": make_mlp,
    "gpt": make_gpt,
    "resnet": make_resnet,
    "llama": make_llama,
    "mixer": make_mixer,
}


def loss(output: torch.Tensor) -> torch.Tensor:
    """A training loss: cross-entropy against fixed targets for logits, else the mean square."""
    if output.dim() == 3:  # GPT logits (batch, seq, vocab)
        targets = torch.arange(output.shape[0] * output.shape[1], device=output.device)
        targets = targets % output.shape[2]
        return F.cross_entropy(output.flatten(0, 1), targets)
    return output.float().pow(2).mean()
