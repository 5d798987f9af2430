"""The contract of `remat eager`: the eager planner on a profile written by
remat.torch.Profile.to_json(), agreeing with the Python package."""

import json

import pytest

import remat.torch as rt
from conftest import ROOT
from remat import eager

PROFILE = ROOT / "examples" / "profiles" / "gpt_d8_w192_eager.json"


def eager_cli(run, *args, stdin=None):
    code, out, err = run("eager", *args, stdin=stdin)
    assert code == 0, err
    assert err == ""
    return json.loads(out)


def test_plan_fits_and_matches_the_package(run):
    profile = rt.Profile.from_json(PROFILE.read_text())
    minimum = eager_cli(run, str(PROFILE))
    assert minimum["peak_bytes"] == minimum["minimum_budget"]
    assert minimum["no_checkpoint_bytes"] > minimum["minimum_budget"]
    for budget in (minimum["minimum_budget"], 60 * 2**20, minimum["no_checkpoint_bytes"]):
        out = eager_cli(run, str(PROFILE), "--activation-budget", str(budget))
        assert out["peak_bytes"] <= budget
        ours = eager.plan_profile(profile, budget)
        assert [tuple(r) for r in out["regions"]] == list(ours.regions)
        assert out["recompute_time"] == pytest.approx(ours.predicted_recompute_seconds)
        assert out["runs"] == ours.runs()
    assert (
        eager_cli(run, str(PROFILE), "--activation-budget", str(minimum["no_checkpoint_bytes"]))[
            "regions"
        ]
        == []
    )


def test_reads_standard_input(run):
    out = eager_cli(run, "-", "--activation-budget", str(2**40), stdin=PROFILE.read_text())
    assert out["layers"] == 8 and out["recompute_time"] == 0


def test_budget_below_the_minimum_states_it(run):
    least = eager_cli(run, str(PROFILE))["minimum_budget"]
    code, out, err = run("eager", str(PROFILE), "--activation-budget", str(least - 1))
    assert code == 2 and out == ""
    assert f"least peak any plan reaches, {least} bytes" in err
    # Named as the option is (the core names the Python argument, memory_budget).
    code, out, err = run("eager", str(PROFILE), "--activation-budget", "1")
    assert err.startswith(
        "error: activation-budget: 1 byte is below the least peak any plan reaches"
    )


@pytest.mark.parametrize(
    "mutate, message",
    [
        (
            lambda p: p["layers"][3].update(saved_bytes=-1),
            "layers[3]: saved_bytes must be a whole number of bytes",
        ),
        (lambda p: p["layers"][2].pop("output_bytes"), "layers[2]: output_bytes is missing"),
        (
            lambda p: p["layers"][1].update(saves_output="yes"),
            "layers[1]: saves_output must be true or false",
        ),
        (
            lambda p: p["layers"][5].update(forward_time=-2.0),
            "forward_time[5]: must be finite and >= 0",
        ),
        (lambda p: p.update(region_overhead=-1), "region_overhead: must be finite and >= 0"),
        (lambda p: p.update(layers=[]), "layers: expected a non-empty array"),
        (lambda p: p.pop("input_bytes"), "input_bytes: missing"),
        # The overflow was blamed on saved_bytes[0].
        (
            lambda p: [layer.update(output_bytes=5 * 10**17) for layer in p["layers"]],
            "output_bytes[2]: the chain's bytes add up past 2^60",
        ),
        # The recompute time printed as null.
        (
            lambda p: [layer.update(forward_time=1e307) for layer in p["layers"]],
            "the chain's times add up past what a step's total can hold in a double",
        ),
        # A count of layers, once described as bytes.
        (
            lambda p: p.update(max_region_layers=1.5),
            "max_region_layers: must be a whole number >= 0",
        ),
        # Once "options[3]", naming the layer as if it were the option, or no option at all.
        (
            lambda p: p["layers"][3].update(
                options=[{"held_bytes": 1, "recompute_time": 0.0}, {"held_bytes": 1.5}]
            ),
            "layers[3].options[1]: expected an object with held_bytes and recompute_time",
        ),
        (
            lambda p: p["layers"][2].update(options=[{"held_bytes": -1, "recompute_time": 0.0}]),
            "layers[2].options[0]: held_bytes must be a whole number of bytes",
        ),
    ],
)
def test_bad_profiles_name_the_field(run, mutate, message):
    profile = json.loads(PROFILE.read_text())
    mutate(profile)
    code, out, err = run(
        "eager", "-", "--activation-budget", "100000000", stdin=json.dumps(profile)
    )
    assert code == 2 and out == ""
    assert message in err, err


