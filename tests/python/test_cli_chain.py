"""The contract of `remat chain` and `remat estimate`, with the textbook's figures."""

import json
import re

import pytest


def chain(run, *args):
    code, out, err = run("chain", *args)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(
    "layers,every,memory,recompute",
    [
        (16, 4, 7, 12),
        (16, 2, 9, None),
        (16, 8, 9, None),
        (100, 2, 51, None),
        (100, 5, 24, None),
        (100, 10, 19, None),
        (100, 20, 24, None),
        (100, 50, 51, None),
        (10000, 100, 199, 9900),
        (32, 4, 11, 24),
    ],
)
def test_every_reproduces_the_textbook(run, layers, every, memory, recompute):
    result = chain(run, "--layers", str(layers), "--every", str(every))
    assert result["strategy"] == "every"
    assert result["memory"] == memory
    if recompute is not None:
        assert result["recompute"] == recompute


def test_store_first_and_store_all(run):
    assert chain(run, "--layers", "16", "--strategy", "store-first")["memory"] == 2
    assert chain(run, "--layers", "16", "--strategy", "store-first")["recompute"] == 120
    assert chain(run, "--layers", "16", "--strategy", "store-all")["memory"] == 16


def test_sqrt_picks_the_best_segment(run):
    result = chain(run, "--layers", "10000", "--strategy", "sqrt")
    assert result["every"] == 100 and result["memory"] == 199


def test_optimal_beats_every_at_equal_memory(run):
    fixed = chain(run, "--layers", "16", "--every", "4")
    best = chain(run, "--layers", "16", "--strategy", "optimal", "--memory", str(fixed["memory"]))
    assert best["memory"] <= fixed["memory"]
    assert best["recompute"] == 9 < fixed["recompute"]


def test_optimal_least_memory_for_a_recompute_budget(run):
    result = chain(run, "--layers", "16", "--strategy", "optimal", "--max-recompute", "9")
    assert result["memory"] == 7 and result["recompute"] <= 9


def test_optimal_answers_a_hundred_thousand_layers(run):
    result = chain(run, "--layers", "100000", "--strategy", "optimal", "--memory", "10")
    assert result["memory"] <= 10
    assert result["seconds"] < 1.0


def test_schedule_lists_actions_that_replay(run):
    result = chain(run, "--layers", "6", "--strategy", "optimal", "--memory", "3", "--schedule")
    schedule = result["schedule"]
    assert len(schedule) == result["actions"]
    # Replay: count evaluations beyond the first pass and the peak held activations.
    held, frontier, recompute, peak, next_backward = {0}, 0, 0, 1, 6
    for action in schedule:
        if action["op"] == "forward":
            first, last = action["layers"]
            assert first - 1 in held
            peak = max(peak, len([h for h in held if h < 6]) + (1 if first < 6 else 0))
            recompute += max(0, min(last, frontier) - first + 1)
            frontier = max(frontier, last)
            if not action["keep_input"]:
                held.discard(first - 1)
            held.add(last)
        elif action["op"] == "backward":
            assert action["layer"] == next_backward and action["layer"] - 1 in held
            next_backward -= 1
        else:
            held.remove(action["activation"])
        peak = max(peak, len([h for h in held if h < 6]))
    assert next_backward == 0
    assert (peak, recompute) == (result["memory"], result["recompute"])


@pytest.mark.parametrize(
    "args,message",
    [
        (["chain", "--layers", "0", "--every", "2"], "layers: must be at least 1"),
        (["chain", "--layers", "10", "--strategy", "best"], "strategy: unknown strategy 'best'"),
        (["chain", "--layers", "10"], "strategy: give --strategy or --every"),
        (["chain", "--layers", "10", "--every", "0"], "strategy: give --strategy or --every"),
        (["chain", "--layers", "10", "--strategy", "optimal"], "needs exactly one of --memory"),
        (
            ["chain", "--layers", "10", "--strategy", "optimal", "--memory", "1"],
            "memory: no schedule of 10 layers fits in 1",
        ),
        (
            ["chain", "--layers", "10", "--strategy", "sqrt", "--memory", "3"],
            "apply to --strategy optimal",
        ),
        (["chain", "--layers", "10", "--strategy", "sqrt", "--every", "3"], "error:"),
        (
            ["chain", "--layers", "400000", "--strategy", "store-all", "--schedule"],
            "that --schedule prints",
        ),
        (
            [
                "estimate",
                "--layers",
                "32",
                "--batch",
                "32",
                "--seq",
                "1024",
                "--hidden",
                "4096",
                "--dtype",
                "fp13",
            ],
            "dtype: unknown dtype 'fp13'",
        ),
        (
            ["estimate", "--layers", "32", "--batch", "0", "--seq", "1", "--hidden", "1"],
            "batch: must be at least 1",
        ),
        (["estimate", "--layers", "32"], "error:"),
    ],
)
def test_chain_errors_exit_2(run, args, message):
    code, out, err = run(*args)
    assert code == 2, err
    assert out == ""
    assert err.startswith("error: ") and message in err


