"""The public API: what remat.torch lists is what users call, and the reference documents it at
the paths users import it from."""

import importlib
import subprocess
import sys

import pytest

from conftest import ROOT

API = (ROOT / "docs" / "api.md").read_text()


@pytest.mark.parametrize(
    "module, most", [("remat.torch", 17), ("remat.eager", 14), ("remat.compiled", 8)]
)
def test_the_public_lists_are_short_and_resolve(module, most):
    found = importlib.import_module(module)
    assert len(found.__all__) <= most, found.__all__
    for name in found.__all__:
        assert getattr(found, name) is not None, name


def test_the_reference_documents_every_public_name_at_its_public_path():
    import remat.torch

    for name in remat.torch.__all__:
        assert f"::: remat.torch.{name}\n" in API, name
    # Internal layout stays out of the reference.
    assert "remat.eager.run." not in API and "remat.compiled.solver" not in API


def test_internal_names_stay_reachable_outside_the_list():
    import remat.compiled
    import remat.torch

    assert "find_blocks" not in remat.torch.__all__ and remat.torch.find_blocks
    assert "ROUTE_TO_SOLVER" not in remat.compiled.__all__ and remat.compiled.ROUTE_TO_SOLVER


def test_import_remat_torch_reaches_the_integrations():
    # It once failed: AttributeError: module 'remat' has no attribute 'integrations'.
    code = "import remat.torch, remat; print(remat.integrations.transformers.enable.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "enable"
