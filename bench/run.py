"""remat against PyTorch's knapsack solvers and SciPy's MILP, on the same instances, in one run.

    python bench/run.py --quick      # under 3 minutes on 2 cores
    python bench/run.py              # the full sweep

Writes bench/results/README.md (tables and targets), bench/results/results.json (every raw
figure) and PNG plots. Times are medians of repeated in-process runs (the count is recorded);
planner peak memory is measured in a fresh subprocess per (solver, instance) as peak RSS after
solving minus peak RSS of the same interpreter, with the same imports and the instance loaded,
before solving. Ratios are taken pair by pair within this run.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
REMAT_CLI = ROOT / "build" / "remat"
SCALE = 10000

from torch._functorch._activation_checkpointing import knapsack as tk  # noqa: E402

import remat  # noqa: E402

# Limits that keep torch's solvers from exhausting this machine: a result in itself.
TORCH_DP_MAX_BYTES = 2 << 30  # (n+1)(W+1) float32 table
TORCH_SLIDING_MAX_CELLS = 4e9  # its Python loop touches ~n log n rows of W+1
TORCH_ILP_MAX_N = 20000
REMAT_DP_MAX_CELLS = 2e10
# The exact solver gets a time limit and a planner-memory cap here, so that the hard Pisinger
# classes at large coefficient ranges report their best plan and bound instead of running away.
EXACT_TIME_LIMIT = 20.0
EXACT_PLANNER_BYTES = 4 << 30


def quantized(values):
    return [round(v * SCALE) for v in values]


def exact_cells(instance):
    return len(instance["memory"]) * (round(instance["max_memory"] * SCALE) + 1)


def torch_dp_bytes(instance):
    return (len(instance["memory"]) + 1) * (round(instance["max_memory"] * SCALE) + 1) * 4


def why_not(solver, instance):
    """None when the solver can run here; else the reason it is not run."""
    n, cells = len(instance["memory"]), exact_cells(instance)
    if solver == "torch.dp_knapsack" and torch_dp_bytes(instance) > TORCH_DP_MAX_BYTES:
        return f"needs a {torch_dp_bytes(instance) / 2**30:.1f} GiB table"
    if (
        solver == "torch.dp_knapsack_sliding_hirschberg"
        and cells * max(1, np.log2(n)) > TORCH_SLIDING_MAX_CELLS
    ):
        return f"~{cells * np.log2(max(n, 2)):.1e} cell updates in a Python loop"
    if solver == "torch.ilp_knapsack" and n > TORCH_ILP_MAX_N:
        return "n above the ILP sweep limit"
    if solver == "torch.ilp_knapsack" and instance.get("range", 0) > 100000:
        return "not run at coefficient range 1e7: torch's wrapper gives HiGHS no time limit"
    if solver in ("remat.dp", "remat.sliding_hirschberg") and cells > REMAT_DP_MAX_CELLS:
        return f"{cells:.1e} table cells"
    if solver == "remat.dp" and cells / 8 > 4 << 30:
        return "bit table above 4 GiB"
    return None


def torch_call(name):
    fn = getattr(tk, name)

    def call(m, r, b):
        value, saved, _ = fn(m, r, b)
        return float(value), list(saved), None, None

    return call


def remat_call(solver):
    limits = (
        {"time_limit": EXACT_TIME_LIMIT, "max_planner_bytes": EXACT_PLANNER_BYTES}
        if solver == "exact"
        else {}
    )

    def call(m, r, b):
        result = remat.solve(m, r, b, solver=solver, **limits)
        return result.max_runtime, result.saved, result.status, result.upper_bound

    return call


SOLVERS = {
    "remat.exact": remat_call("exact"),
    "remat.sliding_hirschberg": remat_call("sliding_hirschberg"),
    "remat.dp": remat_call("dp"),
    "remat.greedy": remat_call("greedy"),
    "torch.dp_knapsack": torch_call("dp_knapsack"),
    "torch.dp_knapsack_sliding_hirschberg": torch_call("dp_knapsack_sliding_hirschberg"),
    "torch.greedy_knapsack": torch_call("greedy_knapsack"),
    "torch.ilp_knapsack": torch_call("ilp_knapsack"),
}
EXACT = {
    "remat.exact",
    "remat.sliding_hirschberg",
    "remat.dp",
    "torch.dp_knapsack",
    "torch.ilp_knapsack",
    "torch.dp_knapsack_sliding_hirschberg",
}


def generate(family, n, seed, **options):
    args = [str(REMAT_CLI), "generate", "--family", family, "--n", str(n), "--seed", str(seed)]
    for key, value in options.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def families(quick):
    """(family, label, instance) triples."""
    real = sorted((ROOT / "examples" / "instances").glob("*.json"))
    for path in real[:: 3 if quick else 1]:
        yield "real", path.stem, json.loads(path.read_text())
    for n in [100, 1000, 10000] if quick else [100, 1000, 10000, 100000]:
        yield "torch_like", f"n={n}", generate("torch_like", n, 1, budget=0.5)
    for n, q in (
        [(100, 1e7), (2000, 1e9)]
        if quick
        else [(100, 1e7), (100, 1e9), (500, 1e8), (2000, 1e9), (2000, 1e10)]
    ):
        yield "paper_scale", f"n={n} Q={q:.0e}", generate("paper_scale", n, 1, budget_quanta=q)
    classes = [
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
    sizes = (
        [(10000, 1000)]
        if quick
        else [(n, r) for n in (1000, 10000, 100000) for r in (1000, 100000, 10000000)]
    )
    for family in classes:
        for n, r in sizes:
            yield (
                f"pisinger.{family}",
                f"n={n} R={r:.0e}",
                {**generate(family, n, 1, range=r), "range": r},
            )


ILP_TIMEOUT = 30.0
ILP_SCRIPT = r"""
import json, statistics, sys, time
from torch._functorch._activation_checkpointing import knapsack as tk
instance = json.load(open(sys.argv[1]))
times = []
while len(times) < 3 and sum(times) < 10:
    start = time.perf_counter()
    value, saved, _ = tk.ilp_knapsack(instance["memory"], instance["runtime"], instance["max_memory"])
    times.append(time.perf_counter() - start)
