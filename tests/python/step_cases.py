"""Training steps metered as the step-budget tests meter them, shared by those test files.

Each AdamW step is metered by StepMemoryMeter (which agrees with torch's MemTracker) from the
model's call to the optimizer's zero_grad; the losses and gradients are kept to compare with
plain training bit for bit.
"""

from __future__ import annotations

import copy

import torch

import remat.torch as rt

STEPS = 3


def train(model, step, steps=STEPS, optimizer=None, micro_steps=1, batch=()):
    """AdamW steps, each metered from the model's call to the optimizer's zero_grad (with the
    tensors in `batch` as held). Returns the peaks, losses and gradients."""
    torch.manual_seed(0)
    optimizer = optimizer or torch.optim.AdamW(model.parameters(), lr=1e-3)
    peaks, losses, grads = [], [], []
    for _ in range(steps):
        with rt.StepMemoryMeter(model, optimizer, batch) as meter:
            for _ in range(micro_steps):
                loss = step(model)
                loss.backward()
                losses.append(loss.detach())
                del loss
            # Not copies: the step holds its gradients anyway, and a copy would be the test's.
            grads.append([p.grad for p in model.parameters() if p.grad is not None])
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        peaks.append(meter.peak_bytes)
    return peaks, losses, grads


def same(a, b):
    return all(torch.equal(x, y) for x, y in zip(a, b)) and len(a) == len(b)


def zoo_measured(name):
    """The zoo model `name` (seed 0), its batch, a step of it, and measure()'s figures with
    AdamW."""
    from zoo import adopt
    from zoo.models import ZOO

    zoo = ZOO[name]
    args, kwargs = zoo.batch()
    torch.manual_seed(0)
    model = zoo.build(zoo.attention[0])

    def step(m):
        return zoo.loss(m(*args, **kwargs))

    probe = copy.deepcopy(model)
    measured = rt.measure(
        probe,
        *args,
        blocks=adopt.blocks_of(zoo, probe),
        loss_fn=zoo.loss,
        optimizer=torch.optim.AdamW(probe.parameters()),
        **kwargs,
    )
    return zoo, model, (args, kwargs), step, measured


def allocator_peak(run):
    """The CPU allocator's high-water mark over `run()`, beyond what it held before, as torch's
    profiler reads it: every allocation, wherever it is made (Inductor's generated code too)."""
    from torch.autograd.profiler import profile

    with profile(profile_memory=True, use_kineto=True) as profiled:
        run()
    events = [e for e in profiled.kineto_results.events() if e.name() == "[memory]"]
    current = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        current += event.nbytes()
        peak = max(peak, current)
    return peak
