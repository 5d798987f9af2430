"""Loaded at the start of every docs code block that test_docs.py runs (it puts this folder on
PYTHONPATH): before the first import of torchvision (transformers imports it), the test
environment's torchvision wheel is made importable, as tests/python/zoo/torchvision_cpu.py says.
The blocks themselves run as written."""

from __future__ import annotations

import importlib.abc
import pathlib
import sys

_TESTS = pathlib.Path(__file__).resolve().parents[1]


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # noqa: ANN001, ANN201
        if name == "torchvision" and self in sys.meta_path:
            sys.meta_path.remove(self)
            sys.path.append(str(_TESTS))
            from zoo import torchvision_cpu  # noqa: F401  (installs the schemas on import)
        return None  # the normal finders import torchvision itself


sys.meta_path.insert(0, _BeforeTorchvision())
