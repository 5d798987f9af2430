"""Process groups for the distributed tests: ranks spawned on the CPU with gloo, each writing
what it found to a file; a run that hangs is run once more and its stacks reported."""

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


def dist_all(value):
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered
