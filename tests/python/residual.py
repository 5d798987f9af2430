"""A model shared by the step-budget and estimate tests: blocks called in the model's loop, a
residual outside them, and a wide head whose logits set the step's peak at some budgets."""

from __future__ import annotations

import torch
from torch import nn


class Residual(nn.Module):
    """Blocks called in the model's loop, a residual outside them, and a wide head whose logits
    set the step's peak at some budgets."""

    def __init__(self, depth: int = 6, width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            nn.Sequential(
                nn.LayerNorm(width),
                nn.Linear(width, 4 * width),
                nn.GELU(),
                nn.Linear(4 * width, width),
            )
            for _ in range(depth)
        )
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return self.head(x).float().logsumexp(-1).mean()
