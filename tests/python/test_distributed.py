"""Distributed training on CPU with gloo (torch.multiprocessing spawn): one plan for every rank.

DDP and FSDP2 with auto_checkpoint at world sizes 2 and 4 train exactly as without it, with one
plan on all ranks even when a rank is made slow while it measures; a plan that differs or a rank
that never arrives is an error naming the ranks, not a hang; a 2-stage pipeline under 1F1B is
planned so that each stage fits its budget over the microbatches in flight; remat.torch.use()
gives every rank the same torch.compile plan."""

from __future__ import annotations

import copy
import faulthandler
import json
import os
import pathlib
import signal
import time
import warnings

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.slow = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.slow:
            time.sleep(self.slow)
        return self.down(torch.tanh(self.up(self.norm(x))))


class Net(nn.Module):
    def __init__(self, depth: int = 6, width: int = 32) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + layer(x)
        return x


def _init(rank: int, world: int, store: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)


def _budget(model: nn.Module, x: torch.Tensor) -> int:
    import remat.torch as rt

    m = rt.measure(copy.deepcopy(model), x, verbose=False, plan_group="local")
    return (
        m.least_activation_budget_bytes
        + (m.no_checkpoint_bytes - m.least_activation_budget_bytes) // 3
    )


def _write(out: str, rank: int, payload: dict) -> None:
    pathlib.Path(out, f"rank{rank}.json").write_text(json.dumps(payload))


def _finish() -> None:
    """Ends a worker without running destructors: torch 2.13's ProcessGroupGloo destructor,
    reached from DDP's Reducer at teardown, can join a gloo thread that waits for the GIL the
    joining thread holds (seen once in world size 4: a hang, not a failure). The results are
    already written."""
    dist.barrier()
    os._exit(0)


def _read(out: pathlib.Path, world: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(world)]


def _traced(rank, worker, world, store, out, *args):
    """Runs one rank with SIGUSR1 bound to a dump of every thread's Python stack, so that a run
    that hangs says where."""
    with open(pathlib.Path(out, f"stacks{rank}.txt"), "w") as stacks:
        faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
        worker(rank, world, store, out, *args)


def _stacks(out: pathlib.Path, rank: int) -> str:
    path = out / f"stacks{rank}.txt"
    text = path.read_text() if path.exists() else "(none: the rank had not started its worker)"
    return f"rank {rank}:\n{text}"


def _innermost(stacks: str, frames: int = 8) -> str:
    """Each rank's threads cut to their innermost `frames` frames: CI keeps the head and the tail
    of a failure's text, and a full dump of two ranks loses the frames that say where each waits."""
    kept, depth = [], 0
    for line in stacks.splitlines():
        if line.startswith(("rank ", "Current thread", "Thread ")):
            kept.append(line)
            depth = 0
        elif line.startswith("  File "):
            depth += 1
            if depth <= frames:
                kept.append(line)
    return "\n".join(kept)


def _run_once(worker, world: int, out: pathlib.Path, args: tuple, seconds: float) -> str | None:
    """None when every rank finished; else each rank's stacks at the deadline (the ranks are then
    killed)."""
    out.mkdir(parents=True, exist_ok=True)
    store = str(out / "store")
    context = mp.spawn(
        _traced, args=(worker, world, store, str(out), *args), nprocs=world, join=False
    )
    deadline = time.monotonic() + seconds
    while not context.join(timeout=1):
        if time.monotonic() > deadline:
            running = [process for process in context.processes if process.is_alive()]
            for process in running:
                os.kill(process.pid, signal.SIGUSR1)
            time.sleep(2)
            for process in running:
                process.kill()
            return "\n".join(_stacks(out, rank) for rank in range(world))
    return None