print(json.dumps({"seconds": statistics.median(times), "runs": len(times), "value": float(value), "saved": list(saved)}))
"""


def ilp_in_subprocess(path):
    """torch's ilp_knapsack gives HiGHS no time limit; on the Pisinger classes it runs in a child
    process that is stopped after ILP_TIMEOUT seconds (timed inside the child)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", ILP_SCRIPT, str(path)],
            capture_output=True,
            text=True,
            timeout=ILP_TIMEOUT + 15,
        )
    except subprocess.TimeoutExpired:
        return None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if done.returncode == 0 and lines else None


def median_time(call, instance, repeats, budget_seconds):
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = call(instance["memory"], instance["runtime"], instance["max_memory"])
        times.append(time.perf_counter() - start)
        if sum(times) > budget_seconds:
            break
    return statistics.median(times), len(times), result


PEAK_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[3])
import remat
from torch._functorch._activation_checkpointing import knapsack as tk
from run import SOLVERS

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

instance = json.load(open(sys.argv[2]))
call = SOLVERS[sys.argv[1]]
call([0.1], [1.0], 0.1)  # first-call set-up (lazy imports) belongs to the baseline
# Importing torch left a high-water mark far above what a solver adds: reset it (Linux >= 4.0),
# so VmHWM afterwards is the peak of this solve alone.
open("/proc/self/clear_refs", "w").write("5")
before = status("VmRSS:")
call(instance["memory"], instance["runtime"], instance["max_memory"])
print(max(0, status("VmHWM:") - before))
"""


def planner_peak_bytes(solver, path):
    done = subprocess.run(
        [sys.executable, "-c", PEAK_SCRIPT, solver, str(path), str(ROOT / "bench")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    return int(done.stdout.strip()) if done.returncode == 0 else None


def cli_seconds(path, solver, repeats=3):
    runs = []
    for _ in range(repeats):
        out = subprocess.run(
            [str(REMAT_CLI), "solve", "--solver", solver, str(path)], capture_output=True, text=True
        )
        if out.returncode != 0:
            return None
        runs.append(json.loads(out.stdout)["seconds"])
    return statistics.median(runs)


def run(quick):
    records = []
    repeats = 3 if quick else 7
    measure_memory = {"torch_like", "paper_scale"}
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="remat-bench-"))
    for family, label, instance in families(quick):
        path = tmp / "instance.json"
        path.write_text(json.dumps({k: instance[k] for k in ("memory", "runtime", "max_memory")}))
        budget_q = round(instance["max_memory"] * SCALE)
        weights = quantized(instance["memory"])
        row = {"family": family, "instance": label, "n": len(weights), "W": budget_q, "solvers": {}}
        for solver, call in SOLVERS.items():
            reason = why_not(solver, instance)
            if reason:
                row["solvers"][solver] = {"skipped": reason}
                continue
            try:
                if solver == "torch.ilp_knapsack" and family.startswith("pisinger"):
                    child = ilp_in_subprocess(path)
                    if child is None:
                        row["solvers"][solver] = {
                            "skipped": f"HiGHS did not finish within {ILP_TIMEOUT:g} s"
                        }
                        continue
                    seconds, count = child["seconds"], child["runs"]
                    value, saved, status, bound = child["value"], child["saved"], None, None
                else:
                    seconds, count, (value, saved, status, bound) = median_time(
                        call, instance, repeats, 10
                    )
            except MemoryError as error:
                row["solvers"][solver] = {"skipped": f"refused: {error}"}
                continue
            used = sum(weights[i] for i in saved)
            entry = {
                "seconds": seconds,
                "runs": count,
                "objective": value,
                "true_objective": float(sum(instance["runtime"][i] for i in saved)),
                "over_budget": used > budget_q,
            }
            if status is not None:
                entry.update(status=status, upper_bound=bound)
            if solver.startswith("remat.") and solver != "remat.greedy":
                entry["cli_seconds"] = cli_seconds(path, solver.split(".", 1)[1], 1 if quick else 3)
            if family in measure_memory:
                entry["planner_peak_bytes"] = planner_peak_bytes(solver, path)
            row["solvers"][solver] = entry
        exact_values = [
            e["true_objective"]
            for s, e in row["solvers"].items()
            if s in EXACT
            and "true_objective" in e
            and not e["over_budget"]
            and e.get("status", "optimal") == "optimal"
        ]
        best = max(exact_values) if exact_values else None
        row["best_exact_objective"] = best
        for entry in row["solvers"].values():
            if best is not None and "true_objective" in entry:
                entry["gap"] = (best - entry["true_objective"]) / max(abs(best), 1e-300)
        records.append(row)
        done = {
            s: (f"{e['seconds'] * 1e3:.2f} ms" if "seconds" in e else "skip")
            for s, e in row["solvers"].items()
        }
        print(
            f"{family:36s} {label:16s} "
            + " ".join(f"{s.split('.', 1)[1][:10]}={v}" for s, v in done.items()),
            flush=True,
        )
    return records


def ratio(row, ours, theirs):
    a, b = row["solvers"].get(ours, {}), row["solvers"].get(theirs, {})
    if "seconds" in a and "seconds" in b:
        return b["seconds"] / a["seconds"]
    return None


def targets(records):
    """The issue's targets, each with the measured figure and whether it is met."""
    out = []

    def add(name, met, figure):
        out.append({"target": name, "met": bool(met), "measured": figure})

    tl = [r for r in records if r["family"] == "torch_like" and 1000 <= r["n"] <= 10000]
    ratios = [ratio(r, "remat.exact", "torch.dp_knapsack") for r in tl]
    same = all(
        abs(r["solvers"]["remat.exact"]["true_objective"] - r["best_exact_objective"])
        <= 1e-9 * abs(r["best_exact_objective"])
        for r in tl
    )
    if ratios and all(x is not None for x in ratios):
        add(
            "exact vs torch dp_knapsack, torch-like n=1e3..1e4: >= 100x, same optimum",
            min(ratios) >= 100 and same,
            f"{min(ratios):.0f}x to {max(ratios):.0f}x; same optimum: {same}",
        )
    ilp = [ratio(r, "remat.exact", "torch.ilp_knapsack") for r in records]
    ilp = [x for x in ilp if x is not None]
    if ilp:
        add(
            "exact vs torch ilp_knapsack: >= 20x at every n",
            min(ilp) >= 20,
            f"min {min(ilp):.2g}x, median {statistics.median(ilp):.0f}x over {len(ilp)} instances",
        )
    greedy = [
        ratio(r, "remat.exact", "torch.greedy_knapsack")
        for r in records
        if r["family"] in ("real", "torch_like", "paper_scale")
    ]
    greedy = [x for x in greedy if x is not None]
    if greedy:
        add(
            "exact vs torch greedy_knapsack: no slower (torch-like, real, paper scale)",
            min(greedy) >= 1,
            f"min {min(greedy):.2f}x, median {statistics.median(greedy):.1f}x",
        )
    both = [
        r
        for r in records
        if "seconds" in r["solvers"].get("torch.dp_knapsack_sliding_hirschberg", {})
        and "seconds" in r["solvers"].get("remat.sliding_hirschberg", {})
        and r["family"] in ("torch_like", "paper_scale")
    ]
    if both:
        top = max(both, key=lambda r: (r["W"], r["n"]))
        speed = ratio(top, "remat.sliding_hirschberg", "torch.dp_knapsack_sliding_hirschberg")
        ours = top["solvers"]["remat.sliding_hirschberg"].get("planner_peak_bytes")
        theirs = top["solvers"]["torch.dp_knapsack_sliding_hirschberg"].get("planner_peak_bytes")
        mem_ok = ours is not None and theirs is not None and ours <= theirs / 2
        add(
            "remat sliding_hirschberg vs torch's at the largest W both run: >= 5x faster, <= half the memory",
            speed >= 5 and mem_ok,
            f"{top['family']} {top['instance']}: {speed:.1f}x, peak {ours} vs {theirs} bytes",
        )
    paper = [
        r for r in records if r["family"] == "paper_scale" and r["n"] == 2000 and r["W"] >= 1e9
    ]
    for r in paper:
        e = r["solvers"]["remat.exact"]
        add(
            f"paper scale {r['instance']}: exact optimal in < 1 s with < 100 MB",
            e["seconds"] < 1 and (e.get("planner_peak_bytes") or 0) < 100e6,
            f"{e['seconds'] * 1e3:.1f} ms, {((e.get('planner_peak_bytes') or 0) / 1e6):.1f} MB; torch dp: {r['solvers']['torch.dp_knapsack'].get('skipped', 'ran')}",
        )
    pis = [r for r in records if r["family"].startswith("pisinger") and r["n"] == 10000]
    if pis:
        solved = [r for r in pis if r["solvers"]["remat.exact"].get("status") == "optimal"]
        classical = [
            r
            for r in solved
            if r["family"].split(".")[1] in ("uncorrelated", "weakly_correlated", "subset_sum")
        ]
        add(
            "Pisinger classes at n=1e4: all proven optimal, classical ones in milliseconds",
            len(solved) == len(pis)
            and all(r["solvers"]["remat.exact"]["seconds"] < 0.05 for r in classical),
            f"{len(solved)}/{len(pis)} proven optimal within {EXACT_TIME_LIMIT:g} s and {EXACT_PLANNER_BYTES >> 30} GiB; classical max {max((r['solvers']['remat.exact']['seconds'] for r in classical), default=0) * 1e3:.1f} ms",
        )
    return out


