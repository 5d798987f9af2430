"""How well remat predicts what a selective (SAC) region of one block costs, entry by entry.

    python bench/selective_cost.py            # writes bench/results/eager_ops/selective_cost.md

One Llama-style block of `bench/eager_ops.py`'s CPU size (width 256, 8 heads, seq 256, batch 4),
on one thread, timed by the thread's CPU time. For several entries of the block's menu (from
"recompute everything" to "cache every cacheable op") it compares:

- predicted: the re-run time the chain planner is given for that entry
  (`remat.eager.measuring.menu.option_seconds`): the ops it re-runs, scaled to the block's forward
  time, plus, when it keeps ops, what SAC's modes were measured to add to this block
  (`remat.eager.measuring.ops.measure_modes`);
- the model before it (the ops alone, plus a per-op figure for the modes measured on a chain
  of tiny ops, 6-14 us an op on this machine; `--per-op-us` sets it);
- measured: a training step of the block (forward, backward) as a checkpoint region with that
  entry's policy, over the same step without checkpointing: the median of paired rounds, all
  entries interleaved in a shuffled order.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import statistics
import sys

import torch
from torch.utils.checkpoint import checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
from remat.eager._runtime import _PreservedState, clock  # noqa: E402
from remat.eager.measuring.menu import (
    menu,  # noqa: E402
    option_seconds,  # noqa: E402
)
from remat.eager.measuring.ops import profile_ops  # noqa: E402
from remat.eager.policy import context_fn  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=61)
    ap.add_argument("--per-op-us", type=float, default=7.0, help="the old model's per-op cost")
    ap.add_argument("--out", default=str(ROOT / "bench/results/eager_ops/selective_cost.md"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    block = models.LlamaBlock(256, 8)
    x = torch.randn(4, 256, 256, requires_grad=True)
    now = clock()
    with _PreservedState([block], {x.device}):
        ops = profile_ops(block, (x,), {}, set(), repeats=2)

    def forward_seconds() -> float:
        start = now()
        block(x)
        return now() - start

    forward = min(forward_seconds() for _ in range(7))
    scale = forward / sum(op.seconds for op in ops.ops)
    entries = menu(ops)
    picked = [
        entries[i] for i in sorted({0, 1, len(entries) // 2, len(entries) - 3, len(entries) - 1})
    ]
    dispatches = len(ops.ops) + ops.last_needed + 1

    def step(index: int | None) -> float:
        start = now()
        if index is None:
            y = block(x)
        elif picked[index].cached:
            contexts = context_fn(ops, picked[index], "block")
            y = checkpoint(block, x, use_reentrant=False, context_fn=contexts)
        else:
            y = checkpoint(block, x, use_reentrant=False)
        y.sum().backward()
        return now() - start

    keys: list[int | None] = [None, *range(len(picked))]
    for key in keys:
        step(key)
    extra: dict[int, list[float]] = {i: [] for i in range(len(picked))}
    for _ in range(args.rounds):
        order = keys[:]
        random.shuffle(order)
        times = {key: step(key) for key in order}
        for i in extra:
            extra[i].append(times[i] - times[None])
    caching_forward, cached_rerun = ops.modes_seconds or (forward, 0.0)
    forward_extra = max(0.0, caching_forward - forward)
    lines = [
        "# What a selective region of one block costs: predicted against measured",
        "",
        f"`python bench/selective_cost.py --rounds {args.rounds}`; torch {torch.__version__}, "
        "one thread, CPU time. One Llama-style block (width 256, 8 heads, seq 256, batch 4): "
        f"{len(ops.ops)} ops, forward {forward * 1e3:.2f} ms. SAC's modes measured on it: "
        f"{forward_extra * 1e3:.2f} ms more in the caching forward, {cached_rerun * 1e3:.2f} ms "
        "for a re-run that finds every cacheable op cached.",
        "",
        "Measured: the block's step as a checkpoint region with the entry's policy, over its "
        "plain step (median of paired rounds; the region's own fixed cost, tens of us, is in "
        f"it). Before: the ops alone plus {args.per_op_us:g} us for each of the {dispatches} ops "
        "the modes see.",
        "",
        "| ops kept | held | predicted | before | measured | predicted - measured |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for entry, samples in zip(picked, extra.values()):
        predicted = option_seconds(ops, entry, scale, forward)
        before = entry.recompute_seconds * scale
        if entry.cached:
            before += args.per_op_us * 1e-6 * dispatches
        measured = statistics.median(samples)
        lines.append(
            f"| {len(entry.cached)} | {entry.held_bytes / 2**20:.2f} MiB | "
            f"{predicted * 1e3:.2f} ms | {before * 1e3:.2f} ms | {measured * 1e3:.2f} ms | "
            f"{(predicted - measured) * 1e3:+.2f} ms |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    pathlib.Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