def _spawn(worker, world: int, tmp_path: pathlib.Path, *args, seconds: float = 300) -> list[dict]:
    """Runs `worker` on `world` ranks and returns what each rank wrote. A run that outlives
    `seconds` is run once more, from a fresh store, with a warning that carries its stacks, so
    that a rare stall shows where it waits (the one CI saw in two ranks compiling under DDP was
    a deadlock of gloo's worker thread and the GIL, fixed in remat._distributed)."""
    hung = []
    for attempt in range(2):
        out = tmp_path / f"attempt{attempt}"
        stacks = _run_once(worker, world, out, args, seconds)
        if stacks is None:
            if hung:
                warnings.warn(
                    f"{worker.__name__} hung once and then passed; innermost frames:\n"
                    f"{_innermost(hung[0])}\nwhole stacks:\n{hung[0]}",
                    stacklevel=2,
                )
            return _read(out, world)
        hung.append(stacks)
    pytest.fail(
        f"{worker.__name__} on {world} ranks did not finish in {seconds:g} s, twice; innermost "
        f"frames:\n{_innermost(hung[0])}\n{_innermost(hung[1])}\nwhole stacks:\n{hung[0]}\n{hung[1]}"
    )


# --- DDP ----------------------------------------------------------------------------------------


def _ddp_worker(rank, world, store, out, slow_rank):
    from torch.nn.parallel import DistributedDataParallel as DDP

    import remat.torch as rt

    _init(rank, world, store)
    base = Net()
    x = torch.randn(8, 32) + rank  # every rank its own batch
    budget = max(dist_all(_budget(base, x)))  # one budget for all ranks
    plain = DDP(copy.deepcopy(base))
    model = DDP(copy.deepcopy(base))
    handle = rt.auto_checkpoint(model.module, activation_budget=budget)
    if rank == slow_rank:
        model.module.layers[2].slow = 0.03  # slow while it measures
    grads_equal, plans = True, []
    for _step in range(2):
        for net in (plain, model):
            net.zero_grad()
            net(x).pow(2).mean().backward()
        model.module.layers[2].slow = 0.0
        grads_equal &= all(
            torch.equal(a.grad, b.grad) for a, b in zip(plain.parameters(), model.parameters())
        )
        plans.append([list(r) for r in handle.plan.regions])
    _write(out, rank, {"grads_equal": grads_equal, "plans": plans})
    _finish()


def _changing_shapes_worker(rank, world, store, out, batches, mode):
    from torch.nn.parallel import DistributedDataParallel as DDP

    import remat.torch as rt

    _init(rank, world, store)
    base = Net() if mode == "blocks" else nn.Sequential(*(Block() for _ in range(6)))
    budget = max(dist_all(_budget(base, torch.randn(max(batches[rank]), 32))))
    plain = DDP(copy.deepcopy(base))
    model = DDP(copy.deepcopy(base))
    if mode == "function":  # remat.torch.checkpoint_sequential called in the model's place
        layers = list(model.module)

        def forward(x):
            return rt.checkpoint_sequential(layers, x, activation_budget=budget)

    else:  # per-block plans (Net) or a stock nn.Sequential's chain plan
        handle = rt.auto_checkpoint(model.module, activation_budget=budget)
        forward = model
    grads_equal, plans, peaks = True, [], []
    for step, batch in enumerate(batches[rank]):
        x = torch.randn(batch, 32, generator=torch.Generator().manual_seed(10 * step + rank))
        for net, owner in ((plain, plain), (forward, model)):
            owner.zero_grad()
            with rt.SavedTensorMeter(owner.module) as meter:
                y = net(x)
                with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    loss = y.pow(2).mean()
                loss.backward()
        if mode == "function":  # no DDP wrapper ran: average the gradients as DDP does
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
        grads_equal &= all(
            torch.equal(a.grad, b.grad) for a, b in zip(plain.parameters(), model.parameters())
        )
        if mode != "function":
            plans.append([list(r) for r in handle.plan.regions])
        peaks.append(meter.peak_bytes)
    _write(
        out, rank, {"grads_equal": grads_equal, "plans": plans, "peaks": peaks, "budget": budget}
    )
    _finish()


