"""Pisinger's classes (his 9 classic ones and multiple strongly correlated) at n in {1e3, 1e4,
1e5}, R in {1e3, 1e5, 1e7}: old remat against new.

Each instance is written by `remat generate` and solved by `remat solve --solver exact
--time-limit T --max-planner-bytes 1GiB` in a fresh process; wall time is measured around the
process, user CPU time from the child's rusage, and the solver's own `seconds`, `status`,
`path` and `planner_peak_bytes` are read from its JSON. Each binary runs `--repeats` times per
instance and the medians are reported.

    python bench/knapsack_classes.py --new build/remat --old /path/to/old/remat \
        --out bench/results/knapsack_classes/results.json

--regression instead times bench/run.py's recorded real, torch-like and paper-scale instances
in process, with bench/cpp/solve_timing.cpp linked against each build's libremat_core.a
(--new-lib, --old-lib), the builds alternating (and taking turns going first) for --repeats
rounds of --inner calls each. Passing the new library as --old-lib too measures the noise
floor; written as regression_self.json beside regression.json, the report quotes it:

    python bench/knapsack_classes.py --regression --new-lib build/libremat_core.a \
        --old-lib OLD/libremat_core.a --repeats 31 --inner 201 \
        --out bench/results/knapsack_classes/regression.json

--combo BIN adds a column for an external combo-class solver: bench/cpp/combo_main.c built
against a copy of Pisinger's combo.c from outside this repository (its licence keeps it out;
source, commit and build commands are in bench/results/knapsack_classes/README.md). Each
instance is also written in the integers remat solves, combo runs under the same time limit
(killed after it, plus 1 s for reading the file), and its optimum is checked against remat's
proven one; a disagreement is printed as *** MISMATCH ***.

    python bench/knapsack_classes.py --new build/remat --combo /tmp/combo/combo_bench \
        --n 1000 10000 100000 --out bench/results/knapsack_classes/combo.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
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
    "multiple_strongly_correlated",
]


def measured(cmd, timeout=None):
    """Runs cmd, its stdout to a temporary file. Returns (returncode, or None when killed at
    timeout; stdout; wall seconds; user CPU seconds from the child's own rusage, os.wait4)."""
    with tempfile.TemporaryFile(mode="w+") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL)
        timer = None
        killed = []
        if timeout is not None:

            def kill():
                killed.append(True)
                proc.kill()

            timer = threading.Timer(timeout, kill)
            timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        # Set before the timer is cancelled: Popen.kill does nothing once returncode is set.
        proc.returncode = os.waitstatus_to_exitcode(status)
        if timer:
            timer.cancel()
        out.seek(0)
        text = out.read()
    rc = None if killed else proc.returncode
    return rc, text, wall, usage.ru_utime


def run_once(binary, path, time_limit, cap, scale=None):
    rc, stdout, wall, user = measured(
        [
            binary,
            "solve",
            "--solver",
            "exact",
            "--time-limit",
            str(time_limit),
            "--max-planner-bytes",
            str(cap),
        ]
        + (["--scale", str(scale)] if scale else [])
        + [path]
    )
    if rc != 0:
        return {
            "wall": wall,
            "user": user,
            "status": "error rc=%s" % rc,
            "path": "",
            "seconds": wall,
            "peak": 0,
            "value": None,
        }
    d = json.loads(stdout)
    return {
        "wall": wall,
        "user": user,
        "status": d["status"],
        "path": d.get("path", ""),
        "seconds": d["seconds"],
        "peak": d["planner_peak_bytes"],
        "value": d["max_runtime"],
        "bound": d["upper_bound"],
    }


# --- an external combo-class solver (--combo) ------------------------------------------------


