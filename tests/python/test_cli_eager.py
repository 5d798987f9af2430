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
        out = eager_cli(run, str(PROFILE), "--budget", str(budget))
        assert out["peak_bytes"] <= budget
        ours = eager.plan_profile(profile, budget)
        assert [tuple(r) for r in out["regions"]] == list(ours.regions)
        assert out["recompute_time"] == pytest.approx(ours.predicted_recompute_seconds)
        assert out["runs"] == ours.runs()
    assert (
        eager_cli(run, str(PROFILE), "--budget", str(minimum["no_checkpoint_bytes"]))["regions"]
        == []
    )


def test_reads_standard_input(run):
    out = eager_cli(run, "-", "--budget", str(2**40), stdin=PROFILE.read_text())
    assert out["layers"] == 8 and out["recompute_time"] == 0


def test_budget_below_the_minimum_states_it(run):
    least = eager_cli(run, str(PROFILE))["minimum_budget"]
    code, out, err = run("eager", str(PROFILE), "--budget", str(least - 1))
    assert code == 2 and out == ""
    assert f"least peak any plan reaches, {least} bytes" in err
    # Named as the option is (the core names the Python argument, memory_budget).
    code, out, err = run("eager", str(PROFILE), "--budget", "1")
    assert err.startswith("error: budget: 1 byte is below the least peak any plan reaches")


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
    code, out, err = run("eager", "-", "--budget", "100000000", stdin=json.dumps(profile))
    assert code == 2 and out == ""
    assert message in err, err


def test_bad_options(run):
    code, _, err = run("eager", str(PROFILE), "--budget", "100000000", "--slots", "0")
    assert code == 2 and "slots" in err
    code, _, err = run("eager", "/nonexistent.json")
    assert code == 2 and "error:" in err
    code, _, err = run(
        "eager",
        str(PROFILE),
        "--budget",
        "100000000",
        "--slots",
        "100000000",
        "--max-planner-bytes",
        "1000",
    )
    assert code == 3 and "slots" in err


def test_a_chain_profile_is_named(run):
    chain_profile = ROOT / "examples" / "profiles" / "decoder_6x4.json"
    code, out, err = run("eager", str(chain_profile), "--budget", "30MB")
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
