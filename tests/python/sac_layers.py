"""What the selective-checkpointing tests share: a layer of the example models with its input, and
op times by kind instead of by clock."""

from __future__ import annotations

import dataclasses
import sys

import torch

from conftest import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
from remat.eager.measuring import chain as measure_chain  # noqa: E402
from remat.eager.measuring import ops as measure_ops  # noqa: E402
from remat.eager.run import block_planner, recorder  # noqa: E402


def layer_and_input(name: str):
    torch.manual_seed(0)
    if name == "gpt":
        model, blocks, x = models.make_gpt(depth=2, width=32, heads=4, seq=16, batch=2, dropout=0.2)
        h = model.prologue(x)
    elif name == "llama":
        model, blocks, x = models.make_llama(depth=2, width=64, heads=4, seq=16, batch=2)
        h = model.prologue(x)
    elif name == "resnet":
        model, blocks, x = models.make_resnet(per_stage=1, batch=2, size=8)
        h = model.prologue(x)
    else:
        model, blocks, x = models.make_mlp(depth=2, width=32, batch=8)
        h = x
    return blocks[0], h.detach().requires_grad_()


def _flop_like_op_times(monkeypatch) -> None:
    """Op times by kind instead of by clock (matmuls and attention 20 units, every other op 1),
    every block's forward 1 ms, and no fixed cost per region or per op SAC's modes see (the
    modes still run, checking that SAC replays each layer). The plan then depends on bytes and
    these ratios, not on a loaded machine's timings (with measured times, noise could make
    whole regions the cheaper plan and leave nothing selective to check)."""
    heavy = ("mm", "attention", "convolution")

    def flop_like(ops):
        timed = tuple(
            dataclasses.replace(op, seconds=1e-4 * (20 if any(k in op.name for k in heavy) else 1))
            for op in ops.ops
        )
        return dataclasses.replace(ops, ops=timed)

    measured_ops = measure_ops.profile_ops

    def profile_ops(*args, **kwargs):
        return flop_like(measured_ops(*args, **kwargs))

    measured_with_ops = measure_ops.measure_with_ops

    def measure_with_ops(*args, **kwargs):
        call, ops = measured_with_ops(*args, **kwargs)
        return dataclasses.replace(call, forward_seconds=1e-3), flop_like(ops)

    complete = measure_ops.ModesCache.complete

    def without_modes_cost(self, function, args, kwargs, profile, forward_seconds, repeats=0, **_):
        found = complete(self, function, args, kwargs, profile, None, repeats)
        return dataclasses.replace(found, modes_seconds=None)

    monkeypatch.setattr(measure_ops, "profile_ops", profile_ops)
    monkeypatch.setattr(measure_chain, "measure_with_ops", measure_with_ops)
    recorded_ops, recorded_profile = measure_ops.record_ops, recorder.recorded_profile
    monkeypatch.setattr(measure_ops, "record_ops", lambda *a, **k: flop_like(recorded_ops(*a, **k)))
    monkeypatch.setattr(
        recorder, "recorded_profile", lambda *a, **k: flop_like(recorded_profile(*a, **k))
    )
    monkeypatch.setattr(measure_ops.ModesCache, "complete", without_modes_cost)
    # The fixed cost of a region too: on these tiny blocks it is comparable to a block's forward,
    # and its noise alone can flip the plan between selective and whole regions.
    monkeypatch.setattr(block_planner, "_region_overhead", lambda *args: 0.0)
    monkeypatch.setattr(measure_chain, "_region_overhead", lambda *args: 0.0)
    measure = measure_chain.measure_call

    def measure_call(*args, **kwargs):
        return dataclasses.replace(measure(*args, **kwargs), forward_seconds=1e-3)

    class CallWatch(recorder.CallWatch):
        def measurement(self, out, seconds):
            return super().measurement(out, 1e-3)

    monkeypatch.setattr(measure_chain, "measure_call", measure_call)
    monkeypatch.setattr(recorder, "CallWatch", CallWatch)
