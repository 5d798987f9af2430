import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def remat_bin() -> pathlib.Path:
    # ./dev test names the binary, so a missing one fails there; a run of the Python suite
    # alone (an installed package, a machine without the CLI's dependencies) skips these tests.
    named = os.environ.get("REMAT_BIN")
    path = pathlib.Path(named or ROOT / "build" / "remat")
    if not path.exists():
        if named:
            pytest.fail(f"remat binary not found at {path}; build it first (see README)")
        pytest.skip(f"no remat binary at {path} (set REMAT_BIN or run ./dev build)")
    return path


@pytest.fixture
def run(remat_bin):
    """Runs the CLI; returns (exit code, stdout, stderr)."""

    def _run(*args: str, stdin: str | bytes | None = None):
        data = stdin.encode() if isinstance(stdin, str) else stdin
        done = subprocess.run([str(remat_bin), *args], input=data, capture_output=True, timeout=120)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    return _run
