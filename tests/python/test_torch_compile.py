"""End to end: torch.compile (forward and backward, CPU) with remat as the memory-budget solver.

Gradients match eager, the runtimes remat computes equal the ones torch builds for its own
solvers, and the plan's objective equals what torch's ilp solver reaches on the same instance.
"""

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("scipy")

import torch._functorch.config as functorch_config  # noqa: E402
from torch import nn  # noqa: E402
from torch._functorch import partitioners  # noqa: E402
from torch._functorch._activation_checkpointing import knapsack as torch_knapsack  # noqa: E402

import remat.torch  # noqa: E402


class Block(nn.Module):
    """A pre-norm transformer block."""

    def __init__(self, width=64, heads=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


def mlp():
    return nn.Sequential(
        nn.Linear(64, 256),
        nn.GELU(),
        nn.Linear(256, 256),
        nn.Tanh(),
        nn.Linear(256, 256),
        nn.GELU(),
        nn.Linear(256, 64),
    )


MODELS = {"mlp": (mlp, (32, 64)), "transformer_block": (Block, (4, 16, 64))}


@pytest.fixture
def torch_instances(monkeypatch):
    """Records what torch hands the solver: (memory, runtimes, max_memory) per call."""
    calls = []
    original = partitioners._optimize_runtime_with_given_memory

    def spy(joint_graph, memory, runtimes, max_memory, node_info, nodes):
        calls.append((list(memory), list(runtimes), max_memory))
        return original(joint_graph, memory, runtimes, max_memory, node_info, nodes)

    monkeypatch.setattr(partitioners, "_optimize_runtime_with_given_memory", spy)
    return calls


@pytest.mark.parametrize("budget", [0.1, 0.3, 0.5, 0.8])
@pytest.mark.parametrize("model_name", MODELS)
def test_compile_with_remat_solver(model_name, budget, torch_instances):
    make, shape = MODELS[model_name]
    torch.manual_seed(0)
    model = make()
    reference = copy.deepcopy(model)
    x = torch.randn(*shape)

    torch._dynamo.reset()
    with (
        remat.torch.use("exact") as solver,
        functorch_config.patch(activation_memory_budget=budget, enable_autograd_cache=False),
    ):
        compiled = torch.compile(model, backend="aot_eager")
        compiled(x).square().mean().backward()
    assert functorch_config.activation_memory_budget_solver != solver  # restored on exit

    reference(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)

    if solver.last_result is None:
        # torch found a plan within budget before it needed a knapsack (it says so by not asking).
        assert not torch_instances and budget >= 0.5
        return
    print(
        f"{model_name} budget {budget}: {len(solver.last_runtimes)} candidates, saved {solver.last_result.saved}"
    )
    memory, runtimes, max_memory = torch_instances[-1]
    assert solver.last_runtimes == [float(r) for r in runtimes]  # torch's own estimates
    ours = solver.last_result
    assert ours.status == "optimal"
    ilp_value, _, _ = torch_knapsack.ilp_knapsack(memory, runtimes, max_memory)
    assert ours.max_runtime == pytest.approx(ilp_value, rel=1e-4)


def test_use_as_a_plain_call_and_restore():
    previous = functorch_config.activation_memory_budget_solver
    handle = remat.torch.use("greedy")
    try:
        assert isinstance(
            functorch_config.activation_memory_budget_solver, remat.torch.RematKnapsackSolver
        )
        assert (
            functorch_config.activation_memory_budget_solver.uuid()
            == remat.torch.RematKnapsackSolver("greedy").uuid()
        )
        assert (
            remat.torch.RematKnapsackSolver("exact").uuid()
            != remat.torch.RematKnapsackSolver("greedy").uuid()
        )
    finally:
        handle.__exit__(None, None, None)
    assert functorch_config.activation_memory_budget_solver == previous
    with pytest.raises(ValueError, match="unknown solver"):
        remat.torch.use("magic")


def test_default_inductor_backend(torch_instances):
    """One case through the default backend (inductor compiles C++ kernels on the CPU: ~20 s)."""
    torch.manual_seed(0)
    model = Block()
    reference = copy.deepcopy(model)
    x = torch.randn(4, 16, 64)
    torch._dynamo.reset()
    # A warm AOTAutograd / FX-graph cache (remat's uuid() makes entries reusable) would skip the
    # partitioner entirely; this test is about the partitioner, so it compiles cold.
    with (
        remat.torch.use("exact") as solver,
        functorch_config.patch(activation_memory_budget=0.3, enable_autograd_cache=False),
        torch._inductor.config.patch(fx_graph_cache=False),
    ):
        torch.compile(model)(x).square().mean().backward()
    reference(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert solver.last_result is not None and solver.last_result.status == "optimal"
    memory, runtimes, max_memory = torch_instances[-1]
    assert solver.last_runtimes == [float(r) for r in runtimes]
    ilp_value, _, _ = torch_knapsack.ilp_knapsack(memory, runtimes, max_memory)
    assert solver.last_result.max_runtime == pytest.approx(ilp_value, rel=1e-4)


def test_uuid_lets_the_aot_autograd_cache_reuse_the_plan(tmp_path, monkeypatch):
    """With remat's solver installed, a second compile of the same graph is served from the
    AOTAutograd cache (a raw callable solver would bypass the cache)."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # a cold cache
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 16, 64)
    counters = torch._dynamo.utils.counters
    counters.clear()
    with (
        remat.torch.use("exact") as solver,
        functorch_config.patch(activation_memory_budget=0.3, enable_autograd_cache=True),
        torch._inductor.config.patch(fx_graph_cache=True, force_disable_caches=False),
    ):
        torch._dynamo.reset()
        torch.compile(model)(x).square().mean().backward()
        assert solver.last_result is not None  # cold: the partitioner asked remat
        solver.last_result = None
        torch._dynamo.reset()
        torch.compile(model)(x).square().mean().backward()
        assert solver.last_result is None  # warm: served from the cache, no new plan
    assert counters["aot_autograd"]["autograd_cache_hit"] >= 1
