"""The contract of every `remat` command: output shape, exit codes, error lines."""

import itertools
import json
import random
import time

import pytest

from conftest import ROOT

SOLVERS = ["exact", "sliding_hirschberg", "dp", "greedy"]
INSTANCE = {"memory": [2, 3, 2, 4, 1], "runtime": [1, 2, 1, 3, 2], "max_memory": 5}


def solve(run, instance, *args):
    code, out, err = run("solve", *args, "-", stdin=json.dumps(instance))
    assert code == 0, err
    assert err == ""
    return json.loads(out)


@pytest.mark.parametrize("solver", SOLVERS)
def test_solve_output_fields(run, solver):
    result = solve(run, INSTANCE, "--solver", solver)
    for key in [
        "solver",
        "status",
        "max_runtime",
        "saved",
        "recomputed",
        "memory_used",
        "upper_bound",
        "seconds",
        "planner_peak_bytes",
    ]:
        assert key in result
    assert result["solver"] == solver
    assert sorted(result["saved"] + result["recomputed"]) == list(range(5))
    assert result["saved"] == sorted(result["saved"])
    assert result["memory_used"] <= INSTANCE["max_memory"]
    if solver != "greedy":
        assert result["status"] == "optimal"
        assert result["max_runtime"] == 5.0
        assert result["saved"] == [3, 4]
        assert result["upper_bound"] == 5.0
    else:
        assert result["status"] == "heuristic"


def test_solve_reads_a_file_and_ignores_other_keys(run, tmp_path):
    path = tmp_path / "instance.json"
    path.write_text(json.dumps({**INSTANCE, "model": "x", "names": ["a", "b", "c", "d", "e"]}))
    code, out, _ = run("solve", str(path))
    assert code == 0
    assert json.loads(out)["saved"] == [3, 4]


def test_solve_reads_stdin_without_a_file_argument(run):
    code, out, _ = run("solve", stdin=json.dumps(INSTANCE))
    assert code == 0
    assert json.loads(out)["max_runtime"] == 5.0


def test_scale_changes_quantization(run):
    # At scale 1, 0.4 and 0.4 round to 0: both fit a budget of 0 and are saved.
    result = solve(run, {"memory": [0.4, 0.4], "runtime": [1, 1], "max_memory": 0}, "--scale", "1")
    assert result["saved"] == [0, 1]
    result = solve(run, {"memory": [0.4, 0.4], "runtime": [1, 1], "max_memory": 0})
    assert result["saved"] == []


def test_time_limit_reports_status_and_bound(run):
    code, out, _ = run(
        "generate", "--family", "circle", "--n", "3000", "--seed", "1", "--range", "10000000"
    )
    assert code == 0
    result = solve(run, json.loads(out), "--time-limit", "0.000001")
    assert result["status"] in ("time_limit", "optimal")
    assert result["upper_bound"] >= result["max_runtime"]


def brute_force(instance, scale=10000):
    weights = [round(m * scale) for m in instance["memory"]]
    cap = round(instance["max_memory"] * scale)
    best = 0.0
    for mask in itertools.product([0, 1], repeat=len(weights)):
        if sum(w for w, x in zip(weights, mask) if x) <= cap:
            best = max(best, sum(r for r, x in zip(instance["runtime"], mask) if x))
    return best


@pytest.mark.parametrize("cap", [1, 300, 600, 1200])
def test_memory_limit_returns_the_best_plan_and_a_valid_bound(run, cap):
    instance = {
        "memory": [0.31, 0.52, 0.17, 0.44, 0.29, 0.63, 0.38, 0.21, 0.57, 0.12, 0.47, 0.35],
        "runtime": [0.3, 0.55, 0.15, 0.41, 0.33, 0.6, 0.37, 0.2, 0.5, 0.14, 0.45, 0.36],
        "max_memory": 2.1,
    }
    code, out, err = run("solve", "--max-planner-bytes", str(cap), "-", stdin=json.dumps(instance))
    assert code == 0, err
    result = json.loads(out)
    optimum = brute_force(instance)
    assert result["memory_used"] <= instance["max_memory"]
    assert result["max_runtime"] <= optimum + 1e-9
    assert result["upper_bound"] >= optimum - 1e-9
    if result["status"] == "memory_limit":
        assert err.startswith("note: exact reached the planner-memory cap")
    else:
        assert result["status"] == "optimal" and err == ""
        assert abs(result["max_runtime"] - optimum) <= 1e-9


