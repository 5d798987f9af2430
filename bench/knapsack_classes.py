"""Pisinger's 9 classes at n in {1e3, 1e4, 1e5}, R in {1e3, 1e5, 1e7}: old remat against new.

Each instance is written by `remat generate` and solved by `remat solve --solver exact
--time-limit T --max-planner-bytes 1GiB` in a fresh process; wall time is measured around the
process, user CPU time from the child's rusage, and the solver's own `seconds`, `status`,
`path` and `planner_peak_bytes` are read from its JSON. Each binary runs `--repeats` times per
instance and the medians are reported.

    python bench/knapsack_classes.py --new build/remat --old /path/to/old/remat \
        --out bench/results/knapsack_classes/results.json
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

CLASSES = [
    "uncorrelated",
    "weakly_correlated",
    "strongly_correlated",
    "inverse_strongly_correlated",
    "almost_strongly_correlated",
    "subset_sum",
    "spanner",
    "profit_ceiling",
    "circle",
]


def run_once(binary, path, time_limit, cap):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [binary, "solve", "--solver", "exact", "--time-limit", str(time_limit),
         "--max-planner-bytes", str(cap), path],
        capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user = after.ru_utime - before.ru_utime
    if proc.returncode != 0:
        return {"wall": wall, "user": user, "status": "error rc=%d" % proc.returncode,
                "path": "", "seconds": wall, "peak": 0, "value": None}
    d = json.loads(proc.stdout)
    return {"wall": wall, "user": user, "status": d["status"], "path": d.get("path", ""),
            "seconds": d["seconds"], "peak": d["planner_peak_bytes"], "value": d["max_runtime"],
            "bound": d["upper_bound"]}


def median_run(binary, path, args):
    runs = [run_once(binary, path, args.time_limit, args.cap) for _ in range(args.repeats)]
    out = dict(runs[len(runs) // 2])
    for key in ("wall", "user", "seconds"):
        out[key] = statistics.median(r[key] for r in runs)
    out["peak"] = max(r["peak"] for r in runs)
    out["statuses"] = sorted({r["status"] for r in runs})
    out["paths"] = sorted({r["path"] for r in runs})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--new", default="build/remat")
    ap.add_argument("--old", default=None)
    ap.add_argument("--classes", nargs="*", default=CLASSES)
    ap.add_argument("--n", nargs="*", type=int, default=[1000, 10000, 100000])
    ap.add_argument("--R", nargs="*", type=int, default=[1000, 100000, 10000000])
    ap.add_argument("--seeds", nargs="*", type=int, default=[1, 2, 3])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--time-limit", type=float, default=5.0)
    ap.add_argument("--cap", type=int, default=1 << 30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    binaries = [("new", args.new)] + ([("old", args.old)] if args.old else [])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.classes:
            for n in args.n:
                for r in args.R:
                    for seed in args.seeds:
                        path = os.path.join(tmp, "i.json")
                        with open(path, "w") as f:
                            subprocess.run(
                                [args.new, "generate", "--family", family, "--n", str(n),
                                 "--seed", str(seed), "--range", str(r)],
                                stdout=f, check=True)
                        row = {"family": family, "n": n, "R": r, "seed": seed}
                        for name, binary in binaries:
                            row[name] = median_run(binary, path, args)
                        if args.old and row["new"]["value"] is not None and \
                                row["old"]["value"] is not None and \
                                row["old"]["status"] == "optimal" and \
                                row["new"]["status"] == "optimal":
                            row["same_optimum"] = row["new"]["value"] == row["old"]["value"]
                        rows.append(row)
                        line = "%-28s n=%-6d R=%-8d s=%d" % (family, n, r, seed)
                        for name, _ in binaries:
                            x = row[name]
                            line += "  %s %7.3fs wall %7.3fs user %-12s %-36s %6.1fMB" % (
                                name, x["wall"], x["user"], x["status"], x["path"],
                                x["peak"] / 2**20)
                        print(line, flush=True)
                        if args.out:
                            with open(args.out, "w") as f:
                                json.dump(rows, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
