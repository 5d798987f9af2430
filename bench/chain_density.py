#!/usr/bin/env python3
"""How dense the heterogeneous chain planner's full table is at 1000 layers and 476 slots, and why
tight budgets stay slow: writes bench/results/chain_planner/density.json and density.md.

    cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2
    python3 bench/chain_density.py            # about 20 minutes on 2 cores

Each configuration fills the full table once (plan_profile_reference's program, through
`build/chain_planner_bench PROFILE BUDGET 476 density 7`) and counts, on the rows of every 7th
start point (every segment from each): the states, those with a schedule, those whose value
differs from the state one unit below, the splits with a finite value somewhere, the splits that
reach the row's value somewhere (and those that alone reach it somewhere: any exact fill must
evaluate them), and the splits that a coarse-to-fine fill could not set aside even knowing the
final rows, with samples of both parts every 2, 8 and 32 units.
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import tempfile

from chain_planner import make_profile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "bench", "results", "chain_planner")


def density(bench, path, budget, stride):
    out = subprocess.run(
        [bench, path, str(budget), "476", "density", str(stride)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def share(part, whole):
    return f"{100.0 * part / whole:.1f}%" if whole else "-"


def write(results, path):
    lines = [
        "# Why tight budgets stay slow: the full table's density at 1000 layers, 476 slots",
        "",
        "Written by `bench/chain_density.py`. Each row fills the full table once (the reference",
        "program) for `bench/make_chain_profile.py --layers 1000 --seed S` at a budget of the",
        "given fraction of the total activation bytes, and counts on the rows of every 7th start",
        "point (every segment from each):",
        "",
        "- *finite*: states (s, t, m) with a schedule, of all states w_s <= m <= min(C, W(s, t));",
        "- *new values*: finite states whose value differs from the state one unit below, of the",
        "  finite ones (a sparse row representation could skip the others);",
        "- *minimizers*: splits (s, t, j) that reach the row's value at some m, of the splits",
        "  with a finite value somewhere; *sole*: those that alone reach it somewhere (any exact",
        "  fill must evaluate each at that m);",
        "- *unresolved by samples every k units*: splits that a coarse-to-fine fill could not set",
        "  aside **even knowing the final rows**: on some block of k units, the split's lower",
        "  bound from samples of both its parts every k units (rows only fall with m) is below",
        "  the row at the block's start.",
        "",
        "| seed | budget fraction | C | finite | new values | splits | minimizers | sole |"
        " unresolved, k = 2 | k = 8 | k = 32 | table and counts |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        d = r["density"]
        u = d["unresolved_by_samples"]
        lines.append(
            f"| {r['seed']} | {r['fraction']:g} | {d['capacity']} | "
            f"{share(d['finite_entries'], d['entries'])} | "
            f"{share(d['distinct_values'], d['finite_entries'])} | {d['splits']:,} | "
            f"{share(d['minimizing_splits'], d['splits'])} | "
            f"{share(d['sole_minimizers'], d['splits'])} | "
            f"{share(u['2'], d['splits'])} | {share(u['8'], d['splits'])} | "
            f"{share(u['32'], d['splits'])} | {d['wall_s']:.0f} s |"
        )
    tight = [r for r in results if r["fraction"] <= 0.015]
    if tight:

        def span(key):
            values = [100.0 * key(r["density"]) for r in tight]
            low, high = f"{min(values):.0f}", f"{max(values):.0f}"
            return f"{low}%" if low == high else f"{low}-{high}%"

        lines += [
            "",
            f"At budgets of 1-1.5% of the activation bytes, "
            f"{span(lambda d: d['finite_entries'] / d['entries'])} of the states have a schedule",
            f"and {span(lambda d: d['distinct_values'] / d['finite_entries'])} of those carry a "
            "value of their own: the answer itself is dense, so",
            "every row is computed entry by entry. Only "
            f"{span(lambda d: d['minimizing_splits'] / d['splits'])} of the splits are the "
            "minimum anywhere, and each of",
            "them alone somewhere, but they cannot be told apart cheaply: rows fall steeply with m",
            "and the splits' values lie close together. Even with the final rows known, samples of",
            "the parts every 8 units (a sketch an eighth of the table) leave "
            f"{span(lambda d: d['unresolved_by_samples']['8'] / d['splits'])} of the",
            "splits unresolved, and samples every 2 units (half the table) "
            f"{span(lambda d: d['unresolved_by_samples']['2'] / d['splits'])}; a real",
            "coarse-to-fine fill, which prunes against rows still being filled, does worse. The",
            "band program (src/chain/band/) already skips every split and block of memory",
            "values that the exact least values and finite starts of its parts rule out.",
        ]
    lines += [
        "",
        "The last column is the wall time of one table and its counts, with two tables filled at",
        "once on this machine's 2 cores (and other jobs running): for scale only.",
    ]
    lines += [
        "",
        "Reproduce: `cmake -S . -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j2 &&",
        "python3 bench/chain_density.py`.",
        "",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--fractions", default="0.01,0.015,0.1")
    ap.add_argument("--stride", type=int, default=7, help="examine every k-th start point")
    ap.add_argument("--jobs", type=int, default=2, help="tables filled at once (1.9 GB each)")
    ap.add_argument(
        "--write-only", action="store_true", help="rewrite density.md from density.json"
    )
    args = ap.parse_args()
    if args.write_only:
        with open(os.path.join(OUT, "density.json")) as f:
            write(json.load(f), os.path.join(OUT, "density.md"))
        return
    bench = os.path.join(args.build, "chain_planner_bench")
    configs = [
        (int(seed), float(fraction))
        for seed in args.seeds.split(",")
        for fraction in args.fractions.split(",")
    ]
    with tempfile.TemporaryDirectory() as folder:
        # One at a time: make_profile writes one file per seed, which the tables then read.
        made = [
            (seed, fraction, *make_profile(1000, seed, fraction, folder))
            for seed, fraction in configs
        ]
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = [
                (seed, fraction, budget, pool.submit(density, bench, path, budget, args.stride))
                for seed, fraction, path, budget in made
            ]
            results = []
            for seed, fraction, budget, future in futures:
                results.append(
                    {
                        "seed": seed,
                        "fraction": fraction,
                        "budget": budget,
                        "density": future.result(),
                    }
                )
                print(json.dumps(results[-1]), flush=True)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "density.json"), "w") as f:
        json.dump(results, f, indent=1)
    write(results, os.path.join(OUT, "density.md"))


if __name__ == "__main__":
    main()
