"""The Python package: solve(), pareto(), the drop-in knapsack module, errors, threads."""

import importlib.metadata
import inspect
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import remat
import remat.knapsack
from conftest import ROOT

INSTANCE = {"memory": [2, 3, 2, 4, 1], "runtime": [1, 2, 1, 3, 2], "max_memory": 5}


def _tensor(values):
    torch = pytest.importorskip("torch")
    return torch.tensor(values, dtype=torch.float32)


@pytest.mark.parametrize("solver", remat.SOLVERS)
@pytest.mark.parametrize("kind", [list, tuple, np.array, _tensor])  # tensors were refused
def test_solve_accepts_lists_tuples_and_arrays(solver, kind):
    result = remat.solve(kind(INSTANCE["memory"]), kind(INSTANCE["runtime"]), 5, solver=solver)
    assert result.solver == solver
    assert sorted(result.saved + result.recomputed) == list(range(5))
    assert result.quantized_memory_used <= result.quantized_max_memory
    if solver != "greedy":
        assert (result.status, result.max_runtime, result.saved) == ("optimal", 5.0, [3, 4])


@pytest.mark.parametrize("values", [{2, 3, 1}, {2: 0, 3: 0, 1: 0}.keys()])
def test_unordered_collections_are_refused(values):
    # A set has a length but no order: which runtime goes with which memory would be a guess.
    with pytest.raises(TypeError, match="memory: expected an array"):
        remat.solve(values, [1, 2, 3], 3)


def test_result_has_the_cli_fields(run):
    code, out, _ = run("solve", "-", stdin=json.dumps(INSTANCE))
    cli = json.loads(out)
    result = remat.solve(**INSTANCE)
    for key, value in cli.items():
        if key not in ("seconds", "planner_peak_bytes"):
            assert getattr(result, key) == value, key


BAD = [
    ({"memory": [1, float("nan")], "runtime": [1, 1], "max_memory": 1}, ValueError),
    ({"memory": [1, -1], "runtime": [1, 1], "max_memory": 1}, ValueError),
    ({"memory": [1, 2], "runtime": [1], "max_memory": 1}, ValueError),
    ({"memory": [1], "runtime": [1], "max_memory": -1}, ValueError),
    ({"memory": [1, "a"], "runtime": [1, 1], "max_memory": 1}, TypeError),
    ({"memory": [1], "runtime": [None], "max_memory": 1}, TypeError),
    ({"memory": [1], "runtime": [True], "max_memory": 1}, TypeError),
    ({"memory": [1e300], "runtime": [1], "max_memory": 1}, ValueError),
    ({"memory": [1], "runtime": [1], "max_memory": "5"}, TypeError),
]


@pytest.mark.parametrize("instance,error", BAD)
def test_bad_input_raises_with_the_cli_message(run, instance, error):
    with pytest.raises(error) as caught:
        remat.solve(instance["memory"], instance["runtime"], instance["max_memory"])
    text = json.dumps(instance).replace(
        "NaN", "1"
    )  # NaN is not JSON; the CLI names it at parse time
    if "NaN" not in json.dumps(instance):
        code, out, err = run("solve", "-", stdin=text)
        assert code == 2
        assert err.strip() == f"error: {caught.value}"


def test_nan_and_infinity_name_the_index():
    with pytest.raises(ValueError, match=r"memory\[1\]: is NaN"):
        remat.solve([1, float("nan")], [1, 1], 1)
    with pytest.raises(ValueError, match=r"runtime\[0\]: is infinite"):
        remat.solve([1], [float("inf")], 1)


def test_unknown_solver_and_bad_options():
    with pytest.raises(ValueError, match="solver: unknown solver 'ilp'"):
        remat.solve([1], [1], 1, solver="ilp")
    with pytest.raises(ValueError, match="time_limit: must be a positive"):
        remat.solve([1], [1], 1, time_limit=0)
    with pytest.raises(ValueError, match="max_planner_bytes"):
        remat.solve([1], [1], 1, max_planner_bytes=-5)
    with pytest.raises(ValueError, match="one-dimensional"):
        remat.solve(np.ones((2, 2)), [1, 1], 1)


