"""Byte counts on the command line read exactly as the Python package reads memory budgets."""

import json

import pytest

from conftest import ROOT
from remat.units import parse_bytes

# An eager profile (with a step of no bytes) whose every plan fits any budget, so
# `remat eager --budget TEXT` echoes the bytes it read.
ZERO_PROFILE = {
    "input_bytes": 0,
    "layers": [{"name": "a", "saved_bytes": 0, "output_bytes": 0, "forward_time": 0.0}],
    "step": {"start_bytes": 0, "outside_bytes": 0, "parts": []},
}

TABLE = [
    # read
    "0",
    "1",
    "2147483648",
    "30MB",
    "30 MB",
    "30mb",
    "30Mb",
    "1.5GiB",
    "1.5 gib",
    ".5KB",
    "2e3",
    "2E3kb",
    "1e-400",
    "  7 KiB ",
    "\t7KiB\n",
    "7b",
    "7B",
    "1.9999999",
    "0.0001KB",
    "1TB",
    "3TiB",
    "4096TiB",
    "5\u00a0MB",
    "\u20035MB\u3000",
    "1.5e+2MiB",
    # Read as the decimals they are: through a double, 1.005 KB and 0.29 MB fell a byte short.
    "1.005KB",
    "0.29MB",
    "4.35GB",
    "00012.50KB",
    "1" + "0" * 30 + "e-30",
    "0.000000000000001TiB",
    "1e-999999999",
    "9.999999999999999999999TiB",
    "4611686018427387903",  # 2^62 - 1, the largest
    # refused
    "",
    " ",
    "MB",
    "-5",
    "+5",
    "5.",
    "1e",
    "1e+",
    "1.2.3",
    "30 XB",
    "30M B",
    "inf",
    "nan",
    "1e999",
    "5e18",
    "4.2TB s",
    "1,5GB",
    "0x10",
    "5 KiBs",
    "1_000",
    "4611686018427387904",  # 2^62
    "1e999999999",
    "it's",
    'say "5"',
    "5\x01MB",
]


def write(tmp_path, data):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("text", TABLE, ids=repr)
def test_cli_and_python_agree(run, tmp_path, text):
    try:
        expected, error = parse_bytes(text, "budget"), None
    except ValueError as caught:
        expected, error = None, str(caught)
    code, out, err = run("eager", write(tmp_path, ZERO_PROFILE), "--budget", text)
    if error is None:
        assert code == 0, err
        assert json.loads(out)["budget"] == expected
    else:
        assert (code, out) == (2, "")
        assert err == f"error: {error}\n"


def test_the_table_has_both_outcomes():
    outcomes = set()
    for text in TABLE:
        try:
            parse_bytes(text, "budget")
            outcomes.add("read")
        except ValueError as error:
            outcomes.add(str(error).split(" ")[1] if "cannot read" in str(error) else "range")
    assert outcomes == {"read", "cannot", "range"}


def test_eager_budget_takes_units(run):
    profile = str(ROOT / "examples" / "profiles" / "gpt_d8_w192_eager.json")
    code, out, err = run("eager", profile, "--activation-budget", "30MB")
    assert code == 0, err
    plain = run("eager", profile, "--activation-budget", "30000000")[1]
    assert {**json.loads(out), "seconds": 0} == {**json.loads(plain), "seconds": 0}


def test_chain_budget_takes_units(run):
    profile = str(ROOT / "examples" / "profiles" / "decoder_6x4.json")
    code, out, err = run("chain", "--profile", profile, "--budget", "0.2 GB")
    assert code == 0, err
    result = json.loads(out)
    assert result["budget"] == 200_000_000 and result["memory_bytes"] <= 200_000_000
    code, out, err = run("chain", "--profile", profile, "--budget", "200 XB")
    assert (code, out) == (2, "") and err.startswith("error: budget: cannot read '200 XB' as bytes")


def test_max_planner_bytes_takes_units(run):
    _, instance, _ = run("generate", "--family", "paper_scale", "--n", "100", "--seed", "1")
    code, out, err = run(
        "solve", "--solver", "dp", "--max-planner-bytes", "100MB", "-", stdin=instance
    )
    assert code == 3 and out == "" and "over the cap of 100000000 bytes" in err
    code, out, err = run("solve", "--max-planner-bytes", "1GiB", "-", stdin=instance)
    assert code == 0, err
    code, out, err = run("solve", "--max-planner-bytes", "lots", "-", stdin=instance)
    assert (code, out) == (2, "") and err.startswith("error: max_planner_bytes: cannot read 'lots'")
    profile = str(ROOT / "examples" / "profiles" / "gpt_d8_w192_eager.json")
    code, out, err = run(
        "eager", profile, "--activation-budget", "60MiB", "--max-planner-bytes", "1KiB"
    )
    assert code == 3 and "over the cap of 1024" in err
