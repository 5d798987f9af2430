"""What remat's exact replay costs: a checkpoint region against torch's, and the first step.

1. Per region: Hugging Face decoders (bench/zoo.py's sizes) with every block a region, remat's
   (auto_checkpoint at its least budget, whole blocks) against HF's gradient checkpointing
   (every block, torch's non-reentrant checkpoint); median of interleaved steps.
2. The first step of the test zoo's ConvNeXt (bench/zoo.py's first-step table) over a later one.

Each is run as remat ships and with the host generators' replay off (Python's and NumPy's
global RNG states, saved and compared around every measuring run and region; NumPy's read from
its MT19937 struct where that is exact, see remat/eager/numpy_state.py), to show what that part
of the replay costs. Off, a block that draws from NumPy would replay other numbers: it is
measured here, never offered.

    python bench/zoo_overhead.py          # about 3 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import pathlib
import platform
import statistics
import sys
import time
from datetime import date

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))

from remat.eager import generators  # noqa: E402
from remat.integrations import transformers as hf  # noqa: E402


def _bench_zoo():
    spec = importlib.util.spec_from_file_location("bench_zoo", ROOT / "bench" / "zoo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def host_replay(on: bool):
    """remat's replay of the host generators, as shipped (on) or skipped (off)."""
    if on:
        yield
        return
    cls = generators._HostGenerators
    saved = cls.get_state, cls.set_state
    cls.get_state = lambda self: None
    cls.set_state = lambda self, state: None
    try:
        yield
    finally:
        cls.get_state, cls.set_state = saved


def regions(name: str, rounds: int) -> dict[str, float]:
    zoo = _bench_zoo()
    args = argparse.Namespace(
        hidden=256, layers=4, heads=4, vocab=1000, seq=128, batch=2, dtype="float32", device="cpu"
    )
    base = zoo.build(name, args)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=g)
    models = zoo.baselines(base)
    least = zoo.measure(base, ids).least_activation_budget_bytes
    steps = {k: zoo.step_of(models[k], ids) for k in ("plain", "hf_gradient_checkpointing")}
    model = copy.deepcopy(base)
    handle = hf.enable(model, activation_budget=least, granularity="block")
    steps["remat"] = zoo.step_of(model, ids)
    steps["remat"]()
    assert len(handle.plan.regions) == args.layers, handle.plan.regions
    times: dict[str, list[float]] = {k: [] for k in (*steps, "remat, host replay off")}
    for _ in range(rounds):
        for key in times:
            step = steps["remat" if key.startswith("remat") else key]
            with host_replay(key != "remat, host replay off"):
                started = time.perf_counter()
                step()
                times[key].append(time.perf_counter() - started)
    return {k: statistics.median(v) for k, v in times.items()}


def first_step(trials: int) -> dict[str, float]:
    from zoo import adopt
    from zoo.models import ZOO
    from zoo.training import pair

    zoo = ZOO["convnext"]
    args, kwargs = zoo.batch()

    def step(m: torch.nn.Module) -> float:
        started = time.perf_counter()
        zoo.loss(m(*args, **kwargs)).backward()
        m.zero_grad(set_to_none=True)
        return time.perf_counter() - started

    out = {}
    for on in (True, False):
        firsts, laters = [], []
        with host_replay(on):
            for _ in range(trials):
                model, plain = pair(zoo, zoo.attention[0])
                measured = adopt.measure(zoo, copy.deepcopy(model))
                budget = (
                    measured.least_activation_budget_bytes + measured.no_checkpoint_bytes
                ) // 2
                adopt.enable(zoo, model, budget, granularity="op")
                step(plain)
                firsts.append(step(model))
                laters.append(statistics.median(step(model) for _ in range(5)))
        key = "as shipped" if on else "host replay off"
        out[key] = (statistics.median(firsts), statistics.median(laters))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--trials", type=int, default=9)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "zoo"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    lines = [
        "# What remat's exact replay costs (cpu)",
        "",
        f"Command: `python bench/zoo_overhead.py`. Machine: {platform.machine()}, torch "
        f"{torch.__version__}, 1 thread; {date.today()}. Host replay: remat saves Python's and "
        "NumPy's global RNG states around each measuring run and region and puts them back for a "
        "re-run (NumPy's get_state and set_state take about 30 us each, so its state is read "
        "from its MT19937 struct where that is exact: remat/eager/numpy_state.py); off, a block "
        "drawing from NumPy would replay other numbers, so it is only measured here.",
        "",
        "## Every block a region: remat against torch's checkpoint (HF gradient checkpointing)",
        "",
        f"hidden 256, 4 layers, batch 2 x seq 128; median of {args.rounds} interleaved steps.",
        "",
        "| model | plain ms | HF ms | remat ms | remat - HF, per region ms | "
        "remat, host replay off ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name in ("llama", "gpt2"):
        t = regions(name, args.rounds)
        print(name, {k: round(1e3 * v, 1) for k, v in t.items()}, flush=True)
        lines.append(
            f"| {name} | {1e3 * t['plain']:.1f} | {1e3 * t['hf_gradient_checkpointing']:.1f} | "
            f"{1e3 * t['remat']:.1f} | "
            f"{1e3 * (t['remat'] - t['hf_gradient_checkpointing']) / 4:.2f} | "
            f"{1e3 * t['remat, host replay off']:.1f} |"
        )
    found = first_step(args.trials)
    print({k: tuple(round(1e3 * x, 1) for x in v) for k, v in found.items()}, flush=True)
    lines += [
        "",
        "## ConvNeXt's first step (the test zoo's config, budget halfway)",
        "",
        f"Median over {args.trials} fresh handles; later = median of 5 later steps.",
        "",
        "| replay | first ms | later ms | first / later |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, (first, later) in found.items():
        lines.append(f"| {key} | {1e3 * first:.1f} | {1e3 * later:.1f} | {first / later:.2f} |")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "overhead_cpu.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {out / 'overhead_cpu.md'}")


if __name__ == "__main__":
    main()