def test_bad_options(run):
    code, _, err = run("eager", str(PROFILE), "--activation-budget", "100000000", "--slots", "0")
    assert code == 2 and "slots" in err
    code, _, err = run("eager", "/nonexistent.json")
    assert code == 2 and "error:" in err
    code, _, err = run(
        "eager",
        str(PROFILE),
        "--activation-budget",
        "100000000",
        "--slots",
        "100000000",
        "--max-planner-bytes",
        "1000",
    )
    assert code == 3 and "slots" in err


def test_a_chain_profile_is_named(run):
    chain_profile = ROOT / "examples" / "profiles" / "decoder_6x4.json"
    code, out, err = run("eager", str(chain_profile), "--activation-budget", "30MB")
    assert (code, out) == (2, "")
    assert err.startswith(
        "error: input: this is a chain profile (layers have activation_bytes); remat eager reads "
        "eager profiles"
    )
    assert "remat chain --profile" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "change, message",
    [
        ({"saves_output": "false"}, r"layers\[0\].saves_output: expected true or false"),
        ({"saved_bytes": 10.9}, r"layers\[0\].saved_bytes: expected a whole number >= 0"),
        ({"output_bytes": "10"}, r"layers\[0\].output_bytes: expected a number, got a string"),
        ({"forward_time": -1}, r"layers\[0\].forward_time: expected a finite number >= 0"),
        ({"options": [{"held_bytes": 1}]}, r"layers\[0\].options\[0\].recompute_time: missing"),
    ],
)
def test_profile_from_json_refuses_what_the_cli_refuses(run, change, message):
    # It once read "false" as True, 10.9 bytes as 10 and strings as numbers.
    data = json.loads(PROFILE.read_text())
    data["layers"][0].update(change)
    with pytest.raises(ValueError, match=message):
        rt.Profile.from_json(json.dumps(data))
    code, out, err = run("eager", "-", stdin=json.dumps(data))
    assert code == 2 and out == ""


def test_profile_from_json_refuses_a_key_given_twice_and_nan():
    text = PROFILE.read_text()
    with pytest.raises(ValueError, match="input_bytes: appears twice"):
        rt.Profile.from_json(text.replace('"input_bytes":', '"input_bytes": 1, "input_bytes":', 1))
    with pytest.raises(ValueError, match="NaN is not JSON"):
        rt.Profile.from_json(text.replace('"forward_time":', '"forward_time": NaN, "x":', 1))
    profile = rt.Profile.from_json(text)
    assert rt.Profile.from_json(profile.to_json()) == profile


def test_a_key_given_twice_is_named_with_its_place(run):
    # "saved_bytes: appears twice", without the layer.
    text = PROFILE.read_text().replace('"saved_bytes":', '"saved_bytes": 1, "saved_bytes":', 1)
    code, out, err = run("eager", "-", stdin=text)
    assert code == 2 and out == ""
    assert err.startswith("error: layers[0].saved_bytes: appears twice in one object"), err


# --- --budget: the training step's peak ----------------------------------------------------------


