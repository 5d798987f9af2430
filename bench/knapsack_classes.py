"""Pisinger's 9 classes at n in {1e3, 1e4, 1e5}, R in {1e3, 1e5, 1e7}: old remat against new.

Each instance is written by `remat generate` and solved by `remat solve --solver exact
--time-limit T --max-planner-bytes 1GiB` in a fresh process; wall time is measured around the
process, user CPU time from the child's rusage, and the solver's own `seconds`, `status`,
`path` and `planner_peak_bytes` are read from its JSON. Each binary runs `--repeats` times per
instance and the medians are reported.

    python bench/knapsack_classes.py --new build/remat --old /path/to/old/remat \
        --out bench/results/knapsack_classes/results.json

--regression instead times bench/run.py's recorded real, torch-like and paper-scale instances
in process, with bench/cpp/solve_timing.cpp linked against each build's libremat_core.a
(--new-lib, --old-lib).
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


def summarize(runs):
    out = dict(runs[len(runs) // 2])
    for key in ("wall", "user", "seconds"):
        out[key] = statistics.median(r[key] for r in runs)
    out["peak"] = max(r["peak"] for r in runs)
    out["statuses"] = sorted({r["status"] for r in runs})
    out["paths"] = sorted({r["path"] for r in runs})
    return out


def interleaved(binaries, path, args):
    """Runs the binaries in turn, repeat by repeat, so that drifts in machine load hit both."""
    runs = {name: [] for name, _ in binaries}
    for _ in range(args.repeats):
        for name, binary in binaries:
            runs[name].append(run_once(binary, path, args.time_limit, args.cap))
    return {name: summarize(r) for name, r in runs.items()}


def regression_instances(binary, tmp):
    """(family, label, path): bench/run.py's real, torch-like and paper-scale instances."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    real = os.path.join(root, "examples", "instances")
    for name in sorted(os.listdir(real)):
        yield "real", name[:-5], os.path.join(real, name)
    generated = [("torch_like", "n=%d" % n, ["--n", str(n), "--budget", "0.5"])
                 for n in (100, 1000, 10000, 100000)]
    generated += [("paper_scale", "n=%d Q=%.0e" % (n, q), ["--n", str(n), "--budget-quanta", str(q)])
                  for n, q in ((100, 1e7), (100, 1e9), (500, 1e8), (2000, 1e9), (2000, 1e10))]
    for family, label, extra in generated:
        path = os.path.join(tmp, "%s_%s.json" % (family, label.replace(" ", "_")))
        with open(path, "w") as f:
            subprocess.run([binary, "generate", "--family", family, "--seed", "1"] + extra,
                           stdout=f, check=True)
        yield family, label, path


def build_timer(lib, include, out):
    """bench/cpp/solve_timing.cpp linked against one build of libremat_core.a."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run(["g++", "-O2", "-std=c++20", "-I", include,
                    os.path.join(root, "bench", "cpp", "solve_timing.cpp"), lib, "-o", out],
                   check=True)
    return out


def regression(args, binaries):
    """In-process times: most of these instances take microseconds, far below a process start,
    so each build's core library is linked into bench/cpp/solve_timing.cpp and timed there
    (median of --inner calls), the two builds alternating for --repeats rounds."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        timers = [("new", build_timer(args.new_lib, os.path.join(root, "include"),
                                      os.path.join(tmp, "timer_new")))]
        if args.old_lib:
            timers.append(("old", build_timer(args.old_lib, os.path.join(root, "include"),
                                              os.path.join(tmp, "timer_old"))))
        cases = []
        for family, label, path in regression_instances(args.new, tmp):
            d = json.load(open(path))
            text = os.path.join(tmp, "case%d.txt" % len(cases))
            with open(text, "w") as f:
                f.write("%d %r %r\n" % (len(d["memory"]), d["max_memory"], d.get("scale", 10000.0)))
                for m, r in zip(d["memory"], d["runtime"]):
                    f.write("%r %r\n" % (m, r))
            cases.append((family, label, text))
        results = {name: {} for name, _ in timers}
        for _ in range(args.repeats):
            for name, timer in timers:
                out = subprocess.run([timer, str(args.inner)] + [c[2] for c in cases],
                                     capture_output=True, text=True, check=True).stdout
                for line in out.splitlines():
                    path, seconds, status, solved_path, value = line.split()
                    results[name].setdefault(path, []).append(
                        (float(seconds), status, solved_path, float(value)))
        for family, label, text in cases:
            row = {"family": family, "instance": label}
            for name, _ in timers:
                runs = results[name][text]
                row[name] = {"seconds": statistics.median(r[0] for r in runs),
                             "status": runs[0][1], "path": runs[0][2], "value": runs[0][3]}
            line = "%-12s %-22s" % (family, label)
            for name, _ in timers:
                line += "  %s %9.4f ms %-8s %-34s" % (name, 1e3 * row[name]["seconds"],
                                                     row[name]["status"], row[name]["path"])
            if len(timers) == 2:
                row["same_value"] = row["new"]["value"] == row["old"]["value"]
                row["ratio"] = row["new"]["seconds"] / row["old"]["seconds"]
                line += " new/old %.2f same value: %s" % (row["ratio"], row["same_value"])
            rows.append(row)
            print(line, flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump(rows, f, indent=1)


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
    ap.add_argument("--new-lib", default="build/libremat_core.a")
    ap.add_argument("--old-lib", default=None)
    ap.add_argument("--inner", type=int, default=51, help="--regression: calls per timing")
    ap.add_argument("--regression", action="store_true",
                    help="instead: the recorded real instances, torch-like and paper-scale ones")
    args = ap.parse_args()
    binaries = [("new", args.new)] + ([("old", args.old)] if args.old else [])
    rows = []
    if args.regression:
        return regression(args, binaries)
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
                        row.update(interleaved(binaries, path, args))
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