@pytest.mark.parametrize("mode", ["blocks", "chain", "function"])
def test_shapes_new_on_one_rank_are_planned_by_all_ranks_together(mode, tmp_path):
    # Dynamic padding: a shape new on one rank only sent that rank alone into the profile's
    # agreement, and the job stalled until the timeout (600 s). Step 3 meets a combination of
    # shapes every rank has measured before: per-block plans are made from the profiles kept.
    batches = {0: [8, 12, 12, 8], 1: [8, 8, 12, 12]}
    results = _spawn(_changing_shapes_worker, 2, tmp_path, batches, mode, seconds=120)
    assert all(r["grads_equal"] for r in results)
    assert results[0]["plans"] == results[1]["plans"]
    for r in results:
        assert max(r["peaks"]) <= r["budget"], r


def _evicted_worker(rank, world, store, out):
    import remat.torch as rt

    _init(rank, world, store)
    layers = [Block() for _ in range(4)]
    budget = 10**6

    def call(rows, group=None):
        x = torch.randn(rows, 32, requires_grad=True)
        y = rt.checkpoint_sequential(
            layers, x, activation_budget=budget, plan_group=group, tune=False
        )
        y.sum().backward()

    call(8)
    if rank == 0:  # rank 0 alone fills its plan cache (64 plans) with plans of its own
        for rows in range(9, 9 + 64):
            call(rows, "local")
    call(8)  # rank 0 lost the group's plan, rank 1 has it: all plan again, together
    call(8)
    _write(out, rank, {"done": True})
    _finish()


def test_a_plan_one_rank_lost_from_its_cache_is_made_again_by_all(tmp_path):
    # Rank 0 planned alone, rank 1 went on, and gloo aborted on a collective mismatch.
    results = _spawn(_evicted_worker, 2, tmp_path, seconds=120)
    assert all(r["done"] for r in results)


def dist_all(value):
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


@pytest.mark.parametrize("world", [2, 4])
def test_ddp_one_plan_exact_gradients_even_with_a_slow_rank(world, tmp_path):
    results = _spawn(_ddp_worker, world, tmp_path, 1)
    assert all(r["grads_equal"] for r in results)
    assert all(r["plans"] == results[0]["plans"] for r in results)
    assert results[0]["plans"][0], "the budget needs regions"


def _ddp_offload_worker(rank, world, store, out):
    from torch.nn.parallel import DistributedDataParallel as DDP

    import remat.torch as rt

    _init(rank, world, store)
    base = Net()
    x = torch.randn(8, 32) + rank
    budget = max(dist_all(_budget(base, x)))
    plain = DDP(copy.deepcopy(base))
    model = DDP(copy.deepcopy(base))
    # No bandwidth given: each rank measures its own, and all plan with the least.
    handle = rt.auto_checkpoint(model.module, activation_budget=budget, offload=True)
    grads_equal = True
    for _step in range(3):
        for net in (plain, model):
            net.zero_grad()
            net(x).pow(2).mean().backward()
        grads_equal &= all(
            torch.equal(a.grad, b.grad) for a, b in zip(plain.parameters(), model.parameters())
        )
    plan = handle.plan
    figures = plan.offload
    _write(
        out,
        rank,
        {
            "grads_equal": grads_equal,
            "plan": [[list(r) for r in plan.regions], list(plan.offloaded)],
            "bandwidth": None if figures is None else figures.bandwidth,
        },
    )
    _finish()


def test_ddp_ranks_offload_by_one_plan_with_the_least_measured_bandwidth(tmp_path):
    results = _spawn(_ddp_offload_worker, 2, tmp_path)
    assert all(r["grads_equal"] for r in results)
    assert all(r["plan"] == results[0]["plan"] for r in results)
    assert all(r["bandwidth"] == results[0]["bandwidth"] for r in results)
    assert results[0]["plan"][1], "the budget is one where offloading beats re-running"


