"""Trade-off plots (Python and `remat pareto --plot`) and the instances recorded from torch.compile."""

import json
import subprocess
import sys

import pytest

import remat
from conftest import ROOT
from remat.plot import plot_pareto

INSTANCES = sorted((ROOT / "examples" / "instances").glob("*.json"))
INSTANCE = {"memory": [2, 3, 2, 4, 1], "runtime": [1, 2, 1, 3, 2], "max_memory": 5}


@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_plot_pareto_writes_images(tmp_path, suffix, magic):
    front = remat.pareto(**{**INSTANCE, "max_memory": 12})
    path = plot_pareto(front, tmp_path / f"front{suffix}", budget=5)
    data = path.read_bytes()
    assert data.startswith(magic) and len(data) > 5000


def test_plotting_without_matplotlib_names_the_extra_that_installs_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as after a plain pip install .
    with pytest.raises(ImportError, match=r'pip install "\.\[plot\]"'):
        plot_pareto(remat.pareto(**INSTANCE), tmp_path / "front.png")
    install = (ROOT / "docs" / "install.md").read_text()
    assert 'pip install ".[plot]"' in install


def test_cli_plot_goes_through_the_package(run, tmp_path):
    image = tmp_path / "front.png"
    code, out, err = run("pareto", "--plot", str(image), "-", stdin=json.dumps(INSTANCE))
    assert code == 0, err
    assert json.loads(out)["plot"] == str(image)
    assert image.read_bytes().startswith(b"\x89PNG")


def test_cli_plot_takes_names_that_start_with_a_dash(run, tmp_path):
    # They reached `python -m remat` as options: an internal error, exit 1.
    (tmp_path / "-front.json").write_text(json.dumps(INSTANCE))
    image = tmp_path / "-front.png"
    code, out, err = run("pareto", "--plot", str(image), "--", str(tmp_path / "-front.json"))
    assert code == 0, err
    assert out.startswith('{"plot":' + json.dumps(str(image)) + ',"breakpoints":')
    assert image.read_bytes().startswith(b"\x89PNG")
    code, out, err = run("pareto", "--plot", "", "-", stdin=json.dumps(INSTANCE))
    assert code == 2 and out == "" and err.startswith("error: plot: needs a file name")


def test_cli_plot_validates_input_first(run, tmp_path):
    code, out, err = run("pareto", "--plot", str(tmp_path / "x.png"), "-", stdin='{"memory": [1]}')
    assert code == 2 and out == "" and err.startswith("error: runtime: missing")


def test_python_m_remat_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"memory": [1, -1], "runtime": [1, 1], "max_memory": 1}))
    done = subprocess.run(
        [sys.executable, "-m", "remat", "pareto", "--plot", str(tmp_path / "x.png"), str(bad)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: memory[1]: is negative")


def test_python_m_remat_version_matches_the_binary(run):
    done = subprocess.run(
        [sys.executable, "-m", "remat", "--version"], capture_output=True, text=True
    )
    code, out, _ = run("--version")
    assert done.returncode == 0 == code
    assert done.stdout.strip() == out.strip() == f"remat {remat.__version__}"


def test_recorded_instances_exist_for_every_model_kind():
    kinds = {path.name.split("_")[0] for path in INSTANCES}
    assert {"gpt", "resnet", "mixer"} <= kinds
    assert len(INSTANCES) >= 20


@pytest.mark.parametrize("path", INSTANCES, ids=lambda p: p.stem)
def test_recorded_instance_solves_exactly(path):
    data = json.loads(path.read_text())
    assert len(data["names"]) == len(data["memory"]) == len(data["runtime"])
    results = [
        remat.solve(data["memory"], data["runtime"], data["max_memory"], solver=s)
        for s in remat.SOLVERS
    ]
    exact = results[0]
    assert exact.status == "optimal"
    for other in results[1:3]:
        assert other.max_runtime == pytest.approx(exact.max_runtime, rel=1e-12)
    assert results[3].max_runtime <= exact.max_runtime * (1 + 1e-12)
    torch_knapsack = pytest.importorskip("torch._functorch._activation_checkpointing.knapsack")
    pytest.importorskip("scipy")
    ilp_value, _, _ = torch_knapsack.ilp_knapsack(
        data["memory"], data["runtime"], data["max_memory"]
    )
    assert exact.max_runtime == pytest.approx(ilp_value, rel=1e-4)
