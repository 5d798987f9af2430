"""Record the knapsack instances torch.compile's memory-budget partitioner builds for real models.

Each instance is written in the input format of `remat solve` (memory, runtime, max_memory),
plus the names of the candidate nodes, the model and the budget:

    python examples/record_instances.py --out examples/instances

Models are built from torch.nn with random weights and compiled on the CPU; the partitioner's
call to its solver is intercepted (and then forwarded to torch's own solver unchanged).
"""

from __future__ import annotations

import argparse
import json
import pathlib

import torch
import torch._functorch.config as functorch_config
from torch import nn
from torch._functorch import partitioners


class DecoderBlock(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        mask = torch.triu(torch.ones(x.shape[1], x.shape[1], dtype=torch.bool), diagonal=1)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.Sequential(*[DecoderBlock(width, heads) for _ in range(depth)])
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


class ResidualConv(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.BatchNorm2d(channels),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.BatchNorm2d(channels),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.body(x))


class MixerBlock(nn.Module):
    def __init__(self, tokens: int, width: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.token_mlp = nn.Sequential(
            nn.Linear(tokens, 2 * tokens), nn.GELU(), nn.Linear(2 * tokens, tokens)
        )
        self.channel_mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.token_mlp(self.ln1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.ln2(x))


def models(size: int) -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """Three model kinds at a size step; inputs are random."""
    width = 64 * size
    return {
        f"gpt_d{2 * size}_w{width}": (
            TinyGPT(vocab=256, width=width, heads=4, depth=2 * size),
            torch.randint(0, 256, (4, 64)),
        ),
        f"resnet_c{16 * size}": (
            nn.Sequential(
                nn.Conv2d(3, 16 * size, 3, padding=1),
                *[ResidualConv(16 * size) for _ in range(2 * size)],
                nn.AdaptiveAvgPool2d(1),
                nn.Flatten(),
                nn.Linear(16 * size, 10),
            ),
            torch.randn(8, 3, 32, 32),
        ),
        f"mixer_w{width}": (
            nn.Sequential(*[MixerBlock(32, width) for _ in range(2 * size)]),
            torch.randn(8, 32, width),
        ),
    }


def record(model: nn.Module, example: torch.Tensor, budget: float) -> list[dict]:
    """Compiles forward+backward under the budget and returns every knapsack call's instance."""
    calls: list[dict] = []
    original = partitioners._optimize_runtime_with_given_memory

    def intercept(joint_graph, memory, runtimes, max_memory, node_info, banned_nodes):
        calls.append(
            {
                "memory": [float(m) for m in memory],
                "runtime": [float(r) for r in runtimes],
                "max_memory": float(max_memory),
                "names": [str(node.name) for node in banned_nodes],
            }
        )
        return original(joint_graph, memory, runtimes, max_memory, node_info, banned_nodes)

    torch._dynamo.reset()
    partitioners._optimize_runtime_with_given_memory = intercept
    try:
        with functorch_config.patch(activation_memory_budget=budget):
            compiled = torch.compile(model, backend="aot_eager")
            out = compiled(example)
            out.float().sum().backward()
    finally:
        partitioners._optimize_runtime_with_given_memory = original
    return calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("examples/instances"))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.1, 0.3, 0.5])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    for size in args.sizes:
        for name, (model, example) in models(size).items():
            for budget in args.budgets:
                for index, instance in enumerate(record(model, example, budget)):
                    instance.update(model=name, budget=budget)
                    path = args.out / f"{name}_b{int(budget * 100):02d}_{index}.json"
                    path.write_text(json.dumps(instance) + "\n")
                    print(f"{path}: {len(instance['memory'])} items")


if __name__ == "__main__":
    main()