def test_memory_limit_refuse_keeps_exit_3(run):
    generate = ["--family", "strongly_correlated", "--n", "2000", "--seed", "1"]
    _, instance, _ = run("generate", *generate, "--range", "1000000")
    code, out, err = run("solve", "--max-planner-bytes", "20000", "-", stdin=instance)
    assert code == 0 and json.loads(out)["status"] == "memory_limit"
    refuse = ["--max-planner-bytes", "20000", "--on-memory-limit", "refuse"]
    code, out, err = run("solve", *refuse, "-", stdin=instance)
    assert code == 3 and out == ""
    assert err.startswith("error: exact needs more than 20000 bytes of planner memory")
    code, _, err = run("solve", "--on-memory-limit", "maybe", "-", stdin=instance)
    assert code == 2 and "on-memory-limit" in err


BAD_INPUTS = [
    ("{", "input: malformed JSON"),
    ("", "input: malformed JSON"),
    ("[]", "input: expected a JSON object"),
    ('{"runtime": [1], "max_memory": 1}', "memory: missing"),
    ('{"memory": [1], "max_memory": 1}', "runtime: missing"),
    ('{"memory": [1], "runtime": [1]}', "max_memory: missing"),
    (
        '{"memory": [1, 2], "runtime": [1], "max_memory": 1}',
        "runtime: has 1 entries but memory has 2",
    ),
    ('{"memory": [1, NaN], "runtime": [1, 1], "max_memory": 1}', "NaN and Infinity are not JSON"),
    (
        '{"memory": [1, Infinity], "runtime": [1, 1], "max_memory": 1}',
        "NaN and Infinity are not JSON",
    ),
    ('{"memory": [1, -1], "runtime": [1, 1], "max_memory": 1}', "memory[1]: is negative"),
    ('{"memory": [1], "runtime": [1], "max_memory": -1}', "max_memory: is negative"),
    (
        '{"memory": [1, "a"], "runtime": [1, 1], "max_memory": 1}',
        "memory[1]: expected a number, got a string",
    ),
    (
        '{"memory": [1], "runtime": [null], "max_memory": 1}',
        "runtime[0]: expected a number, got null",
    ),
    (
        '{"memory": [1], "runtime": [1], "max_memory": "5"}',
        "max_memory: expected a number, got a string",
    ),
    ('{"memory": [1e300], "runtime": [1], "max_memory": 1}', "memory[0]: 1e+300 times scale"),
    ('{"memory": [1e308, 1e308], "runtime": [1, 1], "max_memory": 1}', "memory[0]"),
    ('{"memory": [1], "runtime": [1e999], "max_memory": 1}', "input: malformed JSON"),
    # A subnormal runtime made exact claim a worse plan optimal; runtimes whose sum overflows
    # printed null as the plan's value.
    (
        '{"memory": [1, 2], "runtime": [5e-324, 1e-320], "max_memory": 2}',
        "runtime[0]: is subnormal",
    ),
    (
        '{"memory": [1, 1, 1], "runtime": [1e308, 1e308, 1e308], "max_memory": 2}',
        "runtime[1]: the sum of runtimes overflows",
    ),
    # nlohmann kept the last of two equal keys, so an edited file was half read.
    (
        '{"memory": [1], "runtime": [1], "max_memory": 9, "max_memory": 0}',
        "max_memory: appears twice",
    ),
    (
        '{"memory": [1], "runtime": [1], "max_memory": 1, "names": [{"a": 1, "a": 2}]}',
        "a: appears twice",
    ),
]


@pytest.mark.parametrize("text,message", BAD_INPUTS)
def test_bad_input_is_one_error_line_and_exit_2(run, text, message):
    code, out, err = run("solve", "-", stdin=text)
    assert code == 2
    assert out == ""
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert message in err


@pytest.mark.parametrize("literal", ["nil", "None", "Name"])
def test_a_bad_literal_that_is_no_nan_gets_no_nan_hint(run, literal):
    code, _, err = run("solve", "-", stdin=f'{{"memory": [{literal}], "runtime": [1]}}')
    assert code == 2 and "malformed JSON" in err and "NaN" not in err