class WideBlock(nn.Module):
    """Wide enough that caching its matmuls beats re-running the block (op-level options)."""

    def __init__(self, width: int = 256) -> None:
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.up(x)
        return x + self.down(torch.tanh(h) * torch.sigmoid(h))


def _selective_uneven_worker(rank, world, store, out):
    from torch.nn.parallel import DistributedDataParallel as DDP

    import remat.torch as rt
    from remat.eager import profile_layers
    from remat.eager.planning.agree import agree_on_profile

    _init(rank, world, store)
    base = nn.Sequential(*(WideBlock() for _ in range(4)))
    x = torch.randn(64 * (rank + 1), 256)  # the last rank's batch is the largest
    # The agreed menus, whatever the timings: each entry holds what the most any rank caches.
    own = profile_layers(list(base), x, granularity="op")
    agreed = agree_on_profile(own, 1)
    shortfalls = []  # (layer, entry, agreed bytes, this rank's) where this rank caches more
    for index, menu in enumerate(agreed.selective):
        for entry, (held, _) in zip(menu[1], agreed.layers[index].options):
            mine = sum(own.selective[index][0].ops[i].new_bytes for i in entry.cached)
            if mine > held:
                shortfalls.append((index, sorted(entry.cached), held, mine))
    m = rt.measure(copy.deepcopy(base), x, verbose=False, plan_group="local")
    plain = DDP(copy.deepcopy(base))
    results = []
    for fraction in (0.2, 0.3, 0.4, 0.5, 0.6, 0.8):  # where op-level options win depends on timing
        local = m.least_activation_budget_bytes + int(
            (m.no_checkpoint_bytes - m.least_activation_budget_bytes) * fraction
        )
        budget = max(dist_all(local))  # one budget, that the largest rank can meet
        model = DDP(copy.deepcopy(base))
        handle = rt.auto_checkpoint(
            model.module, blocks=list(model.module), activation_budget=budget
        )
        peaks = []
        for _step in range(2):
            for net in (plain, model):
                net.zero_grad()
                with rt.SavedTensorMeter(net.module) as meter:
                    net(x).sum().backward()  # sum saves nothing
            peaks.append(meter.peak_bytes)
        plan = handle.plan
        results.append(
            {
                "budget": budget,
                "peak": peaks[-1],
                "predicted": plan.predicted_peak_bytes,
                "selective": sum(plan.keeps_ops(r) for r in range(len(plan.regions))),
                "plan": [[list(r) for r in plan.regions], list(plan.options)],
                "grads_equal": all(
                    torch.equal(a.grad, b.grad)
                    for a, b in zip(plain.parameters(), model.parameters())
                ),
            }
        )
    menus = sum(len(layer.options) for layer in agreed.layers)
    _write(out, rank, {"budgets": results, "shortfalls": shortfalls, "menus": menus})
    _finish()


# The first rank's menu was priced on its own inputs: the larger rank cached up to 21% more.
# Whether a budget picks op-level options depends on the timings (on a busy machine, none may):
# the agreed menus are checked on every rank, and the runs wherever a plan picks them.
def test_op_level_options_fit_the_rank_with_the_largest_inputs(tmp_path):
    results = _spawn(_selective_uneven_worker, 2, tmp_path)
    assert all(r["menus"] and not r["shortfalls"] for r in results), results
    ranks = [r["budgets"] for r in results]
    for first, other in zip(*ranks):
        assert first["plan"] == other["plan"]
        for b in (first, other):
            assert b["grads_equal"]
            assert b["peak"] <= b["predicted"] <= b["budget"], b


# --- FSDP2 --------------------------------------------------------------------------------------


