"""remat.torch on a torch older than 2.11 (no CustomKnapsackSolver): eager checkpointing works,
remat.torch.use() says which torch it needs. Simulated in a child interpreter by removing the
class from torch before remat.torch is imported."""

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

OLD_TORCH = textwrap.dedent("""
    import torch
    import torch._functorch.partitioners  # torch's own import of the class happens first
    import torch._inductor.custom_graph_pass as custom_graph_pass

    del custom_graph_pass.CustomKnapsackSolver
    torch.__version__ = "2.10.0"

    import remat.torch
    from torch import nn

    assert remat.torch.CustomKnapsackSolver is None
    torch.manual_seed(0)
    layers = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(6)])
    x = torch.randn(32, 64, requires_grad=True)
    profile = remat.torch.profile_layers(list(layers), x)
    least = remat.torch.plan(list(layers), x, activation_budget=10**9, profile=profile, tune=False)
    budget = least.minimum_budget_bytes
    assert remat.torch.plan(list(layers), x, activation_budget=budget, profile=profile, tune=False).regions
    y = remat.torch.checkpoint_sequential(
        list(layers), x, activation_budget=budget, profile=profile, tune=False
    )
    y.sum().backward()
    expected = x.grad.clone()
    x.grad = None
    layers(x).sum().backward()
    assert torch.equal(x.grad, expected)
    for call in (lambda: remat.torch.use(), lambda: remat.torch.RematKnapsackSolver()):
        try:
            call()
        except RuntimeError as error:
            print(error)
        else:
            raise AssertionError("use() worked without CustomKnapsackSolver")
    """)


def test_old_torch_keeps_eager_checkpointing_and_names_the_version_use_needs():
    done = subprocess.run(
        [sys.executable, "-c", OLD_TORCH], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    for line in lines:
        assert line.startswith("remat.torch.use() needs torch >= 2.11")
        assert "this is torch 2.10.0" in line and "Eager checkpointing" in line


def test_current_torch_has_the_solver_api():
    import remat.torch

    assert remat.torch.CustomKnapsackSolver is not None
    assert isinstance(remat.torch.RematKnapsackSolver(), remat.torch.CustomKnapsackSolver)


class _ConfigWithoutOffloading:
    """torch._functorch.config as a torch before activation offloading had it."""

    def __init__(self, config):
        object.__setattr__(self, "_config", config)

    def __getattr__(self, name):
        if name in ("enable_activation_offloading", "activation_offload_separate_stream"):
            raise AttributeError(name)
        return getattr(self._config, name)

    def __setattr__(self, name, value):
        setattr(self._config, name, value)


def test_a_torch_without_activation_offloading_compiles_and_refuses_only_offload(monkeypatch):
    import torch._functorch.config as functorch_config

    import remat.compiled.solver as solver
    import remat.torch

    monkeypatch.setattr(solver, "functorch_config", _ConfigWithoutOffloading(functorch_config))
    before = functorch_config.activation_memory_budget
    with remat.torch.use(memory_budget="1GiB"):
        assert functorch_config.activation_memory_budget != before
    assert functorch_config.activation_memory_budget == before
    with pytest.raises(RuntimeError, match=r"offload=True.*enable_activation_offloading.*offload="):
        remat.torch.use(memory_budget="1GiB", offload=True)
    assert functorch_config.activation_memory_budget == before


def test_a_torch_that_does_not_report_its_save_hooks_names_what_needs_them(monkeypatch):
    # The first step hands each save on to its region's hooks, read through an API torch 2.8
    # added; before, auto_checkpoint failed there with an AttributeError.
    import torch
    from torch import nn

    import remat.saved_memory as saved_memory
    import remat.torch as rt

    monkeypatch.setattr(saved_memory, "_TOP_SAVE_HOOKS", None)
    model = nn.Module()
    model.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
    model.forward = lambda x: [x := layer(x) for layer in model.layers][-1]
    for call in (
        lambda: rt.auto_checkpoint(model, activation_budget="1GiB", blocks=list(model.layers)),
        lambda: rt.measure(model, torch.randn(2, 8), blocks=list(model.layers), verbose=False),
    ):
        with pytest.raises(
            RuntimeError, match=r"2.8 and newer\); this is torch .*checkpoint_sequential"
        ):
            call()
    chain = nn.Sequential(*(nn.Linear(8, 8) for _ in range(3)))
    handle = rt.auto_checkpoint(chain, activation_budget="1GiB")  # a chain: measured on its own
    chain(torch.randn(2, 8)).sum().backward()
    assert handle.plan is not None
