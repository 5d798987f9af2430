"""A/B of two builds of the heterogeneous chain planner on the same profiles and budgets.

    python3 bench/chain_planner_ab.py OLD_BENCH NEW_BENCH [--label TEXT] [--runs 2] [--out FILE]
        [--fractions 0.01,0.015,0.02,0.025,0.1]

OLD_BENCH and NEW_BENCH are two `chain_planner_bench` binaries (build one from an older commit
with `git worktree add`). Each point runs the two alternately, `--runs` times each, in fresh
processes, on 1000 layers x 476 slots; it prints the objective to the last bit, the plan hash and
the median wall seconds of the planning call of each, and fails if the objectives or plans differ.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = (1, 2, 3)
FRACTIONS = (0.01, 0.015, 0.02, 0.025, 0.1)


def profile(directory, seed, fraction):
    path = os.path.join(directory, f"seed{seed}.json")
    maker = [sys.executable, os.path.join(HERE, "make_chain_profile.py"), "--layers", "1000"]
    if not os.path.exists(path):
        with open(path, "w") as out:
            subprocess.run(maker + ["--seed", str(seed)], stdout=out, check=True)
    budget = subprocess.run(
        maker + ["--seed", str(seed), "--budget-fraction", str(fraction), "--print-budget"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return path, budget


def plan(binary, path, budget):
    out = subprocess.run(
        [binary, path, budget, "476", "new", "1"], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--label", default="")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out")
    parser.add_argument(
        "--fractions",
        default=",".join(f"{f:g}" for f in FRACTIONS),
        help="budgets, as fractions of the total activation bytes",
    )
    args = parser.parse_args()
    lines = [
        f"# A/B: the band planner {args.label}, 1000 layers x 476 slots",
        f"# objective, plan hash, median wall s of {args.runs} runs of the planning call each, "
        "interleaved (build/chain_planner_bench PROFILE BUDGET 476 new 1)",
        "# profiles: bench/make_chain_profile.py --layers 1000 --seed S; "
        "budget: --budget-fraction F --print-budget",
    ]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory() as directory:
        for seed in SEEDS:
            for fraction in [float(f) for f in args.fractions.split(",") if f]:
                path, budget = profile(directory, seed, fraction)
                walls = {"old": [], "new": []}
                seen = {}
                for _ in range(args.runs):
                    for name in ("old", "new"):
                        result = plan(getattr(args, name), path, budget)
                        walls[name].append(result["wall_s"])
                        seen[name] = (result["objective"], result["plan_hash"])
                if seen["old"] != seen["new"]:
                    sys.exit(f"seed {seed} {fraction}: old {seen['old']} != new {seen['new']}")
                line = f"seed {seed} {fraction} " + " | ".join(
                    f"{name}: {seen[name][0]} {seen[name][1]} {statistics.median(walls[name]):.3f}"
                    for name in ("old", "new")
                )
                lines.append(line)
                print(line, flush=True)
    if args.out:
        with open(args.out, "w") as out:
            out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
