#!/usr/bin/env python3
"""Checks `remat solve --solver exact --time-limit L` on Pisinger's classes: every truncated solve
must stop within 10% or 50 ms of its limit, whichever is larger, and return a plan that fits,
whose reported value is its value, no better than the optimum, with an upper bound no lower
than the optimum (and the optimum itself when it says `optimal`).

    python3 bench/time_limits.py                               # n = 1e3 and 1e4, 5 limits
    python3 bench/time_limits.py --n 100000 --seeds 4 5 --limits 0.1 0.5 1.0 \\
        --classes circle almost_strongly_correlated strongly_correlated \\
        inverse_strongly_correlated subset_sum spanner profit_ceiling weakly_correlated \\
        uncorrelated
    python3 bench/time_limits.py --remat build-asan/remat      # the sanitizer build

The optimum of each instance comes from an unlimited run (`--reference-limit`, 30 s); an instance
it does not prove is reported and skipped. Prints every violation and a summary line; exits 1 if
there was any.
"""

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile

HARD_CLASSES = [
    "circle",
    "almost_strongly_correlated",
    "strongly_correlated",
    "inverse_strongly_correlated",
    "subset_sum",
    "spanner",
    "profit_ceiling",
    "weakly_correlated",
]


def solve(remat, path, limit):
    out = subprocess.run(
        [remat, "solve", path, "--solver", "exact", "--time-limit", str(limit)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out)


def problems(instance, result, optimum, limit):
    """What is wrong with one truncated solve: a list of short texts, empty when it is right."""
    wrong = []
    saved = result["saved"]
    value = sum(instance["runtime"][i] for i in saved)
    memory = sum(instance["memory"][i] for i in saved)
    tol = 1e-9 * abs(optimum) + 1e-6
    if abs(value - result["max_runtime"]) > tol:
        wrong.append("reported value %r, plan's %r" % (result["max_runtime"], value))
    if memory > instance["max_memory"] * (1 + 1e-9):
        wrong.append("plan uses %r of %r" % (memory, instance["max_memory"]))
    if result["max_runtime"] > optimum + tol:
        wrong.append("value %r above the optimum %r" % (result["max_runtime"], optimum))
    if result["upper_bound"] < optimum - tol:
        wrong.append("bound %r below the optimum %r" % (result["upper_bound"], optimum))
    if result["status"] == "optimal" and abs(result["max_runtime"] - optimum) > tol:
        wrong.append("optimal, but %r against %r" % (result["max_runtime"], optimum))
    allowed = max(1.1 * limit, limit + 0.05)
    if result["seconds"] > allowed:
        wrong.append("%.3f s at a %g s limit (allowed %.3f)" % (result["seconds"], limit, allowed))
    return wrong


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--remat", default="build/remat")
    ap.add_argument("--classes", nargs="*", default=HARD_CLASSES)
    ap.add_argument("--n", nargs="*", type=int, default=[1000, 10000])
    ap.add_argument("--ranges", nargs="*", type=int, default=[100000, 10000000])
    ap.add_argument("--seeds", nargs="*", type=int, default=[4, 5])
    ap.add_argument("--limits", nargs="*", type=float, default=[0.002, 0.01, 0.03, 0.1, 0.3])
    ap.add_argument("--reference-limit", type=float, default=30.0)
    args = ap.parse_args()
    checked, violations, worst = 0, 0, None
    with tempfile.TemporaryDirectory() as tmp:
        for family, n, r, seed in itertools.product(args.classes, args.n, args.ranges, args.seeds):
            path = os.path.join(tmp, "%s_%d_%d_%d.json" % (family, n, r, seed))
            with open(path, "w") as f:
                subprocess.run(
                    [args.remat, "generate", "--family", family, "--n", str(n)]
                    + ["--seed", str(seed), "--range", str(r)],
                    stdout=f,
                    check=True,
                )
            full = solve(args.remat, path, args.reference_limit)
            name = "%s n=%d R=%d seed %d" % (family, n, r, seed)
            if full["status"] != "optimal":
                print("skipped, not proven in %g s: %s" % (args.reference_limit, name))
                continue
            instance = json.load(open(path))
            for limit in args.limits:
                result = solve(args.remat, path, limit)
                checked += 1
                over = result["seconds"] - limit
                if worst is None or over > worst[0]:
                    worst = (over, name, limit)
                wrong = problems(instance, result, full["max_runtime"], limit)
                if wrong:
                    violations += 1
                    print("%s at %g s (%s): %s" % (name, limit, result["path"], "; ".join(wrong)))
    summary = "%d truncated solves, %d wrong" % (checked, violations)
    if worst is not None:
        summary += "; the most past its limit: %.1f ms (%s, limit %g s)" % (
            1e3 * worst[0],
            worst[1],
            worst[2],
        )
    print(summary)
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