def test_estimate_reproduces_problem_12(run):
    base = [
        "estimate",
        "--layers",
        "32",
        "--batch",
        "32",
        "--seq",
        "1024",
        "--hidden",
        "4096",
        "--dtype",
        "bf16",
    ]
    code, out, _ = run(*base)
    result = json.loads(out)
    assert (result["tensor_gib"], result["no_checkpoint_gib"]) == (0.25, 8.0)
    assert json.loads(run(*base, "--tensors-per-layer", "4")[1])["no_checkpoint_gib"] == 32.0
    assert json.loads(run(*base, "--tensors-per-layer", "10")[1])["no_checkpoint_gib"] == 80.0
    result = json.loads(run(*base, "--every", "4")[1])
    assert result["checkpoint_gib"] == 2.75
    assert result["checkpoint_layer_outputs"] == 11
    assert result["recompute_layers"] == 24


PROFILE = {
    "input_bytes": 100,
    "layers": [
        {"name": "a", "activation_bytes": 100, "forward_time": 1.0},
        {"name": "b", "activation_bytes": 400, "forward_time": 3.0},
        {"name": "c", "activation_bytes": 100, "forward_time": 1.0},
        {"name": "d", "activation_bytes": 100, "forward_time": 2.0},
        {"name": "e", "activation_bytes": 200, "forward_time": 1.0},
        {"name": "f", "activation_bytes": 100, "forward_time": 1.0},
    ],
}