def test_planner_caps_of_any_integer_type_and_size():
    # 2**70 went to the binding as is, which raised its own TypeError naming no field.
    assert remat.solve([1, 2], [1, 1], 2, max_planner_bytes=2**70).status == "optimal"
    assert remat.solve([1, 2], [1, 1], 2, max_planner_bytes=np.int64(2**30)).status == "optimal"
    for bad in (0, True, 1.5, "0GB"):
        with pytest.raises(ValueError, match="max_planner_bytes: must be a positive integer"):
            remat.solve([1], [1], 1, max_planner_bytes=bad)
    # With a unit, as the CLI's --max-planner-bytes reads it (it was refused here).
    assert remat.solve([1, 2], [1, 1], 2, max_planner_bytes="8GiB").status == "optimal"
    with pytest.raises(ValueError, match="max_planner_bytes: cannot read 'lots'"):
        remat.solve([1], [1], 1, max_planner_bytes="lots")


def test_planner_memory_refusal_is_a_memory_error_naming_a_solver():
    rng = np.random.default_rng(0)
    memory = rng.uniform(0, 1e4, 100)
    runtime = memory * rng.uniform(0.5, 1.5, 100)
    with pytest.raises(MemoryError) as caught:
        remat.solve(memory, runtime, 1e5, solver="dp", max_planner_bytes=10**8)
    assert isinstance(caught.value, remat.PlannerMemoryError)
    # Python's arguments, not the CLI's flags.
    assert str(caught.value).endswith('; use solver="exact" (or raise max_planner_bytes=)')
    assert "--" not in str(caught.value)
    assert remat.solve(memory, runtime, 1e5, max_planner_bytes=10**8).status == "optimal"


def test_work_limit_refusal_names_python_arguments():
    rng = np.random.default_rng(2)
    memory = rng.uniform(0, 1e4, 2000)
    with pytest.raises(TimeoutError) as caught:
        remat.solve(memory, memory, 1e4, solver="dp", time_limit=1e-3, max_planner_bytes=1 << 40)
    assert isinstance(caught.value, remat.WorkLimitError)
    assert str(caught.value).endswith('; use solver="exact"') and "--" not in str(caught.value)


def test_a_table_solver_stops_at_a_time_limit_its_estimate_accepted():
    # The up-front estimate (4e9 cells a second) accepts 0.05 s for 1e8 cells; dp fills them
    # far slower, and ran on for seconds past the limit. (sliding_hirschberg checks the same way.)
    rng = np.random.default_rng(5)
    memory = rng.uniform(0.001, 0.1, 1000)
    start = time.perf_counter()
    with pytest.raises(remat.WorkLimitError, match="passed the time limit"):
        remat.solve(memory, memory, 10.0, solver="dp", time_limit=0.05)
    assert time.perf_counter() - start < 0.05 + 0.05  # within 50 ms, plus converting the lists


def test_a_time_limit_past_what_the_clock_holds_is_no_limit():
    # Converted to a deadline it overflowed into the past: the search stopped at once.
    rng = np.random.default_rng(6)
    memory = rng.uniform(0.001, 1, 2000)
    runtime = memory * rng.uniform(0.9, 1.1, 2000)
    expected = remat.solve(memory, runtime, 300.0)
    for limit in (1e10, 1e300, float("inf")):
        got = remat.solve(memory, runtime, 300.0, time_limit=limit)
        assert got.status == expected.status and got.max_runtime == expected.max_runtime, limit


