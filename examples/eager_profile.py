"""Writes the profile `remat eager` plans: four MLP blocks and AdamW, one training step measured
(see docs/cli.md).

python3 examples/eager_profile.py > profile.json && remat eager profile.json --budget 8MiB
"""

import torch
from torch import nn

import remat.torch

torch.manual_seed(0)
block = lambda: nn.Sequential(nn.LayerNorm(64), nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))  # noqa: E731
model = nn.Sequential(*(block() for _ in range(4)))
optimizer = torch.optim.AdamW(model.parameters())
print(remat.torch.measure(model, torch.randn(16, 64, 64), optimizer=optimizer).to_json())