def _fsdp_worker(rank, world, store, out):
    from torch.distributed.fsdp import fully_shard

    import remat.torch as rt

    _init(rank, world, store)
    base = Net()
    x = torch.randn(8, 32) + rank
    budget = max(dist_all(_budget(base, x)))

    def sharded(model):
        for layer in model.layers:
            fully_shard(layer)  # reshard after forward: a re-run gathers again
        fully_shard(model)
        return model

    plain, model = sharded(copy.deepcopy(base)), copy.deepcopy(base)
    handle = rt.auto_checkpoint(model, activation_budget=budget)  # before sharding, as torchtitan
    model = sharded(model)
    equal, plans = True, []
    for _step in range(2):
        for net in (plain, model):
            net.zero_grad()
            with rt.SavedTensorMeter(net) as meter:
                y = net(x)
                with torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t):
                    loss = y.pow(2).mean()  # the loss's saves are not the blocks'
                loss.backward()
        equal &= all(
            torch.equal(a.grad.full_tensor(), b.grad.full_tensor())
            for a, b in zip(plain.parameters(), model.parameters())
        )
        plans.append([list(r) for r in handle.plan.regions])
    plan = handle.plan
    _write(
        out,
        rank,
        {
            "grads_equal": equal,
            "plans": plans,
            "peak": meter.peak_bytes,
            "predicted": plan.predicted_peak_bytes,
            "budget": budget,
        },
    )
    _finish()


def test_fsdp2_one_plan_exact_gradients(tmp_path):
    results = _spawn(_fsdp_worker, 2, tmp_path)
    assert all(r["grads_equal"] for r in results)
    assert results[0]["plans"] == results[1]["plans"] and results[0]["plans"][0]
    # The meter leaves out the blocks' gathered parameters, saved again by each re-run.
    for r in results:
        assert r["peak"] <= r["predicted"] <= r["budget"], r