def fmt_seconds(entry):
    if "skipped" in entry:
        if entry["skipped"].startswith("HiGHS did not finish"):
            return f"> {ILP_TIMEOUT:g} s"
        return "refused" if entry["skipped"].startswith("refused") else "—"
    s = entry["seconds"]
    text = f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"
    if entry.get("status") == "time_limit":
        gap = (entry["upper_bound"] - entry["true_objective"]) / max(
            abs(entry["upper_bound"]), 1e-300
        )
        text += f" **time limit, gap <= {gap:.1e}**"
    return text


def write_readme(records, target_rows, meta, micro):
    lines = [
        "# remat benchmark results",
        "",
        f"Generated by `python bench/run.py{' --quick' if meta['quick'] else ''}` on {meta['date']} "
        f"({meta['machine']}, {meta['cpus']} CPUs; torch {meta['torch']}, SciPy {meta['scipy']}). "
        f"Times are medians of up to {meta['repeats']} in-process runs, called from Python with the "
        "instance as Python lists (as torch's partitioner calls its solvers), so remat's times include "
        "its argument conversion. Planner peak memory (torch-like and paper-scale rows) is measured in "
        "a fresh subprocess per solver and instance: the peak-RSS mark is reset after the imports and "
        "a warm-up call (/proc/self/clear_refs), and the peak during the solve minus the RSS before it "
        "is reported. `—` means not run; the reason is in results.json. "
        f"remat `exact` runs with a {EXACT_TIME_LIMIT:g} s time limit and a {EXACT_PLANNER_BYTES >> 30} GiB "
        "planner cap; where it stops at the limit the table says so with its proven gap. "
        "Ratios are torch time / remat time within this run.",
        "",
        "## Targets",
        "",
        "| target | met | measured |",
        "| --- | --- | --- |",
    ]
    for t in target_rows:
        lines.append(f"| {t['target']} | {'yes' if t['met'] else '**no**'} | {t['measured']} |")
    names = list(SOLVERS)
    lines += [
        "",
        "## Wall time per solver",
        "",
        "| family | instance | n | W | "
        + " | ".join(n.replace("knapsack_", "").replace("_knapsack", "") for n in names)
        + " | exact / torch dp | exact / ilp |",
        "| --- " * (6 + len(names)) + "|",
    ]
    for r in records:
        cells = [
            fmt_seconds(r["solvers"][n])
            + (" **over budget**" if r["solvers"][n].get("over_budget") else "")
            for n in names
        ]
        dp, ilp = (
            ratio(r, "remat.exact", "torch.dp_knapsack"),
            ratio(r, "remat.exact", "torch.ilp_knapsack"),
        )
        lines.append(
            f"| {r['family']} | {r['instance']} | {r['n']} | {r['W']} | "
            + " | ".join(cells)
            + f" | {f'{dp:.0f}x' if dp else '—'} | {f'{ilp:.0f}x' if ilp else '—'} |"
        )
    lines += [
        "",
        "## Planner peak memory (bytes above the subprocess baseline)",
        "",
        "| family | instance | " + " | ".join(names) + " |",
        "| --- " * (2 + len(names)) + "|",
    ]
    for r in records:
        if r["family"] in ("torch_like", "paper_scale"):
            cells = [str(r["solvers"][n].get("planner_peak_bytes", "—")) for n in names]
            lines.append(f"| {r['family']} | {r['instance']} | " + " | ".join(cells) + " |")
    over = [
        (r["family"], r["instance"], s)
        for r in records
        for s, e in r["solvers"].items()
        if e.get("over_budget")
    ]
    gaps = [
        (r["family"], r["instance"], s, e["gap"])
        for r in records
        for s, e in r["solvers"].items()
        if e.get("gap", 0) > 1e-9 and s in EXACT
    ]
    lines += [
        "",
        "## Feasibility and gaps",
        "",
        "Over budget means over the quantized budget round(max_memory x 10^4), the feasibility every "
        "remat solver and torch's dp solvers share. torch's greedy and ilp compare unquantized sums, "
        "so a plan of theirs listed here fits max_memory in floating point but not in quanta; "
        "dp_knapsack_sliding_hirschberg's entries are pytorch/pytorch issue 197871.",
        "",
        f"Plans over budget: {len(over)}"
        + ("".join(f"\n- {f} {i}: {s}" for f, i, s in over) if over else " (none)."),
        "",
        f"Exact solvers short of the best exact objective by more than 1e-9: {len(gaps)}"
        + (
            "".join(f"\n- {f} {i}: {s} (gap {g:.2e})" for f, i, s, g in gaps)
            if gaps
            else " (none)."
        ),
    ]
    if micro:
        lines += [
            "",
            "## C++ microbenchmarks (Google Benchmark, `build/bench_solvers`)",
            "",
            "| benchmark | time |",
            "| --- | --- |",
        ]
        for b in micro:
            lines.append(f"| {b['name']} | {b['real_time']:.3g} {b['time_unit']} |")
    lines += ["", "Plots: `time_vs_n.png`, `time_vs_W.png`, `memory.png`.", ""]
    (RESULTS / "README.md").write_text("\n".join(lines))