def _measured_with_step():
    """A measured step of four MLP blocks with AdamW: a profile with its step figures."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(
        *(
            nn.Sequential(nn.LayerNorm(32), nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
            for _ in range(4)
        )
    )
    optimizer = torch.optim.AdamW(model.parameters())
    return rt.measure(model, torch.randn(8, 16, 32), optimizer=optimizer)


def _python_step_plan(profile, figures, budget):
    from remat.eager.planning.step_budget import plan_step

    return plan_step(lambda b: eager.plan_profile(profile, b), budget, figures, figures.start_bytes)


def test_step_budget_plans_as_auto_checkpoint_does(run, tmp_path):
    measured = _measured_with_step()
    path = tmp_path / "profile.json"
    path.write_text(measured.to_json())
    least, plain = measured.least_budget_bytes, measured.no_checkpoint_step_bytes
    assert eager_cli(run, str(path))["least_step_bytes"] <= least
    for budget in (least, (least + plain) // 2, plain):
        out = eager_cli(run, str(path), "--budget", str(budget))
        ours = _python_step_plan(measured.profile, measured.step_figures, budget)
        assert [tuple(r) for r in out["regions"]] == list(ours.regions)
        assert out["options"] == list(ours.options)
        assert out["step_peak_bytes"] == ours.step.predicted_peak_bytes <= budget
        assert out["step_peak_at"] == ours.step.where
    assert eager_cli(run, str(path), "--budget", str(plain))["regions"] == []


def _random_case(rng):
    """A random profile (options on some layers) and random figures of its step."""
    from remat.eager.planning.step_budget import StepFigures

    n = rng.randint(1, 6)
    layers = [
        {
            "name": f"l{i}",
            "saved_bytes": rng.randint(0, 5000),
            "output_bytes": rng.randint(0, 2000),
            "saves_output": rng.random() < 0.3,
            "forward_time": rng.uniform(0.001, 0.01),
            "options": [
                {"held_bytes": rng.randint(0, 3000), "recompute_time": rng.uniform(0, 0.005)}
                for _ in range(rng.randint(0, 2))
            ],
        }
        for i in range(n)
    ]
    parts = [(("pre",), rng.randint(0, 4000))]
    for i in range(n):
        parts += [(("forward", i), rng.randint(0, 4000)), (("after", i), rng.randint(0, 4000))]
    for i in reversed(range(n)):
        parts += [(("backward", i), rng.randint(0, 4000)), (("before", i), rng.randint(0, 4000))]
    parts.append((("done",), rng.randint(0, 4000)))
    start = rng.randint(0, 10**5)
    regions = [
        (part, rng.randint(0, 12000))
        for part, _ in parts
        if part[0] == "forward" and rng.random() < 0.7
    ]
    figures = StepFigures(
        start_bytes=start,
        outside_bytes=start + rng.randint(0, 20000),
        beside=tuple(parts),
        measured_peak_bytes=0,
        margin_bytes=rng.choice([0, rng.randint(0, 500)]),
        region_beside=tuple(regions),
    )
    profile = rt.Profile.from_json(
        json.dumps({"input_bytes": rng.randint(0, 3000), "layers": layers})
    )
    return profile, figures


def test_step_predictions_agree_with_the_package_on_random_profiles(run):
    import random

    from remat.eager.planning.step_budget import figures_json

    rng = random.Random(7)
    checked = refused = 0
    for _ in range(40):
        profile, figures = _random_case(rng)
        text = json.dumps({**json.loads(profile.to_json()), "step": figures_json(figures)})
        least = eager_cli(run, "-", stdin=text)["least_step_bytes"]
        for budget in (least - 1, least, least + rng.randint(0, 20000), 10**9):
            code, out, err = run("eager", "-", "--budget", str(budget), stdin=text)
            try:
                ours = _python_step_plan(profile, figures, budget)
            except Exception as error:  # remat.InputError: below the least step peak
                assert (
                    code == 2
                    and out == ""
                    and f"the least peak of this training step, {least}" in err
                )
                assert f"{least} bytes" in str(error)
                refused += 1
                continue
            assert code == 0, err
            found = json.loads(out)
            assert [tuple(r) for r in found["regions"]] == list(ours.regions)
            assert found["step_peak_bytes"] == ours.step.predicted_peak_bytes <= budget
            assert found["step_peak_at"] == ours.step.where
            checked += 1
    assert checked > 100 and refused == 40


def test_step_budget_errors_name_the_option_and_the_part(run):
    text = PROFILE.read_text()
    code, out, err = run("eager", "-", "--budget", "1GiB", stdin=text)
    assert (code, out) == (2, "")
    assert err.startswith("error: budget: the profile has no step figures") and (
        "--activation-budget" in err and "to_json()" in err
    )
    code, out, err = run(
        "eager", "-", "--budget", "1GiB", "--activation-budget", "1GiB", stdin=text
    )
    assert code == 2 and "not both" in err
    data = json.loads(text)
    data["step"] = {
        "start_bytes": 0,
        "outside_bytes": 0,
        "parts": [
            {"part": "pre", "beside_bytes": 0},
            {"part": "forward", "call": 8, "beside_bytes": 1},
        ],
    }
    code, out, err = run("eager", "-", "--budget", "1GiB", stdin=json.dumps(data))
    assert code == 2 and err.startswith(
        "error: step.parts[1]: call 8 is not a layer of the profile"
    )
    data["step"]["parts"][1] = {"part": "after", "call": 0, "beside_bytes": 1}
    data["step"]["parts"][1]["region_beside_bytes"] = 5
    code, out, err = run("eager", "-", "--budget", "1GiB", stdin=json.dumps(data))
    assert code == 2 and err.startswith(
        "error: step.parts[1]: region_beside_bytes is for forward parts only"
    )
    data["step"]["parts"][1] = {"part": "forward", "call": 0, "beside_bytes": 1}
    data["step"]["parts"][1]["region_beside_bytes"] = -3
    code, out, err = run("eager", "-", "--budget", "1GiB", stdin=json.dumps(data))
    assert code == 2 and err.startswith(
        "error: step.parts[1]: region_beside_bytes must be a whole number of bytes"
    )
    data["step"]["parts"][1] = {"part": "sideways", "call": 0, "beside_bytes": 1}
    code, out, err = run("eager", "-", "--budget", "1GiB", stdin=json.dumps(data))
    assert code == 2 and err.startswith("error: step.parts[1]: part must be one of pre, forward")
    del data["step"]["outside_bytes"]
    code, out, err = run("eager", "-", "--budget", "1GiB", stdin=json.dumps(data))
    assert code == 2 and err.startswith("error: step.outside_bytes: missing")