def _hf_fsdp_worker(rank, world, store, out):
    # A Hugging Face Llama (the zoo's config, use_cache at its default) through remat's
    # transformers integration, sharded with FSDP2 as torchtitan and accelerate do: every layer,
    # then the root, after the integration wrapped the layers.
    from torch.distributed.fsdp import fully_shard

    import remat.integrations.transformers as hf
    import remat.torch as rt
    from zoo import torchvision_cpu  # noqa: F401
    from zoo.models import ZOO

    _init(rank, world, store)
    zoo = ZOO["llama"]
    base = zoo.build("sdpa")
    g = torch.Generator().manual_seed(10 + rank)
    ids = torch.randint(0, 512, (2, 32), generator=g)
    measured = rt.measure(
        copy.deepcopy(base),
        ids,
        labels=ids,
        loss_fn=zoo.loss,
        verbose=False,
        blocks="model.layers",
        plan_group="local",
    )
    least, most = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
    budget = max(dist_all(least + (most - least) // 3))

    def sharded(model):
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        return model

    plain, model = sharded(copy.deepcopy(base)), copy.deepcopy(base)
    handle = hf.enable(model, activation_budget=budget)
    model = sharded(model)
    equal, plans = True, []
    for step in range(2):
        for net in (plain, model):
            net.zero_grad()
            torch.manual_seed(step)
            net(ids, labels=ids).loss.backward()
        equal &= all(
            torch.equal(a.grad.full_tensor(), b.grad.full_tensor())
            for a, b in zip(plain.parameters(), model.parameters())
        )
        plans.append([list(r) for r in handle.plan.regions])
    _write(out, rank, {"grads_equal": equal, "plans": plans, "warnings": handle.warnings})
    _finish()


def test_the_transformers_integration_under_fsdp2_is_exact(tmp_path):
    pytest.importorskip("transformers")
    results = _spawn(_hf_fsdp_worker, 2, tmp_path)
    assert all(r["grads_equal"] for r in results)
    assert results[0]["plans"] == results[1]["plans"] and results[0]["plans"][0]
    assert all(not r["warnings"] for r in results)


def _fsdp_chain_worker(rank, world, store, out):
    from torch.distributed.fsdp import fully_shard

    import remat.torch as rt

    _init(rank, world, store)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(32, 32)
            self.body = nn.Sequential(*(Block() for _ in range(6)))
            self.out = nn.Linear(32, 4)

        def forward(self, x):
            return self.out(self.body(self.inp(x)))

    base = Model()
    x = torch.randn(8, 32) + rank
    m = rt.measure(copy.deepcopy(base.body), base.inp(x), verbose=False, plan_group="local")
    budget = max(
        dist_all(
            m.least_activation_budget_bytes
            + (m.no_checkpoint_bytes - m.least_activation_budget_bytes) // 3
        )
    )

    def sharded(model):
        for layer in model.body:
            fully_shard(layer)
        return fully_shard(model)

    plain, model = sharded(copy.deepcopy(base)), copy.deepcopy(base)
    handle = rt.auto_checkpoint(model, activation_budget=budget, blocks="body")  # a chain: tuned
    model = sharded(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _step in range(2):
            for net in (plain, model):
                net.zero_grad()
                net(x).pow(2).mean().backward()
    equal = all(
        torch.equal(a.grad.full_tensor(), b.grad.full_tensor())
        for a, b in zip(plain.parameters(), model.parameters())
    )
    _write(
        out,
        rank,
        {
            "grads_equal": equal,
            "regions": [list(r) for r in handle.plan.regions],
            "not_tuned": any("not tuned" in str(w.message) for w in caught),
        },
    )
    _finish()


def test_fsdp2_chain_is_planned_untuned_and_exact(tmp_path):
    # Tuning timed a backward inside the model's forward: FSDP2 resharded the root's weights and
    # the next layer failed with "mixed torch.Tensor and DTensor".
    results = _spawn(_fsdp_chain_worker, 2, tmp_path)
    assert all(r["grads_equal"] and r["not_tuned"] for r in results)
    assert results[0]["regions"] == results[1]["regions"] and results[0]["regions"]


# --- errors, not hangs --------------------------------------------------------------------------


def _mismatch_worker(rank, world, store, out):
    from remat import _distributed as distributed

    _init(rank, world, store)
    payload = {}
    try:
        distributed.verify_same_plan([(0, rank, 0)])
    except RuntimeError as error:
        payload["mismatch"] = str(error)
    from remat.eager.planning.agree import agree_on_profile
    from remat.eager.types import LayerProfile, Profile

    layer = LayerProfile("block", 100, 10, False, 1e-3)
    try:  # a budget below the least on one rank alone raised there and left the others waiting
        agree_on_profile(Profile(10, (layer, layer), 1e-5), 1000 * (rank + 1))
    except RuntimeError as error:
        payload["budgets"] = str(error)
    os.environ["REMAT_DIST_TIMEOUT_SECONDS"] = "3"
    start = time.perf_counter()
    if rank == 0:
        try:
            distributed.verify_same_plan([(0, 1, 0)], what="plan on a lonely rank")
        except RuntimeError as error:
            payload["timeout"] = str(error)
    else:
        time.sleep(6)  # never joins that collective
    payload["seconds"] = time.perf_counter() - start
    _write(out, rank, payload)
    os._exit(0)  # no barrier: rank 0's group saw a failed collective


def test_a_different_plan_or_a_missing_rank_is_an_error(tmp_path):
    results = _spawn(_mismatch_worker, 2, tmp_path)
    assert "ranks [1]" in results[0]["mismatch"] and "ranks [1]" in results[1]["mismatch"]
    for r in results:
        assert "different memory budgets (rank 0: 1000, rank 1: 2000 bytes)" in r["budgets"]
    assert "timed out or failed agreeing on the plan on a lonely rank" in results[0]["timeout"]
    assert results[0]["seconds"] < 30


# --- pipeline -----------------------------------------------------------------------------------


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


# --- torch.compile ------------------------------------------------------------------------------


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
    import warnings

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
