import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def remat_bin() -> pathlib.Path:
    path = pathlib.Path(os.environ.get("REMAT_BIN", ROOT / "build" / "remat"))
    if not path.exists():
        pytest.fail(f"remat binary not found at {path}; build it first (see README)")
    return path


@pytest.fixture
def run(remat_bin):
    """Runs the CLI; returns (exit code, stdout, stderr)."""

    def _run(*args: str, stdin: str | bytes | None = None):
        data = stdin.encode() if isinstance(stdin, str) else stdin
        done = subprocess.run([str(remat_bin), *args], input=data, capture_output=True, timeout=120)
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    return _run
