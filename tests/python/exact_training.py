"""What the auto_checkpoint tests share: a loss, a few SGD steps recorded and compared bit for bit,
a model's own generators, and the warnings a run recorded."""

import random

import numpy
import torch


def loss_of(out: torch.Tensor) -> torch.Tensor:
    return out.float().pow(2).mean()


def train(model, args, kwargs, steps=3):
    """Outputs and gradients of `steps` SGD steps, dropout masks seeded per step."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    record = []
    for step in range(steps):
        torch.manual_seed(100 + step)
        random.seed(100 + step)
        numpy.random.seed(100 + step)
        out = model(*args, **kwargs)
        loss_of(out).backward()
        record.append((out.detach().clone(), [p.grad.clone() for p in model.parameters()]))
        optimizer.step()
        optimizer.zero_grad()
    return record


def assert_same(got, expected):
    for (out_a, grads_a), (out_b, grads_b) in zip(got, expected):
        assert torch.equal(out_a, out_b)
        assert all(torch.equal(a, b) for a, b in zip(grads_a, grads_b))


def _generators(model):
    return [v for m in model.modules() for v in vars(m).values() if isinstance(v, torch.Generator)]


def _warned(record, text):
    return [w for w in record if text in str(w.message)]