def test_an_object_of_many_keys_is_read_in_linear_time(run):
    # Each key was looked for among the object's earlier ones: 300k keys took 118 s.
    keys = ",".join(f'"k{i}": 0' for i in range(200_000))
    text = f'{{"memory": [1], "runtime": [1], "max_memory": 1, {keys}}}'
    started = time.perf_counter()
    code, out, err = run("solve", "-", stdin=text)
    assert code == 0, err
    assert time.perf_counter() - started < 10


@pytest.mark.parametrize(
    "args,message",
    [
        (["solve", "--solver", "ilp", "-"], "solver: unknown solver 'ilp'"),
        (["solve", "--scale", "0", "-"], "scale: must be a positive finite number"),
        (["solve", "--scale", "abc", "-"], "error:"),
        (["solve", "--time-limit", "-1", "-"], "time_limit: must be a positive"),
        (["solve", "--bogus"], "error:"),
        (["solve", "/nonexistent/file.json"], "input: cannot open '/nonexistent/file.json'"),
        (["pareto", "--points", "1", "-"], "points: must be 0 (every breakpoint) or at least 2"),
        # Once read unsigned: -1 became 2^64 - 1 points and ran out of memory.
        (["pareto", "--points", "-1", "-"], "points: must be 0 (every breakpoint) or at least 2"),
        (["pareto", "--points", "100000000", "-"], "points: must be at most 10^7"),
        (["pareto", "--time-limit", "0", "-"], "time_limit: must be a positive number"),
        # max_memory 5 at scale 10^4: budgets 0..50000 quanta.
        (["pareto", "--points", "50002", "-"], "points: must be at most 50001, the distinct"),
        (
            ["generate", "--family", "nope", "--n", "3", "--seed", "1"],
            "family: unknown family 'nope'",
        ),
        (["generate", "--family", "uncorrelated", "--n", "3"], "error:"),
        # Both are unsigned: -1 was read as 2^64 - 1 (a seed silently, n as "at most 10^7").
        (
            ["generate", "--family", "uncorrelated", "--n", "3", "--seed", "-1"],
            "seed: must be >= 0",
        ),
        (["generate", "--family", "uncorrelated", "--n", "-1", "--seed", "1"], "n: must be >= 0"),
        ([], "error:"),
        (["frobnicate"], "error:"),
    ],
)
def test_usage_errors_exit_2(run, args, message):
    code, out, err = run(*args, stdin=json.dumps(INSTANCE))
    assert code == 2, err
    assert out == ""
    assert err.startswith("error: ")
    assert message in err


def test_planner_memory_refusal_is_exit_3_and_names_a_solver_that_fits(run):
    _, out, _ = run("generate", "--family", "paper_scale", "--n", "100", "--seed", "1")
    code, stdout, err = run(
        "solve", "--solver", "dp", "--max-planner-bytes", "100000000", "-", stdin=out
    )
    assert code == 3
    assert stdout == ""
    assert err.startswith("error: dp needs")
    assert "use --solver exact" in err
    result = solve(run, json.loads(out), "--max-planner-bytes", "100000000")
    assert result["status"] == "optimal"


def test_help_exits_0(run):
    code, out, _ = run("--help")
    assert code == 0
    assert "solve" in out


def test_pareto_all_breakpoints_match_solve(run):
    code, out, _ = run("pareto", "-", stdin=json.dumps(INSTANCE))
    assert code == 0
    front = json.loads(out)
    points = front["points"]
    assert points[0]["budget_quanta"] == 0
    for a, b in itertools.pairwise(points):
        assert a["budget_quanta"] < b["budget_quanta"] and a["max_runtime"] < b["max_runtime"]
    for point in points:
        budget = point["max_memory"]
        result = solve(run, {**INSTANCE, "max_memory": budget})
        assert result["max_runtime"] == point["max_runtime"]


def test_pareto_evenly_spaced_points(run):
    code, out, _ = run("pareto", "--points", "6", "-", stdin=json.dumps(INSTANCE))
    assert code == 0
    points = json.loads(out)["points"]
    assert [p["max_memory"] for p in points] == [0, 1, 2, 3, 4, 5]
    for point in points:
        result = solve(run, {**INSTANCE, "max_memory": point["max_memory"]})
        assert result["max_runtime"] == point["max_runtime"]


