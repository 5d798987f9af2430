"""The keep/recompute/offload planner (remat.eager.plan_offload) on chains of 200 layers: its
planning time, and what its model predicts offloading buys over keep/recompute alone (the same
program with no bandwidth: single-layer regions and their options) at budgets 5%, 20% and 50%
of the way from keep/recompute's least peak to the peak with no checkpointing, and halfway down
from it to the least with offloading. Offloading saved bytes replaces re-runs by copies that
hide behind compute; moving the regions' inputs goes below keep/recompute's least peak.

Layers are drawn at random (seeded): saved 0-64 MiB, output 1-8 MiB, forward 1-6 ms, backward
twice that, 0-2 selective options. The copy bandwidth is given (--bandwidth, default 25 GB/s,
a PCIe 4 x16 link's order); on a GPU measure it with remat.eager.measure_bandwidth.

    python bench/offload_planner.py            # about 10 s
"""

from __future__ import annotations

import argparse
import pathlib
import platform
import random
import statistics
import sys
import time
from datetime import date

from remat import _core
from remat.eager import plan_offload, plan_profile
from remat.eager.planning.offload import parse_bandwidth
from remat.eager.types import LayerProfile, Profile
from remat.units import format_bytes

ROOT = pathlib.Path(__file__).resolve().parents[1]
MIB = 1 << 20


def chain(seed: int, n: int) -> Profile:
    rng = random.Random(seed)
    layers = []
    for j in range(n):
        forward = 1e-3 * (1 + 5 * rng.random())
        saved = rng.randrange(65) * MIB
        options = tuple(
            (rng.randrange(saved // 2 + 1), forward * rng.uniform(0.2, 0.8))
            for _ in range(rng.randrange(3))
        )
        layers.append(
            LayerProfile(
                name=f"block{j}",
                saved_bytes=saved,
                output_bytes=rng.randrange(1, 9) * MIB,
                saves_output=rng.random() < 0.5,
                forward_seconds=forward,
                options=options,
            )
        )
    return Profile(
        input_bytes=8 * MIB, layers=tuple(layers), region_overhead_seconds=5e-5, max_region_layers=1
    )


def keep_recompute(profile: Profile, budget: int) -> float:
    """Re-run seconds of the best keep/recompute plan: the same program and slots with no
    bandwidth (plan_profile's nested-region program is cubic in the layers, so at 200 layers
    its default resolution is coarser and its plans worse)."""
    found = _core.offload_plan(
        profile.input_bytes,
        profile.planned_layers(),
        profile.region_overhead_seconds,
        budget,
        0.0,
        -1,
        [],
        [],
        [],
        2048,
        64,
    )
    return found.recompute_time


def timed(function, repeats: int):
    seconds, found = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        found = function()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--bandwidth", default="25GB/s")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "offload"))
    args = parser.parse_args()
    bandwidth = parse_bandwidth(args.bandwidth)
    rows = []
    for seed in range(args.seeds):
        profile = chain(seed, args.layers)
        loose = plan_profile(profile, 1 << 60)
        least, everything = loose.minimum_budget_bytes, loose.no_checkpoint_bytes
        offload_least = plan_offload(profile, 1 << 60, bandwidth=bandwidth).minimum_budget_bytes
        total_saved = sum(l.saved_bytes for l in profile.layers)
        for share in (-0.5, 0.05, 0.2, 0.5):
            room = everything - least if share > 0 else least - offload_least
            budget = int(least + share * room)
            for host in (None, total_saved // 4):
                if budget < least and host is not None:
                    continue  # moved inputs are small: a host budget of saved bytes never binds
                seconds, plan = timed(
                    lambda: plan_offload(profile, budget, bandwidth=bandwidth, host_budget=host),
                    args.repeats,
                )
                keep = keep_recompute(profile, budget) if budget >= least else None
                rows.append((seed, budget, host, seconds, plan, keep))
                print(
                    f"seed {seed} budget {format_bytes(budget)} host "
                    f"{'any' if host is None else format_bytes(host)}: {1e3 * seconds:.1f} ms, "
                    f"{len(plan.offloaded)} offloaded, {len(plan.inputs_offloaded)} inputs moved",
                    flush=True,
                )
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "planner_cpu.md").write_text(report(rows, args, bandwidth))
    print(f"wrote {out / 'planner_cpu.md'}")


def report(rows, args, bandwidth: float) -> str:
    command = " ".join(["python bench/offload_planner.py", *sys.argv[1:]])
    lines = [
        f"# Keep, recompute or offload: the planner on {args.layers}-layer chains",
        "",
        f"Command: `{command}`. Machine: {platform.machine()}, Python {sys.version.split()[0]}; "
        f"{date.today()}. Planning: median of {args.repeats} calls of `plan_offload` (2048 "
        "device slots, 64 host slots). Budgets: 5%, 20% and 50% of the way from the least peak "
        "of keep/recompute to no checkpointing's, and halfway from it down to the least peak with "
        "offloading (keep/recompute cannot go there: -). The step overheads are the model's "
        f"predictions at {format_bytes(bandwidth)}/s, not measurements: re-runs plus copy time "
        "not hidden behind compute, against the re-runs of the best keep/recompute plan at the "
        "same budget (the same program with no bandwidth).",
        "",
        "| seed | budget | host budget | planning ms | offloaded | inputs moved | re-run ms | "
        "stall ms | copies hidden | keep/recompute re-run ms |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for seed, budget, host, seconds, plan, keep in rows:
        lines.append(
            f"| {seed} | {format_bytes(budget)} | "
            f"{'any' if host is None else format_bytes(host)} | {1e3 * seconds:.1f} | "
            f"{len(plan.offloaded)} | {len(plan.inputs_offloaded)} | "
            f"{1e3 * plan.predicted_recompute_seconds:.1f} | "
            f"{1e3 * plan.predicted_stall_seconds:.1f} | {100 * plan.hidden_share:.0f}% | "
            + ("- |" if keep is None else f"{1e3 * keep:.1f} |")
        )
    worst = max(row[3] for row in rows)
    lines += [
        "",
        f"Target (200 layers planned in <= 1 s): {'met' if worst <= 1.0 else 'missed'}; the "
        f"slowest took {1e3 * worst:.1f} ms.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
