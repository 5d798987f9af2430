#!/usr/bin/env python3
"""Writes a random, seeded heterogeneous chain profile for `remat chain --profile`.

The chain imitates a deep network of repeated blocks whose layers are unequal, the way real
profiles are: each block has a normalization, a projection, an attention-like mixer, a wide
(4x) hidden layer and its activation, and a down projection; every few blocks a stage boundary
halves or doubles the activation size (as in convolutional stages). Sizes are whole multiples
of 4 KiB (tensor sizes share powers of two) with per-layer noise, so the sizes' common divisor
is small next to budget / slots and the planner counts units, not the divisor. Forward times
follow a per-kind arithmetic intensity with noise (matmuls are slow for their output, pointwise
layers fast), in milliseconds.

    python3 bench/make_chain_profile.py --layers 1000 --seed 1 > profile.json
    python3 bench/make_chain_profile.py --layers 1000 --budget-fraction 0.1 --print-budget

--print-budget prints only the budget in bytes: the fraction of the total activation bytes
(a_0..a_{n-1}), rounded down.
"""

import argparse
import json
import random
import sys

# (kind, size relative to the block's width, milliseconds per MiB of output)
BLOCK = [
    ("norm", 1.0, 0.004),
    ("qkv", 3.0, 0.020),
    ("attention", 1.0, 0.060),
    ("proj", 1.0, 0.025),
    ("up", 4.0, 0.030),
    ("gelu", 4.0, 0.003),
    ("down", 1.0, 0.030),
]
PAGE = 4096


def make(layers, seed):
    rng = random.Random(seed)
    width = 64 << 20  # bytes of one block-width activation at stage 0
    input_bytes = width
    out = []
    stage_every = max(1, layers // (len(BLOCK) * 6))  # about 6 stages
    block = 0
    while len(out) < layers:
        if block and block % stage_every == 0:
            width = int(width * rng.choice([0.5, 0.5, 2.0, 1.0]))
            width = max(width, 4 << 20)
        for kind, rel, ms_per_mib in BLOCK:
            if len(out) == layers:
                break
            noise = rng.lognormvariate(0.0, 0.25)
            size = max(PAGE, int(width * rel * noise) // PAGE * PAGE)
            time = ms_per_mib * size / (1 << 20) * rng.lognormvariate(0.0, 0.3)
            out.append(
                {
                    "name": f"b{block}.{kind}",
                    "activation_bytes": size,
                    "forward_time": round(time, 6),
                }
            )
        block += 1
    return {"input_bytes": input_bytes, "layers": out}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--budget-fraction", type=float, default=0.1)
    ap.add_argument("--print-budget", action="store_true")
    args = ap.parse_args()
    if args.layers < 1:
        sys.exit("--layers must be at least 1")
    profile = make(args.layers, args.seed)
    if args.print_budget:
        sizes = [profile["input_bytes"]] + [l["activation_bytes"] for l in profile["layers"][:-1]]
        print(int(sum(sizes) * args.budget_fraction))
    else:
        json.dump(profile, sys.stdout, indent=0)
        sys.stdout.write("\n")


if __name__ == "__main__":
    main()