def test_one_version_everywhere():
    declared = re.search(r"project\(remat VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    assert remat.__version__ == declared.group(1)
    assert importlib.metadata.version("remat") == remat.__version__


def test_the_package_under_test_is_installed_not_the_source_tree():
    # ./dev test installs the package (pip install .); ./dev test-wheel installs the wheel into a
    # fresh environment and names it in REMAT_INSTALLED_PREFIX.
    here = pathlib.Path(remat.__file__).resolve()
    assert ROOT / "python" not in here.parents, here
    prefix = os.environ.get("REMAT_INSTALLED_PREFIX")
    if prefix:
        assert pathlib.Path(prefix).resolve() in here.parents, here
        assert str(ROOT / "python") not in [
            str(pathlib.Path(p).resolve()) for p in __import__("sys").path if p
        ]


def _brute_force(memory, runtime, max_memory, scale=10000):
    weights = [round(m * scale) for m in memory]
    cap = round(max_memory * scale)
    best = 0.0
    for mask in range(1 << len(weights)):
        chosen = [i for i in range(len(weights)) if mask >> i & 1]
        if sum(weights[i] for i in chosen) <= cap:
            best = max(best, sum(runtime[i] for i in chosen))
    return best


def test_memory_limit_returns_a_plan_and_a_bound_or_raises_on_request():
    rng = np.random.default_rng(17)
    limited = 0
    for _ in range(20):
        memory = rng.uniform(0, 1, 12).tolist()
        runtime = rng.uniform(0.01, 1, 12).tolist()
        budget = sum(memory) * 0.4
        optimum = _brute_force(memory, runtime, budget)
        for cap in (1, 300, 800):
            r = remat.solve(memory, runtime, budget, max_planner_bytes=cap)
            assert r.status in ("optimal", "memory_limit")
            assert sum(memory[i] for i in r.saved) <= budget + 1e-12
            assert r.max_runtime <= optimum + 1e-9 and r.upper_bound >= optimum - 1e-9
            if r.status == "optimal":
                assert abs(r.max_runtime - optimum) <= 1e-9
            else:
                limited += 1
                with pytest.raises(remat.PlannerMemoryError, match="exact needs more than"):
                    remat.solve(
                        memory, runtime, budget, max_planner_bytes=cap, on_memory_limit="raise"
                    )
    assert limited > 10
    with pytest.raises(ValueError, match="on_memory_limit"):
        remat.solve([1], [1], 1, on_memory_limit="refuse")


def test_threads_solve_concurrently_with_identical_results():
    rng = np.random.default_rng(1)
    instances = [(rng.uniform(0, 0.01, 300), rng.uniform(0, 1, 300), 0.5) for _ in range(8)]
    expected = [remat.solve(*i).saved for i in instances]
    results = [None] * 8

    def work(k):
        for _ in range(20):
            results[k] = remat.solve(*instances[k]).saved

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == expected


def test_pareto_matches_solve_at_every_breakpoint():
    front = remat.pareto(**INSTANCE)
    assert front.budget_quanta[0] == 0
    for budget, value in zip(front.budgets, front.max_runtime):
        assert remat.solve(INSTANCE["memory"], INSTANCE["runtime"], budget).max_runtime == value
        assert front.value_at(budget) == value
    assert front.value_at(INSTANCE["max_memory"]) == 5.0


def _slow_front():
    """An instance whose front takes seconds: 1000 items, 10^5 distinct weights and values."""
    rng = np.random.default_rng(8)
    memory = rng.integers(1, 100000, 1000).astype(float)
    runtime = rng.integers(1, 100000, 1000).astype(float)
    return memory, runtime, float(memory.sum() / 2)


def test_pareto_stops_at_its_time_limit_and_on_ctrl_c():
    # It had neither: n = 3000 at R = 1e7 ran 41 s, and Ctrl-C waited for the end.
    memory, runtime, budget = _slow_front()
    start = time.perf_counter()
    with pytest.raises(remat.WorkLimitError, match="pareto passed the time limit of 0.2 s"):
        remat.pareto(memory, runtime, budget, scale=1, time_limit=0.2)
    assert time.perf_counter() - start < 0.2 + 0.05
    small = remat.pareto(memory[:12], runtime[:12], budget, scale=1, time_limit=10)
    assert list(small.max_runtime) == list(
        remat.pareto(memory[:12], runtime[:12], budget, scale=1).max_runtime
    )
    script = textwrap.dedent("""
        import os, signal, threading, time
        import numpy as np, remat
        rng = np.random.default_rng(8)
        memory = rng.integers(1, 100000, 1000).astype(float)
        runtime = rng.integers(1, 100000, 1000).astype(float)
        # A shell's background job starts with SIGINT ignored, and Python then keeps it so.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        start = time.perf_counter()
        try:
            remat.pareto(memory, runtime, float(memory.sum() / 2), scale=1)
            print("finished")
        except KeyboardInterrupt:
            print("interrupted", time.perf_counter() - start)
        """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    word, *seconds = out.stdout.split()
    assert word == "interrupted", out.stdout + out.stderr
    assert float(seconds[0]) < 0.3 + 0.2


@pytest.mark.parametrize(
    "budget,error",
    [
        (-1.0, ValueError),  # returned 0.0
        (float("nan"), ValueError),  # a raw ValueError from round()
        (float("inf"), ValueError),  # OverflowError
        ("2", TypeError),
        # Past max_memory the front was not computed: its last value understated the best.
        (INSTANCE["max_memory"] * 2, ValueError),
    ],
)
def test_pareto_value_at_refuses_budgets_it_cannot_answer(budget, error):
    front = remat.pareto(**INSTANCE)
    with pytest.raises(error, match="budget"):
        front.value_at(budget)


def test_knapsack_module_has_torch_signatures():
    torch_knapsack = pytest.importorskip("torch._functorch._activation_checkpointing.knapsack")
    for name in [
        "dp_knapsack",
        "dp_knapsack_sliding_hirschberg",
        "greedy_knapsack",
        "ilp_knapsack",
    ]:
        ours, theirs = getattr(remat.knapsack, name), getattr(torch_knapsack, name)
        # Called by keyword too: greedy and ilp name their second parameter runtimes, dp runtime.
        assert list(inspect.signature(ours).parameters) == list(
            inspect.signature(theirs).parameters
        )
        max_runtime, saved, recomputed = ours([2, 3, 2, 4, 1], [1, 2, 1, 3, 2], 5)
        assert (
            isinstance(max_runtime, float)
            and isinstance(saved, list)
            and isinstance(recomputed, list)
        )
        assert sorted(saved + recomputed) == list(range(5))


def test_the_binding_stub_names_every_parameter():
    import ast

    stub = ast.parse((ROOT / "python" / "remat" / "_core.pyi").read_text())
    functions = [node for node in stub.body if isinstance(node, ast.FunctionDef)]
    assert functions
    for node in functions:
        documented = getattr(remat._core, node.name).__doc__.split("\n")[0]
        names = re.findall(r"(?:\(|, )(\w+):", documented.split(") ->")[0])
        assert [a.arg for a in node.args.args] == names, node.name


def test_the_binding_returns_typed_plans():
    """The planners return classes with named fields, not dicts read by string keys."""
    layers = [(100, 10, False, 1e-3, ()), (100, 10, False, 1e-3, ()), (100, 10, True, 1e-3, ())]
    plan = remat._core.eager_plan(10, layers, 0.0, 0, 10**6, 0, 0)
    assert isinstance(plan, remat._core.EagerPlan)
    assert plan.regions == [] and plan.peak_bytes == plan.no_checkpoint_bytes
    least = remat._core.eager_minimum(10, layers, 0.0, 0)
    assert least.peak_bytes == least.minimum_budget < plan.peak_bytes
    assert all(len(region) == 4 for region in least.regions)
    schedule = remat._core.plan_profile(8, [8, 8, 8], [1.0, 1.0, 1.0], 24, 24, 0)
    assert isinstance(schedule, remat._core.ChainSchedule)
    assert schedule.memory_bytes <= 24 and schedule.schedule[0][0] == "forward"
    simulated = remat._core.simulate_profile(8, [8, 8, 8], [1.0, 1.0, 1.0], "store-all", 0)
    assert simulated.recompute == 0 and simulated.actions == len(simulated.schedule)
    with pytest.raises(AttributeError):
        plan.peak_bytes = 0  # read-only
