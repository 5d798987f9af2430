"""Rules on the C++ sources that no compiler checks.

The core and the binding must not touch iostreams or locales: with a statically linked libstdc++
(GCC 13 on the GPU image) stream formatting inside the extension module crashed the interpreter on
every error path. Only the CLI (an executable, src/cli/) and the JSON edge it links (src/io/, never
part of the Python module) may use them."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FORBIDDEN = re.compile(
    r"#\s*include\s*<(sstream|iostream|iomanip|fstream|ostream|istream|locale)>"
    r"|std::(locale|[io]?stringstream|ostream|istream|cout|cerr|clog|put_money|imbue)\b"
)


def checked_sources() -> list[pathlib.Path]:
    files = [ROOT / "python" / "remat" / "_core.cpp"]
    for folder in ("src", "include"):
        files += [
            p
            for p in (ROOT / folder).rglob("*")
            if p.suffix in {".cpp", ".hpp", ".h", ".inc"} and p.parts[-2] not in {"cli", "io"}
        ]
    return sorted(files)


def test_the_rule_sees_the_sources():
    names = {p.name for p in checked_sources()}
    assert {"_core.cpp", "problem.cpp", "eager_planner.cpp", "errors.hpp"} <= names


@pytest.mark.parametrize("path", checked_sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_iostreams_or_locales(path):
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FORBIDDEN.search(line)
    ]
    assert not hits, "iostreams/locales in the core or the binding:\n" + "\n".join(hits)


def test_the_rule_catches_a_stream():
    assert FORBIDDEN.search("#include <sstream>")
    assert FORBIDDEN.search("  std::ostringstream out;")
    assert not FORBIDDEN.search('#include "common/text.hpp"')
