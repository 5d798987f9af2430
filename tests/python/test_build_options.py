"""REMAT_BUILD_CLI=AUTO (what pip install . and the wheel use): the remat tool is built when
nlohmann-json and CLI11 are found, and without either the package still configures, without the
tool, and CMake says so. Configure-only runs in a scratch folder (a few seconds each)."""

import shutil
import subprocess

import pytest

from conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake")
WARNING = "building without the remat command-line tool"


def configure(folder, *defines):
    done = subprocess.run(
        ["cmake", "-S", str(ROOT), "-B", str(folder), "-DREMAT_BUILD_CLI=AUTO"]
        + ["-DREMAT_BUILD_TESTS=OFF", *defines],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr, (folder / "CMakeFiles" / "remat.dir").is_dir()


@pytest.mark.parametrize("missing", ["CLI11", "nlohmann_json"])
def test_without_a_dependency_the_package_configures_without_the_tool(tmp_path, missing):
    said, has_tool = configure(tmp_path, f"-DCMAKE_DISABLE_FIND_PACKAGE_{missing}=ON")
    assert WARNING in " ".join(said.split())
    assert not has_tool
    assert (tmp_path / "CMakeFiles" / "remat_core.dir").is_dir()


def test_with_both_the_tool_is_built(tmp_path):
    said, has_tool = configure(tmp_path)
    if WARNING in " ".join(said.split()):
        pytest.skip("nlohmann-json or CLI11 is not installed here")
    assert has_tool