def plots(records):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def sweep(family, key, filename, ylabel, field):
        rows = sorted((r for r in records if r["family"] == family), key=lambda r: r[key])
        if not rows:
            return
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
        for solver in SOLVERS:
            points = [
                (r[key], r["solvers"][solver][field])
                for r in rows
                if r["solvers"][solver].get(field) is not None
            ]
            if points:
                ax.plot(
                    *zip(*points),
                    "o-" if solver.startswith("remat") else "s--",
                    label=solver,
                    markersize=4,
                )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(key)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{family}: {ylabel} against {key}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(RESULTS / filename)
        plt.close(fig)

    sweep("torch_like", "n", "time_vs_n.png", "seconds", "seconds")
    sweep("paper_scale", "W", "time_vs_W.png", "seconds", "seconds")
    sweep("torch_like", "n", "memory.png", "planner peak bytes", "planner_peak_bytes")


def microbenchmarks(quick):
    binary = ROOT / "build" / "bench_solvers"
    if not binary.exists():
        return []
    args = [
        str(binary),
        "--benchmark_format=json",
        f"--benchmark_min_time={0.05 if quick else 0.5}",
    ]
    if quick:
        args.append("--benchmark_filter=exact|greedy|PaperScale|Chain")
    out = subprocess.run(args, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout)["benchmarks"] if out.returncode == 0 else []


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a smaller sweep, under 3 minutes on 2 cores"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite README.md and the plots from the existing results.json",
    )
    args = parser.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        saved = json.loads((RESULTS / "results.json").read_text())
        write_readme(saved["records"], saved["targets"], saved["meta"], saved["microbenchmarks"])
        plots(saved["records"])
        return
    import scipy
    import torch

    start = time.time()
    records = run(args.quick)
    micro = microbenchmarks(args.quick)
    target_rows = targets(records)
    meta = {
        "quick": args.quick,
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "scipy": scipy.__version__,
        "repeats": 3 if args.quick else 7,
        "seconds": time.time() - start,
    }
    (RESULTS / "results.json").write_text(
        json.dumps(
            {"meta": meta, "targets": target_rows, "records": records, "microbenchmarks": micro},
            indent=1,
        )
    )
    write_readme(records, target_rows, meta, micro)
    plots(records)
    print(f"wrote {RESULTS}/README.md in {time.time() - start:.0f} s")
    for t in target_rows:
        print(f"  [{'met' if t['met'] else 'MISSED'}] {t['target']}: {t['measured']}")


if __name__ == "__main__":
    main()
