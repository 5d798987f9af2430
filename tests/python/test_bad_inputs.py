"""The bad-input corpus (tests/bad_inputs/) through the CLI and the Python API.

Each file gives its specific error: one `error:` line, exit code 2 and nothing on stdout from the
CLI; ValueError or TypeError from remat.solve() where the file is JSON Python can read.
"""

import json
import math

import pytest

import remat
from conftest import ROOT

CORPUS = ROOT / "tests" / "bad_inputs"

# file -> the message the CLI prints after "error: " (a prefix of it)
EXPECTED = {
    "malformed.json": "input: malformed JSON: parse error at line 1, column 18: syntax error",
    "truncated.json": "input: malformed JSON: parse error at line 1, column 17: syntax error",
    "memory_is_a_string.json": "memory: expected an array, got a string",
    "runtime_has_an_object.json": "runtime[1]: expected a number, got an object",
    "nan.json": "input: malformed JSON",
    "infinity.json": "input: malformed JSON",
    "exponent_overflow.json": "input: malformed JSON: number overflow parsing '1e999'",
    "negative_memory.json": "memory[1]: is negative (-2)",
    "negative_budget.json": "max_memory: is negative (-2)",
    "overflow_after_scaling.json": "memory[1]: 1e+300 times scale 10000 does not fit",
    "weight_sum_overflow.json": "memory[1]: the sum of quantized memory overflows a 64-bit integer",
    "mismatched_lengths.json": "runtime: has 2 entries but memory has 3",
    "empty.json": "input: malformed JSON",
    "empty_object.json": "memory: missing",
    "budget_is_a_boolean.json": "max_memory: expected a number, got a boolean",
    "invalid_utf8.json": "input: malformed JSON: parse error at line 1, column 61: syntax error while parsing value - invalid string: ill-formed UTF-8 byte; last read: '\"\\xff'",
    "two_documents.json": "input: malformed JSON",
}


def test_every_corpus_file_has_an_expectation():
    files = {path.name for path in CORPUS.iterdir()}
    assert files == set(EXPECTED) | {"negative_zero_is_zero.json"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cli_rejects_with_its_specific_error(run, name):
    code, out, err = run("solve", str(CORPUS / name))
    assert code == 2, err
    assert out == ""
    assert err.startswith("error: " + EXPECTED[name]), err
    assert err.count("\n") == 1


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_python_api_rejects_what_it_can_read(name):
    try:
        data = json.loads((CORPUS / name).read_bytes())
        memory, runtime, budget = data["memory"], data["runtime"], data["max_memory"]
    except (ValueError, KeyError, UnicodeDecodeError):
        pytest.skip("not an instance Python's json module can read")
    with pytest.raises((ValueError, TypeError)) as caught:
        remat.solve(memory, runtime, budget)
    cli_message = EXPECTED[name]
    if not cli_message.startswith("input:"):
        assert str(caught.value).startswith(cli_message)
    else:  # Python's json reads NaN/Infinity/1e999 that JSON forbids; the API names the index
        assert any(math.isinf(v) or math.isnan(v) for v in memory + runtime if isinstance(v, float))
        assert "is NaN" in str(caught.value) or "is infinite" in str(caught.value)


def test_negative_zero_is_zero(run):
    code, out, err = run("solve", str(CORPUS / "negative_zero_is_zero.json"))
    assert code == 0, err
    result = json.loads(out)
    assert result["saved"] == [0] and result["quantized_max_memory"] == 0


def test_deeply_nested_json_is_an_error_not_a_crash(run):
    depth = 200_000
    code, out, err = run("solve", "-", stdin="[" * depth + "]" * depth)
    assert code == 2 and out == ""
    assert err.startswith("error: input: expected a JSON object, got an array")
    code, out, err = run("solve", "-", stdin='{"memory": ' + "[" * depth)
    assert code == 2 and out == "" and "malformed JSON" in err


def test_a_million_items_name_the_bad_index(run):
    n = 1_000_000
    memory = [1e-4] * n
    memory[-1] = -1
    text = json.dumps({"memory": memory, "runtime": [1.0] * n, "max_memory": 10.0})
    code, out, err = run("solve", "-", stdin=text)
    assert code == 2 and out == ""
    assert err.startswith("error: memory[999999]: is negative")
    with pytest.raises(ValueError, match=r"memory\[999999\]: is negative"):
        remat.solve(memory, [1.0] * n, 10.0)


def test_a_million_valid_items_solve_quickly(run):
    n = 1_000_000
    text = json.dumps(
        {
            "memory": [1e-4 * (1 + i % 7) for i in range(n)],
            "runtime": [float(1 + (i * 7919) % 1000) for i in range(n)],
            "max_memory": 50.0,
        }
    )
    code, out, err = run("solve", "-", stdin=text)
    assert code == 0, err
    result = json.loads(out)
    assert result["status"] == "optimal" and result["quantized_memory_used"] <= 500000
