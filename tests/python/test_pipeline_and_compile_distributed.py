"""A 2-stage pipeline under 1F1B planned to fit each stage over the microbatches in flight, and
remat.torch.use() giving every rank of DDP the same torch.compile plan (ratio and byte budgets)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.distributed as dist
from torch import nn

from process_group import Net, _finish, _init, _spawn, _write


def _pipeline_worker(rank, world, store, out, microbatches):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B

    import remat.torch as rt

    _init(rank, world, store)
    torch.manual_seed(0)
    full = Net(depth=8)
    x = torch.randn(4 * microbatches, 32)
    stage_module = nn.Module()
    stage_module.layers = nn.ModuleList(full.layers[4 * rank : 4 * rank + 4])
    stage_module.forward = types_forward(stage_module)
    reference = copy.deepcopy(stage_module)
    reference.forward = types_forward(reference)
    m = rt.measure(
        copy.deepcopy(stage_module),
        _stage_input(full, x[:4], rank),
        verbose=False,
        plan_group="local",
    )
    per_microbatch = (
        m.least_activation_budget_bytes
        + (m.no_checkpoint_bytes - m.least_activation_budget_bytes) // 4
    )
    budget = microbatches * per_microbatch
    handle = rt.auto_checkpoint(
        stage_module,
        activation_budget=budget,
        microbatches_in_flight=microbatches,
        plan_group="local",  # each stage plans its own layers
    )
    results = {}
    for name, module in (("plain", reference), ("remat", stage_module)):
        stage = PipelineStage(module, rank, world, torch.device("cpu"))
        schedule = Schedule1F1B(stage, microbatches, loss_fn=lambda out, target: out.pow(2).mean())
        module.zero_grad()
        with rt.SavedTensorMeter(module) as meter:
            if rank == 0:
                schedule.step(x)
            else:
                schedule.step(target=torch.zeros(4 * microbatches, 32), losses=[])
        results[name] = ([p.grad.clone() for p in module.parameters()], meter.peak_bytes)
    equal = all(torch.equal(a, b) for a, b in zip(results["plain"][0], results["remat"][0]))
    _write(
        out,
        rank,
        {
            "grads_equal": equal,
            "peak": results["remat"][1],
            "plain_peak": results["plain"][1],
            "budget": budget,
            "stage_peak": handle.plan.predicted_stage_peak_bytes,
            "regions": len(handle.plan.regions),
        },
    )
    _finish()


def types_forward(module):
    import types

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x

    return types.MethodType(forward, module)


def _stage_input(full, x, rank):
    with torch.no_grad():
        for layer in full.layers[: 4 * rank]:
            x = x + layer(x)
    return x


def test_pipeline_stages_fit_their_budget_over_microbatches_in_flight(tmp_path):
    results = _spawn(_pipeline_worker, 2, tmp_path, 4)
    for r in results:
        assert r["grads_equal"]
        assert r["peak"] <= r["stage_peak"] <= r["budget"], r
        assert r["regions"] > 0


def _counting_agreements() -> list[str]:
    """What this rank agrees on with the others from now on, one entry per collective."""
    from remat import _distributed as distributed

    agreed, gather = [], distributed.all_gather

    def counting(value, what, group=None):
        agreed.append(what)
        return gather(value, what, group)

    distributed.all_gather = counting
    return agreed


def _compile_worker(rank, world, store, out, estimator):
    import torch._functorch.config as functorch_config
    from torch._inductor.custom_graph_pass import CustomRuntimeEstimator

    import remat.torch as rt

    class RankRuntimes(CustomRuntimeEstimator):
        """A measuring estimator as two ranks would see it: rank r measures 1 + 2 r."""

        def __call__(self, node):
            return 1.0 + 2.0 * dist.get_rank()

        def uuid(self):
            return None

    _init(rank, world, store)
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(Net(depth=3))
    x = torch.randn(8, 32) + rank
    torch._dynamo.reset()
    agreed = _counting_agreements()
    runtime_estimator = RankRuntimes() if estimator == "measuring" else estimator
    with (
        rt.use() as solver,
        functorch_config.patch(
            activation_memory_budget=0.4,
            activation_memory_budget_runtime_estimator=runtime_estimator,
        ),
    ):
        compiled = torch.compile(model, backend="aot_eager")
        compiled(x).pow(2).mean().backward()
    saved = list(solver.last_result.saved)
    _write(out, rank, {"saved": saved, "runtimes": solver.last_runtimes, "agreed": agreed})
    _finish()


@pytest.mark.parametrize("estimator", ["flops", "measuring"])
def test_use_under_ddp_gives_every_rank_the_same_plan(tmp_path, estimator):
    """Each graph's runtimes are agreed on (a measuring estimator differs between ranks: every
    rank solves with the medians) and its plan is checked: two collectives per graph."""
    results = _spawn(_compile_worker, 2, tmp_path, estimator)
    assert results[0]["saved"] == results[1]["saved"]
    for r in results:
        assert r["agreed"] == [
            "torch.compile's knapsack runtimes",
            "the torch.compile knapsack plan's checksum",
        ]
    if estimator == "measuring":
        assert all(r["runtimes"] == [2.0] * len(r["runtimes"]) and r["runtimes"] for r in results)


def _dispatcher_worker(rank, world, store, out, calls):
    from remat import _distributed as distributed

    _init(rank, world, store)
    with torch._C._EnablePythonDispatcher():  # as in torch.compile's partitioner
        for call in range(calls):
            distributed.verify_same_plan([(call,)], what="plan")
            distributed.step_inputs(call, True)
    _write(out, rank, {"calls": calls})
    _finish()


def test_agreements_under_the_python_dispatcher_never_deadlock_gloo(tmp_path):
    """Under the Python dispatcher (torch.compile's partitioner, which calls remat) a gloo
    collective was queued with the GIL held while gloo's worker thread, freeing the last
    collective's tensors, held the queue's lock and waited for the GIL: ranks compiling under DDP
    hung (CI, twice in a row). Without the dispatcher turned off around them, these calls
    deadlock within the first few."""
    results = _spawn(_dispatcher_worker, 2, tmp_path, 300, seconds=60)
    assert [r["calls"] for r in results] == [300, 300]


def _compile_bytes_worker(rank, world, store, out):

    import remat.torch as rt

    _init(rank, world, store)
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(Net(depth=3))
    x = torch.randn(8, 32) + rank
    torch._dynamo.reset()
    with warnings.catch_warnings(), rt.use(memory_budget="64MiB") as solver:
        warnings.simplefilter("ignore")  # DDP's bucketing may split the graph
        compiled = torch.compile(model, backend="aot_eager")
        compiled(x).pow(2).mean().backward()
    plans = [
        [sorted(c.chosen.recomputed), c.chosen.peak.peak, len(c.candidates)] for c in solver.choices
    ]
    _write(out, rank, {"plans": plans})
    _finish()


def test_byte_budget_under_ddp_gives_every_rank_the_same_plan_and_prediction(tmp_path):
    """Predictions come from the graph's shapes and the runtimes every rank agrees on (torch's
    flop counts by default), so each rank picks the same plan with the same predicted peak."""
    results = _spawn(_compile_bytes_worker, 2, tmp_path)
    assert results[0]["plans"] and results[0]["plans"] == results[1]["plans"]
