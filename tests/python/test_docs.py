"""Every Python and shell block in the README and docs/ runs as written, and every relative link
names a file that exists.

A block is skipped only under a `<!-- docs-test: skip (reason) -->` line, and the reason must be
given (installing into the environment, or running this very suite). Python blocks run as a
script in a fresh interpreter in a temporary folder, where a warning from remat is an error. In shell blocks, lines that start with `$ `
are the commands and the others their output (shown, not compared); a block without `$ ` lines
is all commands. They run with bash from the repository root, with the remat tool under test
first on PATH.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SKIP = re.compile(r"<!-- docs-test: skip \((?P<reason>[^)]+)\) -->")
FENCE = re.compile(r"^```(?P<lang>[a-z]*)\s*$")
LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")
RUN = {"python", "sh", "bash", "console"}


@dataclasses.dataclass(frozen=True)
class Block:
    path: pathlib.Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None  # the reason, when skipped

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def documents() -> list[pathlib.Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def blocks_of(path: pathlib.Path) -> list[Block]:
    lines = path.read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next(k for k in range(index + 1, len(lines)) if lines[k].startswith("```"))
        before = next((lines[k] for k in range(index - 1, -1, -1) if lines[k].strip()), "")
        skip = SKIP.search(before)
        code = "\n".join(lines[index + 1 : end]) + "\n"
        found.append(Block(path, index + 1, opening["lang"], code, skip and skip["reason"]))
        index = end + 1
    return found


def runnable() -> list[Block]:
    return [b for path in documents() for b in blocks_of(path) if b.lang in RUN]


def shell_commands(code: str) -> str:
    lines = code.splitlines()
    if any(line.startswith("$ ") for line in lines):
        lines = [line[2:] for line in lines if line.startswith("$ ")]
    return "\n".join(lines) + "\n"


def _environment(remat_bin: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ, MPLBACKEND="Agg")
    # This test environment's torchvision wheel needs a shim before transformers imports it.
    site = str(pathlib.Path(__file__).parent / "docs_site")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH")]))
    env["PATH"] = f"{remat_bin.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.parametrize("block", runnable(), ids=lambda b: b.name)
def test_block_runs_as_written(block, remat_bin, tmp_path):
    if block.skip:
        pytest.skip(block.skip)
    env = _environment(remat_bin)
    if block.lang == "python":
        # A remat warning in an example is a failure: the examples show uses that need none.
        command, cwd = [sys.executable, "-W", "error:remat", "-c", block.code], tmp_path
    else:
        command = ["bash", "-e", "-o", "pipefail", "-c", shell_commands(block.code)]
        cwd = ROOT
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"{block.name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )


def test_skips_are_few_and_give_a_reason():
    skipped = [b for b in runnable() if b.skip]
    assert all(b.skip.strip() for b in skipped)
    assert len(skipped) <= 3, [b.name for b in skipped]


def test_the_blocks_are_found():
    names = {b.path.name for b in runnable()}
    assert {"README.md", "eager.md", "compile.md", "cli.md"} <= names
    langs = {b.lang for b in runnable()}
    assert {"python", "sh"} <= langs


def test_shell_output_lines_are_not_run():
    assert shell_commands("$ remat demo\n{json}\n$ ls\n") == "remat demo\nls\n"
    assert shell_commands("remat --version\n") == "remat --version\n"


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_name_files_that_exist(path):
    broken = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        for match in LINK.finditer(line):
            target = match["target"].split("#", 1)[0]
            if not target or re.match(r"[a-z]+:", target):
                continue  # an anchor in this page, or a URL
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)}:{number}: {match['target']}")
    assert not broken, "links to missing files:\n" + "\n".join(broken)
