#!/usr/bin/env python3
"""Times the heterogeneous chain planner (`remat chain --profile`) against the full-table
program it replaced, and writes bench/results/chain_planner/README.md.

    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
    python3 bench/chain_planner.py                 # the committed table (about 15 minutes)
    python3 bench/chain_planner.py --quick         # n = 100 and 300 only

Profiles come from bench/make_chain_profile.py (seeded). Each configuration runs the planner
`--repeats` times and the reference `--reference-repeats` times (each in a fresh process, through
build/chain_planner_bench), and reports medians of wall and user CPU seconds of the planning call.
Objectives are compared as printed with 17 significant digits (bit-identical doubles), plans by a
hash of the action list. The 1000-layer, 476-slot row also times the whole command line,
`remat chain --profile P --budget B --slots 476`, with /usr/bin/time.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "results", "chain_planner")
TARGET_S = 2.0


def auto_slots(layers, budget):
    """The CLI's default --slots (src/cli/chain_commands.cpp, auto_slots), assuming the default
    planner cap (half of RAM) is at least 1 GiB."""
    n = float(layers)
    rows = n * (n + 1) / 2 + n
    by_memory = 256.0 * (1 << 20) / (rows * 8) - 1
    by_time = 6e10 / (n * n * n)
    slots = int(min(max(min(by_memory, by_time), 8.0), 512.0))
    return max(1, min(slots, budget))


def make_profile(layers, seed, fraction, folder):
    gen = os.path.join(ROOT, "bench", "make_chain_profile.py")
    path = os.path.join(folder, f"chain_{layers}_{seed}.json")
    with open(path, "w") as f:
        subprocess.run(
            [sys.executable, gen, "--layers", str(layers), "--seed", str(seed)],
            stdout=f,
            check=True,
        )
    budget = int(
        subprocess.run(
            [
                sys.executable,
                gen,
                "--layers",
                str(layers),
                "--seed",
                str(seed),
                "--budget-fraction",
                str(fraction),
                "--print-budget",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    return path, budget


def run_planner(bench, path, budget, slots, planner, repeats):
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [bench, path, str(budget), str(slots), planner],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        runs.append(json.loads(out))
    return {
        "wall_s": statistics.median(r["wall_s"] for r in runs),
        "user_s": statistics.median(r["user_s"] for r in runs),
        "sys_s": statistics.median(r["sys_s"] for r in runs),
        "walls": [r["wall_s"] for r in runs],
        "objective": runs[0]["objective"],
        "plan_hash": runs[0]["plan_hash"],
        "slots_counted": runs[0]["slots"],
        "bands": runs[0]["bands"],
        "consistent": len({(r["objective"], r["plan_hash"]) for r in runs}) == 1,
    }


def run_cli(remat, path, budget, slots, repeats):
    walls, users = [], []
    for _ in range(repeats):
        proc = subprocess.run(
            [
                "/usr/bin/time",
                "-f",
                "%e %U",
                remat,
                "chain",
                "--profile",
                path,
                "--budget",
                str(budget),
                "--slots",
                str(slots),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        wall, user = proc.stderr.strip().splitlines()[-1].split()
        walls.append(float(wall))
        users.append(float(user))
    return statistics.median(walls), statistics.median(users)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--reference-repeats", type=int, default=3)
    ap.add_argument(
        "--reference-repeats-1000",
        type=int,
        default=1,
        help="the reference takes minutes at 1000 layers and 476 slots",
    )
    ap.add_argument(
        "--fraction",
        type=float,
        default=0.1,
        help="budget as a fraction of the total activation bytes",
    )
    ap.add_argument(
        "--sweep",
        default="0.01,0.015,0.02,0.025,0.03,0.05,0.1,0.2,0.3,0.5",
        help="fractions for the 1000 x 476 budget sweep (planner only)",
    )
    ap.add_argument("--sweep-seeds", default="1,2,3", help="profile seeds of the budget sweep")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument(
        "--from-json",
        action="store_true",
        help="rewrite README.md from the committed results.json, running nothing",
    )
    args = ap.parse_args()
    if args.from_json:
        with open(os.path.join(OUT, "results.json")) as f:
            saved = json.load(f)
        write_readme(saved["rows"], saved["sweep"], args, saved["load_average"])
        return
    bench = os.path.join(args.build, "chain_planner_bench")
    remat = os.path.join(args.build, "remat")
    sizes = [100, 300] if args.quick else [100, 300, 1000]
    rows, sweep = [], []
    with tempfile.TemporaryDirectory() as folder:
        for n in sizes:
            path, budget = make_profile(n, 1, args.fraction, folder)
            for label, slots in (("auto", auto_slots(n, budget)), ("476", 476)):
                new = run_planner(bench, path, budget, slots, "new", args.repeats)
                ref_repeats = args.reference_repeats_1000 if n >= 1000 else args.reference_repeats
                old = run_planner(bench, path, budget, slots, "reference", ref_repeats)
                row = {
                    "layers": n,
                    "slots": label,
                    "slots_value": slots,
                    "budget": budget,
                    "new": new,
                    "old": old,
                    "same_objective": new["objective"] == old["objective"],
                    "same_plan": new["plan_hash"] == old["plan_hash"],
                }
                if n == 1000 and slots == 476:
                    row["cli_wall_s"], row["cli_user_s"] = run_cli(
                        remat, path, budget, slots, args.repeats
                    )
                rows.append(row)
                print(json.dumps(row), flush=True)
        if not args.quick:
            for seed in [int(x) for x in args.sweep_seeds.split(",") if x]:
                for fraction in [float(x) for x in args.sweep.split(",") if x]:
                    path, budget = make_profile(1000, seed, fraction, folder)
                    new = run_planner(bench, path, budget, 476, "new", 3)
                    entry = {"seed": seed, "fraction": fraction, "budget": budget, "new": new}
                    sweep.append(entry)
                    print(json.dumps(entry), flush=True)
    if args.no_write:
        return
    os.makedirs(OUT, exist_ok=True)
    load = os.getloadavg()
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump({"rows": rows, "sweep": sweep, "load_average": load}, f, indent=1)
    write_readme(rows, sweep, args, load)


def write_readme(rows, sweep, args, load):
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    lines = [
        "# Heterogeneous chain planner: band program against the full table",
        "",
        "`remat chain --profile` plans with `plan_profile` (src/chain/band/), which",
        "fills the dynamic program only on a band of states and certifies that the states outside",
        "cannot be optimal or tied; `plan_profile_reference` (src/chain/profile_reference.cpp) is",
        "the full O(n^3 C) table it replaced. Times are of the planning call alone (median wall",
        "and user CPU seconds over fresh processes); objectives are compared to the last bit and",
        "plans by a hash of the action list.",
        "",
        f"Profiles: `bench/make_chain_profile.py --layers N --seed 1`, budget "
        f"{args.fraction:g} of the total activation bytes (`--budget-fraction`). Auto slots is the",
        "CLI's default `--slots` (60 at 1000 layers, 512 below).",
        "",
        "| layers | slots | old wall s | old user s | new wall s | new user s | speed-up (user) |"
        " same objective | same plan |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        speed = r["old"]["user_s"] / max(r["new"]["user_s"], 1e-9)
        lines.append(
            f"| {r['layers']} | {r['slots']} ({r['slots_value']}) | {r['old']['wall_s']:.2f} | "
            f"{r['old']['user_s']:.2f} | {r['new']['wall_s']:.3f} | {r['new']['user_s']:.3f} | "
            f"{speed:.0f}x | {'yes' if r['same_objective'] else 'NO'} | "
            f"{'yes' if r['same_plan'] else 'NO'} |"
        )
    target = [r for r in rows if r["layers"] == 1000 and r["slots"] == "476"]
    if target:
        r = target[0]
        met = r["new"]["wall_s"] <= TARGET_S
        lines += [
            "",
            f"**Target: 1000 layers with 476 slots in <= {TARGET_S:g} s: "
            f"{'met' if met else 'missed'}** at this budget (planner {r['new']['wall_s']:.2f} s "
            f"wall, {r['new']['user_s']:.2f} s user; the whole command line "
            f"`remat chain --profile ... --slots 476` {r['cli_wall_s']:.2f} s wall, "
            f"{r['cli_user_s']:.2f} s user).",
        ]
    if sweep:
        lines += [
            "",
            "Budget sweep at 1000 layers and 476 slots (planner only, median of 3), on the",
            "profiles of seeds " + ", ".join(sorted({str(e["seed"]) for e in sweep})) + ":",
            "",
            "| seed | budget fraction | wall s | user s | system s | bands filled | <= 2 s |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for e in sweep:
            lines.append(
                f"| {e['seed']} | {e['fraction']:g} | {e['new']['wall_s']:.2f} | "
                f"{e['new']['user_s']:.2f} | {e['new']['sys_s']:.2f} | "
                f"{e['new']['bands']} | "
                f"{'met' if e['new']['wall_s'] <= TARGET_S else 'missed'} |"
            )
        missed = [
            f"{e['fraction']:g} (seed {e['seed']})" for e in sweep if e["new"]["wall_s"] > TARGET_S
        ]
        lines += [
            "",
            "With tight budgets (a few times the largest pair of adjacent activations) optimal",
            "schedules recompute deep inside long segments: the first band's certificate fails and",
            "the band widens (more bands filled); the result stays exact. At 1-1.5% of the",
            "activation bytes (10-15 average layers' outputs for 1000 layers) optimal first-pass",
            "segments run a hundred layers and more, and the optimum recomputes about 2.2 times the",
            "forward pass. There the bounds on a derivation with a segment too long for the band",
            "((b) and the splitting lemma (c) in docs/design/chain_planner.md) stay a few percent under the",
            "optimum, but the cost of the first pass up to the segment's start makes up for it at",
            "all start points except a few near the chain's start. A band that fails lengthens the",
            "segments of those start points only (2 to 165 of 1000 on these profiles), where it",
            "used to lengthen every start point's; each start point's rows lie in a block of their",
            "own, kept in place when its segments do not change; rows are stored from their first",
            "finite memory value (below it, 35-56% of the entries at 1%, they are infinite); and",
            "the F rows past the last start point that changed are kept. Where the bound at a start",
            "point stays more than 5% under the optimum, its segments reach at once the next output",
            "the splitting lemma can split at (kFarUnder), and more than 20% under, short segments",
            "grow fourfold (kVeryFarUnder: on seed 2 at 1%, from 128 layers to 512, two bands where",
            "four were filled); and the lemma's bound reads F past the budget from",
            "the rows within it (a first segment priced by (b), the rest of the derivation known:",
            "seed 2 at 1.5%, three bands where four were filled). The system column is the",
            "kernel faulting fresh memory in (this machine is a VM, where a first touch costs",
            "1-2.5 s a GB, as measured here).",
        ]
        if missed:
            lines.append(
                f"The 2 s target is missed at budget fractions "
                f"{', '.join(missed)} of this sweep. Where that time goes, band by band, and what"
                " was tried against it: [tight_budgets.md](tight_budgets.md)."
            )
        else:
            lines.append(
                "The slowest points, band by band, and what was tried against them:"
                " [tight_budgets.md](tight_budgets.md)."
            )
        lines += [
            "Why pruning the splits alone could not bring those points under 2 s, measured on the"
            " full table: [density.md](density.md) (`bench/chain_density.py`).",
        ]
    lines += [
        "",
        "Reproduce: `cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 &&",
        "python3 bench/chain_planner.py`.",
        "",
        f"Machine: {cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}; load",
        f"average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 minutes) when the run",
        "ended. The band planner fills its rows on every core (at most 8), so its wall time can",
        "be below its user CPU time; the reference is single-threaded.",
        "",
    ]
    with open(os.path.join(OUT, "README.md"), "w") as f:
        f.write("\n".join(lines))


if __name__ == "__main__":
    main()