FAMILIES = [
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
    "torch_like",
    "paper_scale",
]


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_writes_solvable_deterministic_instances(run, family):
    args = ["generate", "--family", family, "--n", "40", "--seed", "7", "--budget-quanta", "50000"]
    code, out, err = run(*args)
    assert code == 0, err
    assert out == run(*args)[1]
    instance = json.loads(out)
    assert len(instance["memory"]) == len(instance["runtime"]) == 40
    results = [solve(run, instance, "--solver", s) for s in SOLVERS]
    exact = [r["max_runtime"] for r in results[:3]]
    assert max(exact) - min(exact) <= 1e-9 * max(1.0, abs(exact[0]))
    assert results[3]["max_runtime"] <= exact[0] + 1e-9 * max(1.0, abs(exact[0]))


def test_demo_runs_every_solver_on_the_recorded_instance(run):
    code, out, err = run("demo")
    assert code == 0, err
    for solver in SOLVERS:
        assert solver in out
    assert "recorded from torch.compile" in out
    assert "exact plan: save" in out
    # The demo instance's names are shown in the plan.
    names = json.loads((ROOT / "examples/instances/gpt_d8_w256_b30_0.json").read_text())["names"]
    assert names[0] in out


def test_demo_on_a_file(run, tmp_path):
    path = tmp_path / "i.json"
    path.write_text(json.dumps(INSTANCE))
    code, out, _ = run("demo", str(path))
    assert code == 0
    assert "saved:      3, 4" in out


def _paper_scale_instance(run):
    """An instance no table solver finishes quickly: n = 2000 and 10^8 budget quanta."""
    args = ("--family", "paper_scale", "--n", "2000", "--seed", "1", "--budget-quanta", "1e8")
    return run("generate", *args)[1]


def test_demo_time_limit_skips_table_solvers_that_cannot_meet_it(run, tmp_path):
    instance = _paper_scale_instance(run)
    path = tmp_path / "hard.json"
    path.write_text(instance)
    code, out, err = run("demo", str(path), "--time-limit", "0.5")
    assert code == 0, err
    assert "(sliding_hirschberg skipped: " in out and "over the time limit of 0.5 s" in out
    assert "{" not in out.split("instance:")[0]  # options worded for the command line
    assert "exact plan: save" in out


def test_pareto_past_its_time_limit_gives_no_front_and_exit_3(run):
    _, instance, _ = run(
        "generate", "--family", "uncorrelated", "--n", "1000", "--seed", "1", "--range", "100000"
    )
    code, out, err = run("pareto", "--time-limit", "0.2", "-", stdin=instance)
    assert code == 3 and out == ""
    assert err.startswith("error: pareto passed the time limit of 0.2 s") and "--time-limit" in err


def test_table_solver_refuses_a_time_limit_it_cannot_meet(run):
    instance = _paper_scale_instance(run)
    code, out, err = run(
        "solve",
        "--solver",
        "dp",
        "--time-limit",
        "0.001",
        "--max-planner-bytes",
        str(1 << 40),
        "-",
        stdin=instance,
    )
    assert code == 3 and out == ""
    assert err.startswith("error: dp needs about") and "use --solver exact" in err


def test_version_is_the_package_version(run):
    import remat

    code, out, err = run("--version")
    assert (code, err) == (0, "")
    assert out == f"remat {remat.__version__}\n"


COMMANDS = ["solve", "pareto", "generate", "demo", "chain", "estimate", "eager"]


@pytest.mark.parametrize(
    "args,start",
    [
        (["bogus"], "error: unknown command 'bogus'; the commands are "),
        (["bogus", "--budget", "1"], "error: unknown command 'bogus'; the commands are "),
        ([], "error: give a command: "),
    ],
)
def test_an_unknown_or_missing_command_lists_the_commands(run, args, start):
    code, out, err = run(*args)
    assert (code, out) == (2, "")
    assert err.startswith(start) and err.count("\n") == 1
    assert ", ".join(COMMANDS) in err