def write(tmp_path, data, name="profile.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_profile_budget_plans_within_budget_and_beats_every(run, tmp_path):
    path = write(tmp_path, PROFILE)
    for every in range(1, 7):
        fixed = chain(run, "--profile", path, "--every", str(every))
        assert "memory_bytes" in fixed and "recompute_time" in fixed
        best = chain(run, "--profile", path, "--budget", str(fixed["memory_bytes"]))
        assert best["strategy"] == "optimal"
        assert best["memory_bytes"] <= fixed["memory_bytes"]
        assert best["recompute_time"] <= fixed["recompute_time"] + 1e-9
        assert best["predicted_recompute_time"] == pytest.approx(best["recompute_time"])


def test_unit_profile_matches_the_unit_model(run, tmp_path):
    layers = [{"activation_bytes": 1, "forward_time": 1} for _ in range(16)]
    path = write(tmp_path, {"layers": layers})
    for memory in (2, 4, 7, 16):
        with_profile = chain(run, "--profile", path, "--budget", str(memory))
        unit = chain(run, "--layers", "16", "--strategy", "optimal", "--memory", str(memory))
        assert (with_profile["memory_bytes"], with_profile["recompute"]) == (
            unit["memory"],
            unit["recompute"],
        )
        assert with_profile["recompute_time"] == unit["recompute"]


@pytest.mark.parametrize(
    "outputs,input_bytes,least",
    [
        ([100], None, 100),  # one layer: said 200 (input and output added), and 100 plans
        ([39, 49, 50, 1], None, 89),  # the input (39) with the largest output before the last
        ([2, 34, 15, 49, 29, 32], 20, 69),
    ],
)
def test_the_least_budget_stated_is_the_least_that_plans(
    run, tmp_path, outputs, input_bytes, least
):
    data = {"layers": [{"activation_bytes": b, "forward_time": 1.0} for b in outputs]}
    if input_bytes is not None:
        data["input_bytes"] = input_bytes
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    code, _, err = run("chain", "--profile", str(path), "--budget", str(least - 1))
    assert code == 2 and f"every schedule needs at least {least} bytes" in err, err
    chain(run, "--profile", str(path), "--budget", str(least), "--slots", str(least))


def test_input_bytes_defaults_to_the_first_layer(run, tmp_path):
    data = {
        "layers": [
            {"activation_bytes": 7, "forward_time": 1},
            {"activation_bytes": 5, "forward_time": 1},
        ]
    }
    result = chain(run, "--profile", write(tmp_path, data), "--strategy", "store-all")
    assert result["memory_bytes"] == 7 + 7  # a_0 (7, defaulted) and a_1 (7)


@pytest.mark.parametrize(
    "data,args,message",
    [
        ({"layers": []}, ["--budget", "10"], "layers: expected a non-empty array"),
        ({}, ["--budget", "10"], "layers: missing"),
        (
            {"layers": [{"forward_time": 1}]},
            ["--budget", "10"],
            "layers[0]: activation_bytes is missing",
        ),
        (
            {"layers": [{"activation_bytes": 1}]},
            ["--budget", "10"],
            "layers[0]: forward_time is missing",
        ),
        (
            {"layers": [{"activation_bytes": -1, "forward_time": 1}]},
            ["--budget", "10"],
            "layers[0]: activation_bytes must be a whole number of bytes",
        ),
        (
            {"layers": [{"activation_bytes": 1.5, "forward_time": 1}]},
            ["--budget", "10"],
            "layers[0]: activation_bytes must be a whole number of bytes",
        ),
        # A whole number, only too large: it said "must be a whole number".
        (
            {"layers": [{"activation_bytes": 1e30, "forward_time": 1}]},
            ["--budget", "10"],
            "layers[0]: activation_bytes is too large (at most 9.2e18)",
        ),
        (
            {"layers": [{"activation_bytes": 1, "forward_time": -2}]},
            ["--budget", "10"],
            "layers[0]: forward_time must be finite",
        ),
        (
            {"layers": [{"activation_bytes": 1, "forward_time": "x"}]},
            ["--budget", "10"],
            "layers[0]: forward_time must be a number, got a string",
        ),
        (
            {"layers": [{"activation_bytes": "20", "forward_time": 1}]},
            ["--budget", "10"],
            "layers[0]: activation_bytes must be a number, got a string",
        ),
        (PROFILE, ["--budget", "150"], "budget: no schedule fits in 150 bytes"),
        (PROFILE, ["--budget", "1000", "--every", "2"], "--budget plans the optimal schedule"),
        (PROFILE, ["--strategy", "optimal"], "takes --budget BYTES"),
        (PROFILE, [], "give --budget BYTES, --strategy or --every"),
        (PROFILE, ["--budget", "1000", "--slots", "0"], "slots: must be at least 1"),
    ],
)
def test_profile_errors_exit_2(run, tmp_path, data, args, message):
    code, out, err = run("chain", "--profile", write(tmp_path, data), *args)
    assert code == 2, err
    assert out == ""
    assert err.startswith("error: ") and message in err


def test_profile_planner_memory_refusal_is_exit_3(run, tmp_path):
    layers = [{"activation_bytes": 1, "forward_time": 1} for _ in range(300)]
    path = write(tmp_path, {"layers": layers})
    code, out, err = run(
        "chain",
        "--profile",
        path,
        "--budget",
        "300",
        "--slots",
        "300",
        "--max-planner-bytes",
        "1000000",
    )
    assert code == 3 and out == ""
    assert "lower --slots (or raise --max-planner-bytes)" in err


def test_example_profile_runs(run):
    from conftest import ROOT

    result = chain(
        run, "--profile", str(ROOT / "examples/profiles/decoder_6x4.json"), "--budget", "200000000"
    )
    assert result["memory_bytes"] <= 200000000


def decoder_path():
    from conftest import ROOT

    return str(ROOT / "examples/profiles/decoder_6x4.json")


@pytest.mark.parametrize("slots", [2, 3, 4, 7, 16, 23])
def test_slots_are_honoured(run, slots):
    # Sizes are multiples of 8 MiB; 200 MB holds 23 of those. Up to 23 slots, the planner counts
    # exactly the units asked for, each floor(budget / slots) bytes.
    result = chain(run, "--profile", decoder_path(), "--budget", "200000000", "--slots", str(slots))
    assert result["slots"] == slots and "slots_note" not in result
    assert result["unit_bytes"] == 200000000 // slots
    assert result["memory_bytes"] <= 200000000
    assert result["exact"] == (result["unit_bytes"] == 8 << 20)


def test_too_few_slots_say_so(run):
    # One unit of 200 MB holds no layer's input and output together, once sizes are rounded up.
    code, out, err = run(
        "chain", "--profile", decoder_path(), "--budget", "200000000", "--slots", "1"
    )
    assert (code, out) == (2, "")
    assert err == (
        "error: budget: no schedule fits in 200000000 bytes with sizes rounded up to units of "
        "200000000 bytes (the budget holds 1); more slots count sizes more finely\n"
    )


def test_more_slots_than_the_sizes_divisor_needs_are_explained(run):
    result = chain(run, "--profile", decoder_path(), "--budget", "200000000", "--slots", "1000")
    assert (result["slots"], result["unit_bytes"], result["exact"]) == (23, 8 << 20, True)
    assert result["slots_note"].startswith("1000 slots requested; 23 units of 8388608 bytes")
    # Exact: the default (up to 512 slots) and any finer request give the same plan.
    default = chain(run, "--profile", decoder_path(), "--budget", "200000000")
    assert default["recompute_time"] == result["recompute_time"] and "slots_note" not in default


def test_fewer_slots_trade_accuracy_for_time(run):
    times = [
        chain(run, "--profile", decoder_path(), "--budget", "200000000", "--slots", str(s))[
            "recompute_time"
        ]
        for s in (4, 16, 23)
    ]
    assert times[0] >= times[1] >= times[2]


def test_small_budget_slots_note(run, tmp_path):
    # Under slots * (slots + 1) bytes, floor(budget / slots)-byte units come a few more than asked:
    # 10 asked of 15 bytes are 15 units of 1 byte (exact), 4 asked are 5 units of 3 bytes.
    path = write(
        tmp_path, {"layers": [{"activation_bytes": 1, "forward_time": 1} for _ in range(8)]}
    )
    exact = chain(run, "--profile", path, "--budget", "15", "--slots", "10")
    assert (exact["slots"], exact["unit_bytes"], exact["exact"]) == (15, 1, True)
    assert (
        exact["slots_note"]
        == "10 slots requested; units of floor(15 / 10) = 1 byte, of which the budget holds 15"
    )
    coarse = chain(run, "--profile", path, "--budget", "15", "--slots", "4")
    assert (coarse["slots"], coarse["unit_bytes"]) == (5, 3)
    assert (
        coarse["slots_note"]
        == "4 slots requested; units of floor(15 / 4) = 3 bytes, of which the budget holds 5"
    )


def test_an_eager_profile_is_named(run):
    from conftest import ROOT

    eager_profile = str(ROOT / "examples/profiles/gpt_d8_w192_eager.json")
    code, out, err = run("chain", "--profile", eager_profile, "--budget", "100MB")
    assert (code, out) == (2, "")
    assert err.startswith(
        "error: input: this is an eager profile (layers have saved_bytes and output_bytes); "
        "remat chain --profile reads chain profiles"
    )
    assert "remat eager" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "layers, args, error",
    [
        # Sizes under the per-value cap whose sum wraps int64: a plan printed 9e18 bytes for a
        # 300-byte budget, `--every 1` printed half the true peak, and `--budget 300` spun forever.
        ([(9e18, 1), (9e18, 1)], ["--budget", "300"], r"past 2\^60"),
        ([(5e17, 1), (9e17, 1)], ["--every", "1"], r"layers\[1\]: activation_bytes: .*past 2\^60"),
        ([(5e17, 1), (9e17, 1)], ["--budget", "300"], r"layers\[1\]: activation_bytes"),
        # Finite times whose total is not: the recompute time printed as null.
        ([(8, 1e308), (8, 1e308), (8, 1e308)], ["--every", "3"], r"layers\[\d\]: forward_time"),
    ],
)
def test_profiles_whose_totals_overflow_are_refused(run, tmp_path, layers, args, error):
    profile = {
        "input_bytes": 8,
        "layers": [{"activation_bytes": b, "forward_time": t} for b, t in layers],
    }
    code, out, err = run("chain", "--profile", str(write(tmp_path, profile)), *args)
    assert code == 2 and out == "", (code, out)
    assert re.search(error, err), err


