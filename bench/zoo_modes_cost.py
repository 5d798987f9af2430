"""Why op-level options are not chosen on the zoo bench's CPU decoders: per Hugging Face block,
its plain forward, what SAC's modes cost it (the caching forward over the plain one, plus a
re-run that finds every cacheable op cached), and its cacheable ops' time, which bounds what any
option that keeps ops can spare. An option pays only where the cacheable ops outweigh the modes.

    python bench/zoo_modes_cost.py                    # Llama, hidden 256 and 1024 (CPU, 1 thread)
    python bench/zoo_modes_cost.py --models llama,gpt2 --hidden 256,512

Every block is profiled (ModesCache without its shortcuts) in auto_checkpoint's first step, at
the budget halfway between the least and no checkpointing. Writes
bench/results/zoo/modes_cost_<device>.md.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import pathlib
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("zoo_bench", ROOT / "bench" / "zoo.py")
zoo_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo_bench)  # type: ignore[union-attr]

from remat.eager._runtime import _detached  # noqa: E402
from remat.eager.measuring.menu import time_scale  # noqa: E402
from remat.eager.measuring.ops import ModesCache  # noqa: E402


def blocks_of(name: str, hidden: int, args: argparse.Namespace) -> list[dict[str, float]]:
    """One row per profiled block of the model at `hidden`."""
    rows: list[dict[str, float]] = []
    complete = ModesCache.complete

    def logged(self, function, fn_args, kwargs, profile, forward_seconds, repeats=0, **extra):
        found = complete(self, function, fn_args, kwargs, profile, forward_seconds, repeats)
        if found.modes_seconds is None or forward_seconds is None:
            return found
        plain = ModesCache._plain_forward(
            function, _detached(fn_args), _detached(kwargs), forward_seconds, None
        )
        caching, cached = found.modes_seconds
        modes = max(0.0, caching - forward_seconds) + cached
        ops = profile.ops[: profile.last_needed + 1]
        cacheable = sum(op.seconds for op in ops if op.cacheable) * time_scale(profile, plain)
        rows.append(
            {"plain": plain, "ops": len(profile.ops), "modes": modes, "cacheable": cacheable}
        )
        return found

    sizes = argparse.Namespace(**{**vars(args), "hidden": hidden})
    base = zoo_bench.build(name, sizes)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator())
    measured = zoo_bench.measure(base, ids)
    budget = (measured.least_activation_budget_bytes + measured.no_checkpoint_bytes) // 2
    init = ModesCache.__init__
    ModesCache.__init__ = lambda self, shortcuts=True: init(self, False)
    ModesCache.complete = logged
    try:
        model = copy.deepcopy(base)
        zoo_bench.hf.enable(model, activation_budget=budget)
        zoo_bench.step_of(model, ids)()  # the first step profiles every block
    finally:
        ModesCache.__init__ = init
        ModesCache.complete = complete
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="llama")
    parser.add_argument("--hidden", default="256,1024")
    zoo_bench.size_arguments(parser)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "zoo"))
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    lines = [
        f"# What SAC's modes cost a Hugging Face block, against what an option can spare "
        f"({args.device})",
        "",
        f"Command: `python bench/zoo_modes_cost.py {' '.join(sys.argv[1:])}`. torch "
        f"{torch.__version__}, {torch.get_num_threads()} thread(s); batch {args.batch} x seq "
        f"{args.seq}, {args.layers} layers, {args.dtype}. Date {time.strftime('%Y-%m-%d')}. "
        "Medians (and ranges) over the blocks profiled in auto_checkpoint's first "
        "step. spare = cacheable ops - modes: the most any option that keeps ops can save.",
        "",
        "| model | hidden | ops | plain forward ms | modes ms | modes us/op | cacheable ms | "
        "spare ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]

    def cell(values: list[float], scale: float = 1e3) -> str:
        low, mid, high = min(values), statistics.median(values), max(values)
        return f"{mid * scale:.2f} ({low * scale:.2f}-{high * scale:.2f})"

    for name in args.models.split(","):
        for hidden in map(int, args.hidden.split(",")):
            rows = blocks_of(name, hidden, args)
            spare = [max(0.0, r["cacheable"] - r["modes"]) for r in rows]
            lines.append(
                f"| {name} | {hidden} | {rows[0]['ops']} | {cell([r['plain'] for r in rows])} | "
                f"{cell([r['modes'] for r in rows])} | "
                f"{cell([r['modes'] / r['ops'] for r in rows], 1e6)} | "
                f"{cell([r['cacheable'] for r in rows])} | {cell(spare)} |"
            )
            print(lines[-1], flush=True)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"modes_cost_{args.device}.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