@pytest.mark.parametrize(
    "args",
    [
        ["solve", "{dir}"],
        ["pareto", "{dir}"],
        ["pareto", "--plot", "{dir}/x.png", "{dir}"],
        ["demo", "{dir}"],
        ["chain", "--profile", "{dir}", "--budget", "1GB"],
        ["eager", "{dir}"],
    ],
)
def test_a_directory_as_file_is_named_as_such(run, tmp_path, args):
    code, out, err = run(*[a.format(dir=tmp_path) for a in args])
    assert (code, out) == (2, "")
    assert (
        err
        == f"error: input: '{tmp_path}' is a directory; give a JSON file, or - for standard input\n"
    )


@pytest.mark.parametrize(
    "image,reason",
    [
        ("x.txt", "cannot write '{dir}/x.txt': unsupported image format '.txt' (use one of "),
        ("x", "cannot write '{dir}/x': no image extension (use one of "),
        ("missing/x.png", "cannot write '{dir}/missing/x.png': no folder '{dir}/missing'"),
        (
            "instance.json/x.png",
            "cannot write '{dir}/instance.json/x.png': '{dir}/instance.json' is not a folder",
        ),
    ],
)
def test_plot_to_a_path_it_cannot_write_says_why(run, tmp_path, image, reason):
    instance = tmp_path / "instance.json"
    instance.write_text(json.dumps(INSTANCE))
    code, out, err = run("pareto", "--plot", str(tmp_path / image), str(instance))
    assert (code, out) == (2, ""), err
    assert err.startswith("error: plot: " + reason.format(dir=tmp_path)) and err.count("\n") == 1
    assert not (tmp_path / image).exists()


@pytest.mark.parametrize(
    "limit,said",
    [
        (["--time-limit", "0.05"], "error: pareto passed the time limit of 0.05 s"),
        (["--max-planner-bytes", "1MB"], "error: pareto needs more than 1000000 bytes"),
    ],
)
def test_plot_keeps_the_limits_of_pareto(run, tmp_path, limit, said):
    # --plot ran the front with neither limit (an 11.6 s run past --time-limit 0.2, exit 0).
    rng = random.Random(1)
    instance = tmp_path / "instance.json"
    memory = [rng.uniform(0.01, 1) for _ in range(3000)]
    runtime = [rng.uniform(0.01, 1) for _ in range(3000)]
    instance.write_text(json.dumps({"memory": memory, "runtime": runtime, "max_memory": 500}))
    image = tmp_path / "x.png"
    for plot in ([], ["--plot", str(image)]):
        code, out, err = run("pareto", *limit, "--scale", "1e6", *plot, str(instance))
        assert (code, out) == (3, ""), (plot, err)
        assert err.startswith(said), (plot, err)
    assert not image.exists()


def test_plot_and_points_are_not_both_taken(run, tmp_path):
    instance = tmp_path / "instance.json"
    instance.write_text(json.dumps(INSTANCE))
    code, out, err = run(
        "pareto", "--points", "3", "--plot", str(tmp_path / "x.png"), str(instance)
    )
    assert (code, out) == (2, "")
    assert err.startswith("error: points: --plot draws every breakpoint")


def test_plot_write_failure_is_the_reason(run, tmp_path):
    # /proc exists and takes no new files: the write itself fails, and its reason is shown.
    instance = tmp_path / "instance.json"
    instance.write_text(json.dumps(INSTANCE))
    code, out, err = run("pareto", "--plot", "/proc/remat-test.png", str(instance))
    assert (code, out) == (2, "")
    assert (
        err.startswith("error: plot: cannot write '/proc/remat-test.png': ")
        and err.count("\n") == 1
    )


def test_plot_without_the_package_says_how_to_get_it(remat_bin, tmp_path):
    import os
    import subprocess

    instance = tmp_path / "instance.json"
    instance.write_text(json.dumps(INSTANCE))
    done = subprocess.run(
        [str(remat_bin), "pareto", "--plot", str(tmp_path / "x.png"), str(instance)],
        capture_output=True,
        text=True,
        env={**os.environ, "REMAT_PYTHON": str(tmp_path / "nopython")},
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("error: plot: --plot draws through the remat Python package")
    assert "REMAT_PYTHON" in done.stderr and done.stderr.count("\n") == 1