def test_a_planner_cap_of_zero_is_refused(run, tmp_path):
    # It was read as "not given": the default cap, half the RAM.
    profile = {"layers": [{"activation_bytes": 8, "forward_time": 1}] * 3}
    for cap in ("0", "0B", "0.5"):
        code, _, err = run(
            "chain",
            "--profile",
            str(write(tmp_path, profile)),
            "--budget",
            "64",
            "--max-planner-bytes",
            cap,
        )
        assert code == 2 and "max_planner_bytes: must be at least 1 byte" in err, err
        code, _, err = run(
            "solve",
            "--max-planner-bytes",
            cap,
            "-",
            stdin='{"memory": [1], "runtime": [1], "max_memory": 1}',
        )
        assert code == 2 and "max_planner_bytes: must be at least 1 byte" in err, err


@pytest.mark.parametrize("every", ["17", "9223372036854775807"])
def test_a_segment_longer_than_the_chain_is_the_whole_chain(run, every):
    # (n + s - 1) / s overflowed for s near 2^63: an internal error, exit 1.
    result = chain(run, "--layers", "16", "--every", every)
    whole = chain(run, "--layers", "16", "--every", "16")
    assert (result["memory"], result["recompute"]) == (whole["memory"], whole["recompute"])


@pytest.mark.parametrize(
    "args",
    [
        ["generate", "--family", "uncorrelated", "--n", "3", "--seed", "18446744073709551616"],
        ["chain", "--layers", "16", "--every", "99999999999999999999"],
        ["estimate", "--layers", "4", "--batch", "1", "--seq", "1", "--hidden", "1" + "0" * 19],
    ],
)
def test_an_integer_past_its_range_is_refused_not_clamped(run, args):
    code, out, err = run(*args)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {args[-2]}: out of range, got {args[-1]}")