def write_integer_instance(json_path, txt_path):
    """The instance of json_path in the integers remat solves: weight = memory * scale rounded
    half to even (as remat quantizes; `remat generate` writes weight / 10^4, which rounds back
    exactly), capacity = max_memory * scale likewise, profit = runtime, which must be integral.
    Written as "n c" and n lines "p w" (bench/cpp/combo_main.c's input)."""
    d = json.load(open(json_path))
    scale = d.get("scale", 10000.0)
    weights = [round(m * scale) for m in d["memory"]]
    profits = [int(r) for r in d["runtime"]]
    if any(p != r for p, r in zip(profits, d["runtime"])):
        raise ValueError("%s: runtime is not integral; combo needs integer profits" % json_path)
    if any(w / scale != m for w, m in zip(weights, d["memory"])):
        print(
            "note: %s: memory is not an exact multiple of 1/scale; combo gets remat's "
            "quantized weights" % json_path,
            file=sys.stderr,
        )
    capacity = round(d["max_memory"] * scale)
    with open(txt_path, "w") as f:
        f.write("%d %d\n" % (len(weights), capacity))
        f.writelines("%d %d\n" % (p, w) for p, w in zip(profits, weights))


def run_combo(binary, txt_path, time_limit):
    """One run of bench/cpp/combo_main.c built against an external combo. combo has no time
    limit of its own: the process is killed after time_limit plus 1 s (reading the text file),
    and a run whose own time passes time_limit counts as stopped at the limit too."""
    rc, stdout, wall, user = measured([binary, txt_path], timeout=time_limit + 1.0)
    out = {
        "wall": wall,
        "user": user,
        "path": "combo",
        "peak": 0,  # combo's peak RSS (VmHWM) where it answered; 0 where it did not
        "value": None,
        "seconds": wall,
    }
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if rc is None:
        out.update(status="time_limit", seconds=max(wall, time_limit))
    elif rc != 0 and "no space" in stdout:
        out["status"] = "no_space"  # combo's fixed state array (MAXSTATES) overflowed
    elif rc not in (0, 3) or not lines:
        out["status"] = "error rc=%d" % rc
    else:
        d = json.loads(lines[-1])
        out["seconds"] = d["seconds"]
        out["cpu_seconds"] = d["cpu_seconds"]
        out["value"] = d["value"]
        out["peak"] = max(0, d.get("peak_rss_bytes", 0))
        if not d["verified"]:
            out["status"] = "unverified"
            print("COMBO SOLUTION DOES NOT CHECK: %s %s" % (txt_path, lines[-1]), file=sys.stderr)
        else:
            out["status"] = "optimal" if d["seconds"] <= time_limit else "time_limit"
    return out


def compare_with_combo(row, label):
    """Checks combo's optimum against remat's proven optimum (or, where remat stopped at a
    limit, against its plan and bound); a disagreement is printed loudly."""
    new, combo = row["new"], row["combo"]
    if combo["status"] != "optimal" or new["value"] is None:
        return
    if new["status"] == "optimal":
        row["same_optimum_combo"] = combo["value"] == new["value"]
        if not row["same_optimum_combo"]:
            print(
                "*** MISMATCH %s: remat proved %r, combo %r ***"
                % (label, new["value"], combo["value"]),
                file=sys.stderr,
                flush=True,
            )
    else:
        bound = new.get("bound")
        row["combo_within_remat_bounds"] = new["value"] <= combo["value"] and (
            bound is None or combo["value"] <= bound + 1e-9 * abs(bound)
        )
        if not row["combo_within_remat_bounds"]:
            print(
                "*** MISMATCH %s: remat plan %r bound %r, combo optimum %r ***"
                % (label, new["value"], bound, combo["value"]),
                file=sys.stderr,
                flush=True,
            )


