"""What a new user met first, following the docs: each call here failed with an error that did
not say what to do, or printed what the guide then printed again."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

import remat.torch as rt


def test_a_budget_given_as_the_solver_says_where_a_budget_goes():
    pytest.importorskip("torch._inductor.custom_graph_pass")
    if rt.CustomKnapsackSolver is None:
        pytest.skip("use() needs torch 2.11")
    with pytest.raises(ValueError, match=r"unknown solver '8MiB'.*write memory_budget='8MiB'"):
        rt.use("8MiB")
    with pytest.raises(ValueError, match=r"unknown solver 'ilp' \(expected one of [^)]*\)$"):
        rt.use("ilp")


def test_a_function_is_refused_as_a_model_by_type():
    with pytest.raises(TypeError, match="model: expected an nn.Module .* got function"):
        rt.auto_checkpoint(lambda t: t, activation_budget="1GiB")
    with pytest.raises(TypeError, match="got function"):
        rt.measure(lambda t: t, torch.ones(2))


def test_the_integrations_are_reachable_after_import_remat_torch_alone():
    code = (
        "import sys, remat.torch\n"
        "assert callable(remat.integrations.transformers.enable)\n"
        "assert callable(remat.integrations.timm.enable)\n"
        "assert 'transformers' not in sys.modules and 'timm' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_measure_prints_only_when_asked(capsys):
    model = nn.Sequential(*(nn.Sequential(nn.Linear(8, 8), nn.GELU()) for _ in range(3)))
    measured = rt.measure(model, torch.randn(4, 8))
    assert capsys.readouterr().out == ""
    print(measured)  # as the guide does: the table once
    printed = capsys.readouterr().out
    assert printed.count("remat.measure:") == 1
    assert "offload" not in printed  # on the CPU, offload="auto" offloads nothing


def test_blocks_called_outside_forward_warn_once_for_the_whole_call():
    import warnings

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(4))

        def forward(self, x):
            return self.encode(x)

        def encode(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    model = Model()
    handle = rt.auto_checkpoint(model, activation_budget="1GiB")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.encode(torch.randn(2, 8)).sum().backward()  # 4 blocks outside the model's call
        model.encode(torch.randn(2, 8)).sum().backward()
    messages = [str(w.message) for w in caught if "remat" in str(w.message)]
    assert len(messages) == 1 and "layers.0 was called while" in messages[0], messages
    assert len(handle.warnings) == 1
    # Attributed to the user's line that called the block, not to torch's module call.
    assert [w.filename for w in caught if "remat" in str(w.message)] == [__file__]


def test_measure_drops_a_default_cache_quietly_and_auto_checkpoint_names_the_calling_code():
    import warnings

    pytest.importorskip("transformers")
    from zoo import torchvision_cpu  # noqa: F401
    from zoo.models import ZOO

    zoo = ZOO["gpt2"]  # use_cache at its default: its blocks get a cache
    model = zoo.build("sdpa")
    args, kwargs = zoo.batch()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rt.measure(model, *args, **kwargs, loss_fn=zoo.loss)
        assert not [w for w in caught if "remat" in str(w.message)]
        rt.auto_checkpoint(model, activation_budget="1GiB", blocks=list(model.transformer.h))
        zoo.loss(model(*args, **kwargs)).backward()
    ours = [w for w in caught if "remat" in str(w.message)]
    assert len(ours) == 1 and str(ours[0].message).startswith("remat.auto_checkpoint: GPT2Block")
    # At the code that called the block (GPT-2's model loop), not at torch's module call.
    assert ours[0].filename.endswith("modeling_gpt2.py"), ours[0].filename
