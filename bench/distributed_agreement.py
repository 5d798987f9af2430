"""What the per-step agreement of a process group costs auto_checkpoint.

    python bench/distributed_agreement.py [--world 2] [--steps 40] [--depth 8] [--rows 512]

Under an initialized process group every auto_checkpoint step starts with one all_gather of two
integers on remat's gloo group (which inputs the rank's step has, and whether it has profiled
them), so that ranks whose shapes differ measure and plan together. This spawns `world` gloo
ranks on this machine, trains the same DDP model (fixed shapes, the same plan) with
`plan_group=None` (agreeing) and `plan_group="local"` (no collective of remat's), steps paired and
interleaved, and reports median step times, the median of the paired differences, and the
all_gather alone. Writes bench/results/distributed/README.md and results.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402


def worker(rank: int, world: int, store: str, out: str, args: argparse.Namespace) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    import remat.torch as rt
    from remat import _distributed as remat_distributed

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.manual_seed(0)
    base, _, x = models.make_mlp(depth=args.depth, width=args.width, batch=args.rows)
    measured = rt.measure(copy.deepcopy(base), x, verbose=False, plan_group="local")
    # The least budget: the least-memory plan on both handles (a budget between would let
    # the agreeing handle plan from the ranks' median times and the local one from its own, and
    # two plans would be compared instead of the agreement).
    budget = measured.least_activation_budget_bytes
    nets, plans = {}, {}
    for group in ("agreeing", "local"):
        model = copy.deepcopy(base)
        handle = rt.auto_checkpoint(  # untuned: tuning's timings would differ between handles
            model,
            activation_budget=budget,
            plan_group=None if group == "agreeing" else "local",
            tune=False,
        )
        nets[group], plans[group] = DDP(model), handle

    def step(net: nn.Module) -> float:
        net.zero_grad(set_to_none=True)
        dist.barrier()  # both ranks start together: the agreement's wait is the cost measured
        start = time.perf_counter()
        net(x).pow(2).mean().backward()
        return time.perf_counter() - start

    for _ in range(3):  # the first measures and plans
        for net in nets.values():
            step(net)
    times: dict[str, list[float]] = {group: [] for group in nets}
    for i in range(args.steps):
        for group in sorted(nets, reverse=i % 2 == 1):
            times[group].append(step(nets[group]))
    alone = []
    for _ in range(200):
        start = time.perf_counter()
        remat_distributed.step_inputs(0, True)
        alone.append(time.perf_counter() - start)
    same_plan = {g: [list(r) for r in h.plan.regions] for g, h in plans.items()}
    result = {
        "median_step_ms": {g: statistics.median(t) * 1e3 for g, t in times.items()},
        "paired_difference_ms": statistics.median(
            a - b for a, b in zip(times["agreeing"], times["local"])
        )
        * 1e3,
        "all_gather_alone_ms": statistics.median(alone) * 1e3,
        "plans": same_plan,
    }
    pathlib.Path(out, f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    os._exit(0)  # no process-group teardown (see tests/python/test_distributed.py)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "bench/results/distributed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "store")
        mp.spawn(worker, args=(args.world, store, folder, args), nprocs=args.world)
        ranks = [
            json.loads(pathlib.Path(folder, f"rank{r}.json").read_text()) for r in range(args.world)
        ]
    lines = [
        "# What the per-step agreement of a process group costs auto_checkpoint",
        "",
        f"`python bench/distributed_agreement.py --world {args.world} --steps {args.steps} "
        f"--depth {args.depth} --width {args.width} --rows {args.rows}`: {args.world} gloo ranks "
        f"on this machine ({os.cpu_count()} cores, {platform.machine()}), one intra-op thread "
        "each, DDP, examples/models.py's residual MLP of "
        f"{args.depth} blocks ({args.rows} x {args.width}, an nn.Sequential: one chain plan, "
        "untuned), at the least budget (the same plan on "
        f"both handles); {args.steps} paired steps after 3 warm-up steps, the two handles "
        "interleaved, every step started by a barrier.",
        "",
        '| rank | step, agreeing (ms) | step, plan_group="local" (ms) | paired difference (ms) '
        "| all_gather alone (ms) | same plan |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r, res in enumerate(ranks):
        steps = res["median_step_ms"]
        same = res["plans"]["agreeing"] == res["plans"]["local"]
        lines.append(
            f"| {r} | {steps['agreeing']:.2f} | {steps['local']:.2f} | "
            f"{res['paired_difference_ms']:+.2f} | {res['all_gather_alone_ms']:.2f} | "
            f"{'yes' if same else 'no'} |"
        )
    lines += [
        "",
        "Medians. The paired difference is the median over steps of (agreeing - local); on a "
        "machine with fewer cores than ranks plus gloo's threads, it includes waiting for the "
        "other rank to be scheduled.",
        "",
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "README.md").write_text("\n".join(lines))
    (args.out / "results.json").write_text(
        json.dumps({"ranks": ranks, "args": vars(args) | {"out": str(args.out)}}, indent=1)
    )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