def summarize(runs):
    out = dict(runs[len(runs) // 2])
    for key in ("wall", "user", "seconds"):
        out[key] = statistics.median(r[key] for r in runs)
    out["peak"] = max(r["peak"] for r in runs)
    out["statuses"] = sorted({r["status"] for r in runs})
    out["paths"] = sorted({r["path"] for r in runs})
    return out


def interleaved(binaries, path, args, scale=None, combo_txt=None):
    """Runs the binaries in turn, repeat by repeat, so that drifts in machine load hit both. A
    run that stops at a limit (or fails) is not repeated: its time is the limit. The binary
    named "combo" is the external solver of --combo, run on combo_txt."""
    runs = {name: [] for name, _ in binaries}
    for _ in range(args.repeats):
        for name, binary in binaries:
            if runs[name] and runs[name][0]["status"] != "optimal":
                continue
            if name == "combo":
                runs[name].append(run_combo(binary, combo_txt, args.time_limit))
            else:
                runs[name].append(run_once(binary, path, args.time_limit, args.cap, scale))
    return {name: summarize(r) for name, r in runs.items()}


def proportional(args, binaries):
    """The issue's runtime-proportional-to-memory instances: memory uniform in [0.01, 1],
    runtime equal to memory, budget half the total, solved at --scale 1e4, 1e6 and 1e8."""
    import random

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (25, 30, 40, 60):
            for scale in (1e4, 1e6, 1e8):
                for seed in args.seeds:
                    rng = random.Random(seed * 1000 + n)
                    memory = [rng.uniform(0.01, 1.0) for _ in range(n)]
                    path = os.path.join(tmp, "p.json")
                    with open(path, "w") as f:
                        json.dump(
                            {"memory": memory, "runtime": memory, "max_memory": sum(memory) / 2}, f
                        )
                    row = {"family": "proportional", "n": n, "scale": scale, "seed": seed}
                    row.update(interleaved(binaries, path, args, scale))
                    rows.append(row)
                    line = "proportional n=%-3d scale=%.0e s=%d" % (n, scale, seed)
                    for name, _ in binaries:
                        x = row[name]
                        line += "  %s %8.4fs solver %-12s %-36s" % (
                            name,
                            x["seconds"],
                            x["status"],
                            x["path"],
                        )
                    print(line, flush=True)
                    if args.out:
                        with open(args.out, "w") as f:
                            json.dump(rows, f, indent=1)


def regression_instances(binary, tmp):
    """(family, label, path): bench/run.py's real, torch-like and paper-scale instances."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    real = os.path.join(root, "examples", "instances")
    for name in sorted(os.listdir(real)):
        yield "real", name[:-5], os.path.join(real, name)
    generated = [
        ("torch_like", "n=%d" % n, ["--n", str(n), "--budget", "0.5"])
        for n in (100, 1000, 10000, 100000)
    ]
    generated += [
        ("paper_scale", "n=%d Q=%.0e" % (n, q), ["--n", str(n), "--budget-quanta", str(q)])
        for n, q in ((100, 1e7), (100, 1e9), (500, 1e8), (2000, 1e9), (2000, 1e10))
    ]
    for family, label, extra in generated:
        path = os.path.join(tmp, "%s_%s.json" % (family, label.replace(" ", "_")))
        with open(path, "w") as f:
            subprocess.run(
                [binary, "generate", "--family", family, "--seed", "1"] + extra,
                stdout=f,
                check=True,
            )
        yield family, label, path


def build_timer(lib, include, out):
    """bench/cpp/solve_timing.cpp linked against one build of libremat_core.a."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run(
        [
            "g++",
            "-O2",
            "-std=c++20",
            "-I",
            include,
            os.path.join(root, "bench", "cpp", "solve_timing.cpp"),
            lib,
            "-o",
            out,
        ],
        check=True,
    )
    return out


def regression(args, binaries):
    """In-process times: most of these instances take microseconds, far below a process start,
    so each build's core library is linked into bench/cpp/solve_timing.cpp and timed there
    (median of --inner calls), the two builds alternating for --repeats rounds."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        timers = [
            (
                "new",
                build_timer(
                    args.new_lib, os.path.join(root, "include"), os.path.join(tmp, "timer_new")
                ),
            )
        ]
        if args.old_lib:
            timers.append(
                (
                    "old",
                    build_timer(
                        args.old_lib, os.path.join(root, "include"), os.path.join(tmp, "timer_old")
                    ),
                )
            )
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
        for round_index in range(args.repeats):
            # Each build goes first in every other round, so neither always follows the other.
            for name, timer in timers if round_index % 2 == 0 else timers[::-1]:
                out = subprocess.run(
                    [timer, str(args.inner)] + [c[2] for c in cases],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                for line in out.splitlines():
                    path, seconds, status, solved_path, value = line.split()
                    results[name].setdefault(path, []).append(
                        (float(seconds), status, solved_path, float(value))
                    )
        for family, label, text in cases:
            row = {"family": family, "instance": label}
            for name, _ in timers:
                runs = results[name][text]
                row[name] = {
                    "seconds": statistics.median(r[0] for r in runs),
                    "fastest_round": min(r[0] for r in runs),
                    "status": runs[0][1],
                    "path": runs[0][2],
                    "value": runs[0][3],
                }
            line = "%-12s %-22s" % (family, label)
            for name, _ in timers:
                line += "  %s %9.4f ms %-8s %-34s" % (
                    name,
                    1e3 * row[name]["seconds"],
                    row[name]["status"],
                    row[name]["path"],
                )
            if len(timers) == 2:
                row["same_value"] = row["new"]["value"] == row["old"]["value"]
                row["ratio"] = row["new"]["seconds"] / row["old"]["seconds"]
                # A process on this machine runs these microsecond calls at one of two speeds
                # (about 1.6 or 2.5 us on the smallest), whichever build it is, so a round is one
                # draw of that speed: the median over many rounds (31) is what the target is
                # judged on, and the fastest rounds are shown beside it.
                row["fastest_ratio"] = row["new"]["fastest_round"] / row["old"]["fastest_round"]
                line += " new/old %.2f (fastest rounds %.2f) same value: %s" % (
                    row["ratio"],
                    row["fastest_ratio"],
                    row["same_value"],
                )
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
    ap.add_argument(
        "--report",
        default=None,
        help="instead: write DIR/README.md from DIR's classes, proportional and "
        "regression JSON; --meta gives its opening paragraph",
    )
    ap.add_argument("--meta", default="")
    ap.add_argument(
        "--combo",
        default=None,
        metavar="BIN",
        help="also run an external combo-class solver on each class instance: "
        "bench/cpp/combo_main.c built against a combo.c from outside this repo "
        "(see bench/results/knapsack_classes/README.md); its optimum is checked "
        "against remat's",
    )
    ap.add_argument(
        "--combo-meta",
        default="",
        help="--report: the paragraph opening the side-by-side section (what was "
        "built, from where, how)",
    )
    ap.add_argument(
        "--append", action="store_true", help="keep the rows already in --out and add the new ones"
    )
    ap.add_argument(
        "--proportional",
        action="store_true",
        help="instead: runtime proportional to memory, n <= 60, scale up to 1e8",
    )
    ap.add_argument(
        "--regression",
        action="store_true",
        help="instead: the recorded real instances, torch-like and paper-scale ones",
    )
    args = ap.parse_args()
    binaries = [("new", args.new)] + ([("old", args.old)] if args.old else [])
    binaries += [("combo", args.combo)] if args.combo else []
    rows = []
    if args.append and args.out and os.path.exists(args.out):
        rows = json.load(open(args.out))
    if args.report:
        return report(args.report, args.meta, args.combo_meta)
    if args.regression:
        return regression(args, binaries)
    if args.proportional:
        return proportional(args, binaries)
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.classes:
            for n in args.n:
                for r in args.R:
                    for seed in args.seeds:
                        path = os.path.join(tmp, "i.json")
                        with open(path, "w") as f:
                            subprocess.run(
                                [
                                    args.new,
                                    "generate",
                                    "--family",
                                    family,
                                    "--n",
                                    str(n),
                                    "--seed",
                                    str(seed),
                                    "--range",
                                    str(r),
                                ],
                                stdout=f,
                                check=True,
                            )
                        combo_txt = None
                        if args.combo:
                            combo_txt = os.path.join(tmp, "i.txt")
                            write_integer_instance(path, combo_txt)
                        row = {
                            "family": family,
                            "n": n,
                            "R": r,
                            "seed": seed,
                            "load": os.getloadavg()[0],
                        }
                        row.update(interleaved(binaries, path, args, combo_txt=combo_txt))
                        if args.combo:
                            compare_with_combo(row, "%s n=%d R=%d seed=%d" % (family, n, r, seed))
                        if (
                            args.old
                            and row["new"]["value"] is not None
                            and row["old"]["value"] is not None
                            and row["old"]["status"] == "optimal"
                            and row["new"]["status"] == "optimal"
                        ):
                            row["same_optimum"] = row["new"]["value"] == row["old"]["value"]
                        rows.append(row)
                        line = "%-28s n=%-6d R=%-8d s=%d" % (family, n, r, seed)
                        for name, _ in binaries:
                            x = row[name]
                            line += "  %s %7.3fs wall %7.3fs user %-12s %-36s %6.1fMB" % (
                                name,
                                x["wall"],
                                x["user"],
                                x["status"],
                                x["path"],
                                x["peak"] / 2**20,
                            )
                        print(line, flush=True)
                        if args.out:
                            with open(args.out, "w") as f:
                                json.dump(rows, f, indent=1)


# --- report -----------------------------------------------------------------------------------


def _fmt(seconds):
    if seconds < 1e-5:
        return "%.2f us" % (1e6 * seconds)
    return "%.3f s" % seconds if seconds >= 0.01 else "%.2f ms" % (1e3 * seconds)


def _cell(runs):
    """runs: one summary per seed. Worst solver time, proven count, worst peak."""
    worst = max(r["seconds"] for r in runs)
    proven = sum(r["status"] == "optimal" for r in runs)
    statuses = sorted({r["status"] for r in runs} - {"optimal"})
    text = "%s (%d/%d)" % (_fmt(worst), proven, len(runs))
    if statuses:
        text += " " + ", ".join(statuses)
    return text, worst, proven == len(runs), max(r["peak"] for r in runs)


def _median_cell(runs):
    """runs: one summary per seed. Median solver time over the seeds, solved count, and the
    statuses other than optimal."""
    med = statistics.median(r["seconds"] for r in runs)
    proven = sum(r["status"] == "optimal" for r in runs)
    statuses = sorted({r["status"] for r in runs} - {"optimal"})
    text = "%s (%d/%d)" % (_fmt(med), proven, len(runs))
    if statuses:
        text += " " + ", ".join(statuses)
    return text, med, proven == len(runs)


def combo_section(results_dir, combo_meta, targets):
    """The side-by-side table of combo.json (the class sweep run with --combo)."""
    import collections

    path = os.path.join(results_dir, "combo.json")
    if not os.path.exists(path):
        return []
    rows = json.load(open(path))
    groups = collections.OrderedDict()
    for row in rows:
        groups.setdefault((row["family"], row["n"], row["R"]), []).append(row)
    out = [
        "## Side by side with combo",
        "",
        combo_meta,
        "",
        "| class | n | R | remat: median solver time (proven/seeds) | remat: median wall, user "
        "| remat: planner peak | combo: median solver time (solved/seeds) | combo: median wall, user "
        "| combo: peak RSS | combo / remat, median solver time | same optimum |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    same = [r["same_optimum_combo"] for r in rows if "same_optimum_combo" in r]
    within = [r["combo_within_remat_bounds"] for r in rows if "combo_within_remat_bounds" in r]
    both, remat_faster = 0, 0
    for (family, n, r), runs in groups.items():
        new = [x["new"] for x in runs]
        combo = [x["combo"] for x in runs]
        new_text, new_med, new_all = _median_cell(new)
        combo_text, combo_med, combo_all = _median_cell(combo)

        def wall_user(xs):
            return "%s, %s" % (
                _fmt(statistics.median(x["wall"] for x in xs)),
                _fmt(statistics.median(x["user"] for x in xs)),
            )

        def peak(xs):
            known = [x["peak"] for x in xs if x["peak"] > 0]
            return "%.1f MB" % (max(known) / 2**20) if known else "—"

        ratio = "%.2g" % (combo_med / new_med) if new_all and combo_all and new_med > 0 else "—"
        if new_all and combo_all:
            both += 1
            remat_faster += new_med < combo_med
        checks = [x.get("same_optimum_combo") for x in runs if "same_optimum_combo" in x]
        bounds = [
            x.get("combo_within_remat_bounds") for x in runs if "combo_within_remat_bounds" in x
        ]
        verdict = "%d/%d" % (sum(checks), len(checks)) if checks else "—"
        if not all(checks):
            verdict = "**MISMATCH** " + verdict
        if bounds:
            verdict += "; combo in remat's [plan, bound] %d/%d" % (sum(bounds), len(bounds))
            if not all(bounds):
                verdict = "**MISMATCH** " + verdict
        out.append(
            "| %s | %d | %.0e | %s | %s | %s | %s | %s | %s | %s | %s |"
            % (
                family,
                n,
                r,
                new_text,
                wall_user(new),
                peak(new),
                combo_text,
                wall_user(combo),
                peak(combo),
                ratio,
                verdict,
            )
        )
    loads = [r["load"] for r in rows if "load" in r]
    solved = sum(r["combo"]["status"] == "optimal" for r in rows)
    proven = sum(r["new"]["status"] == "optimal" for r in rows)
    figure = (
        "%d instances: remat proved %d, combo solved %d; same optimum on all %d where both "
        "did: %s" % (len(rows), proven, solved, len(same), all(same))
    )
    if within:
        figure += (
            "; where only combo did (%d), its optimum lies within remat's plan and bound: %s"
            % (len(within), all(within))
        )
    figure += "; of the %d cells both solved on every seed, remat's median was the faster in %d" % (
        both,
        remat_faster,
    )
    targets.append(
        (
            "Side by side with a combo-class solver (built here from a public source, "
            "not vendored)",
            all(same) and all(within),
            figure,
        )
    )
    out.append("")
    out.append(
        "Solver time: remat's own `seconds`; combo's is measured by the driver around the "
        "call (and its preparation: dropping items heavier than the capacity), without "
        "reading the file; each is the median of the repeats for a seed, and the table "
        "gives the median over the seeds. Wall and user CPU time are of the whole process "
        "(os.wait4), medians over the seeds. Peaks are the largest over the seeds: remat's "
        "planner memory (`planner_peak_bytes`, its own account of its tables and lists) and "
        "combo's whole-process peak resident set (VmHWM, read by the driver before it exits; "
        "— where combo gave no answer). A combo run stops at the limit when killed after the "
        "limit plus 1 s or when its own time passes the limit; `no_space` is combo's "
        "fixed state array (MAXSTATES = 1.5e6 states, as published) overflowing, after "
        "which combo exits without an answer. Load average (1 min) during the run: %s."
        % (
            "%.2f to %.2f, median %.2f" % (min(loads), max(loads), statistics.median(loads))
            if loads
            else "not recorded"
        )
    )
    return out


def report(results_dir, meta, combo_meta=""):
    import collections

    rows = json.load(open(os.path.join(results_dir, "classes.json")))
    groups = collections.OrderedDict()
    for row in rows:
        groups.setdefault((row["family"], row["n"], row["R"]), []).append(row)
    lines = []
    add = lines.append
    add("# Pisinger's classes: the exact solver, old against new")
    add("")
    add(meta)
    add("")
    targets = []
    table = [
        "| class | n | R | new: worst solver time (proven/seeds) | new: median wall, user | "
        "new peak | new path | old: worst solver time (proven/seeds) | old: median wall, user |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    small_ok, small_total, small_missed = 0, 0, []
    big_ok, big_total, big_missed = 0, 0, []
    limits = []
    same = [r.get("same_optimum") for r in rows if "same_optimum" in r]
    for (family, n, r), runs in groups.items():
        new = [x["new"] for x in runs]
        old = [x["old"] for x in runs if "old" in x]
        text, worst, proven, peak = _cell(new)
        wall = statistics.median(x["wall"] for x in new)
        user = statistics.median(x["user"] for x in new)
        paths = sorted({p for x in new for p in x["paths"]})
        old_text = _cell(old)[0] if old else "—"
        old_wu = (
            "%s, %s"
            % (
                _fmt(statistics.median(x["wall"] for x in old)),
                _fmt(statistics.median(x["user"] for x in old)),
            )
            if old
            else "—"
        )
        table.append(
            "| %s | %d | %.0e | %s | %s, %s | %.1f MB | %s | %s | %s |"
            % (
                family,
                n,
                r,
                text,
                _fmt(wall),
                _fmt(user),
                peak / 2**20,
                "<br>".join(paths),
                old_text,
                old_wu,
            )
        )
        ok_small = proven and worst <= 1.0 and peak <= 1 << 30
        if n <= 10000:
            small_total += 1
            small_ok += ok_small
            if not ok_small:
                small_missed.append("%s n=%d R=%.0e (%s)" % (family, n, r, text))
        else:
            ok_big = proven and worst <= 5.0
            big_total += 1
            big_ok += ok_big
            if not ok_big:
                big_missed.append("%s R=%.0e (%s)" % (family, r, text))
        for x in new:
            if x["status"] in ("time_limit",):
                limits.append(x["seconds"])
    targets.append(
        (
            "All %d classes, n in {1e3, 1e4}, R in {1e3, 1e5, 1e7}: proven optimal in <= 1 s "
            "and <= 1 GiB (every seed)" % len({row["family"] for row in rows}),
            small_ok == small_total,
            "%d/%d cells; missed: %s" % (small_ok, small_total, "; ".join(small_missed) or "none"),
        )
    )
    targets.append(
        (
            "n = 1e5: proven optimal in <= 5 s (every seed)",
            big_ok == big_total,
            "%d/%d cells; missed: %s" % (big_ok, big_total, "; ".join(big_missed) or "none"),
        )
    )
    if limits:
        worst = max(limits)
        targets.append(
            (
                "time_limit (5 s here) honoured within 10% or 50 ms",
                worst <= 5.5,
                "%d runs stopped at the limit; slowest reported %.3f s" % (len(limits), worst),
            )
        )
    prop_path = os.path.join(results_dir, "proportional.json")
    prop_table = []
    if os.path.exists(prop_path):
        prop = json.load(open(prop_path))
        pg = collections.OrderedDict()
        for row in prop:
            pg.setdefault((row["n"], row["scale"]), []).append(row)
        prop_table = [
            "| n | scale | new: worst solver time (proven/seeds) | old: worst solver time (proven/seeds) |",
            "| --- | --- | --- | --- |",
        ]
        ok, total, missed = 0, 0, []
        for (n, scale), runs in pg.items():
            new_text, worst, proven, _ = _cell([x["new"] for x in runs])
            old_text = _cell([x["old"] for x in runs])[0] if "old" in runs[0] else "—"
            prop_table.append("| %d | %.0e | %s | %s |" % (n, scale, new_text, old_text))
            if scale == 1e8:
                total += 1
                ok += proven and worst <= 1.0
                if not (proven and worst <= 1.0):
                    missed.append("n=%d (%s)" % (n, new_text))
        targets.append(
            (
                "Runtime proportional to memory, n <= 60 at scale 1e8: proven optimal in <= 1 s",
                ok == total,
                "%d/%d sizes; missed: %s" % (ok, total, "; ".join(missed) or "none"),
            )
        )
    reg_path = os.path.join(results_dir, "regression.json")
    reg_table = []
    if os.path.exists(reg_path):
        reg = json.load(open(reg_path))
        fastest = all("fastest_ratio" in row for row in reg)
        reg_table = [
            "| family | instance | new | old | new / old | new / old, fastest rounds | same value |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in reg:
            reg_table.append(
                "| %s | %s | %s | %s | %.2f | %s | %s |"
                % (
                    row["family"],
                    row["instance"],
                    _fmt(row["new"]["seconds"]),
                    _fmt(row["old"]["seconds"]),
                    row["ratio"],
                    "%.2f" % row["fastest_ratio"] if "fastest_ratio" in row else "—",
                    row["same_value"],
                )
            )
        worst = max(reg, key=lambda row: row["ratio"])
        slower = [row for row in reg if row["ratio"] > 1.10]
        figure = "new/old of the median rounds from %.2f to %.2f (worst: %s %s)" % (
            min(row["ratio"] for row in reg),
            worst["ratio"],
            worst["family"],
            worst["instance"],
        )
        if fastest:
            figure += "; of the fastest rounds from %.2f to %.2f" % (
                min(row["fastest_ratio"] for row in reg),
                max(row["fastest_ratio"] for row in reg),
            )
        figure += "; same value on all: %s" % all(row["same_value"] for row in reg)
        self_path = os.path.join(results_dir, "regression_self.json")
        if os.path.exists(self_path):
            self_reg = json.load(open(self_path))
            figure += "; the new build against itself (noise floor): %.2f to %.2f" % (
                min(row["ratio"] for row in self_reg),
                max(row["ratio"] for row in self_reg),
            )
        targets.append(
            (
                "Never slower than today on the recorded real, torch-like and paper-scale "
                "instances (in process; > 10% slower counts)",
                not slower,
                figure,
            )
        )
    if same:
        targets.append(
            (
                "Same optimum as the old solver wherever both proved one",
                all(same),
                "%d instances compared" % len(same),
            )
        )
    combo_lines = combo_section(results_dir, combo_meta, targets)
    add("## Targets")
    add("")
    add("| target | met | measured |")
    add("| --- | --- | --- |")
    for name, met, figure in targets:
        add("| %s | %s | %s |" % (name, "yes" if met else "**no**", figure))
    add("")
    add("## Pisinger's classes")
    add("")
    add(
        "Solver time is the solver's own `seconds` (median of the repeats), worst over the seeds; "
        "wall and user CPU time are of the whole `remat solve` process (JSON parsing included), "
        "medians over seeds of each seed's median. Time limit 5 s, planner cap 1 GiB."
    )
    add("")
    lines.extend(table)
    if prop_table:
        add("")
        add("## Runtime proportional to memory")
        add("")
        add(
            "Memory uniform in [0.01, 1], runtime equal to memory, budget half the total "
            "(`--proportional`; Python's `random`, seeds as listed in the JSON)."
        )
        add("")
        lines.extend(prop_table)
    if reg_table:
        add("")
        add("## Recorded real, torch-like and paper-scale instances (in process)")
        add("")
        add(
            "bench/run.py's instances; `bench/cpp/solve_timing.cpp` linked against each build's "
            "`libremat_core.a`; each build's time is the median of `--inner` calls in a round, "
            "and the table gives the median over the alternating rounds and the ratio of each "
            "build's fastest round (see the commands above)."
        )
        add("")
        lines.extend(reg_table)
    if combo_lines:
        add("")
        lines.extend(combo_lines)
    with open(os.path.join(results_dir, "README.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
