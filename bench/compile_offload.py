"""torch.compile with remat.torch.use(memory_budget=..., offload=True), measured: a model whose
least device-only peak is above the budget compiles with its saved activations offloaded by
torch's own pass, and its step is measured against the prediction and the budget.

For each backend (aot_eager, inductor): the least predicted device-only peak (the budget one
byte under it raises BudgetTooSmall without offloading), then the step at budgets 1.0, 0.9 and
0.8 of that least, with offload=True: the predicted peak, the measured one (CUDA allocator
high-water mark above what was allocated before the step), the values moved, the step time, and
whether the gradients equal eager's (aot_eager: torch.equal; inductor: allclose).

    python bench/compile_offload.py --device cuda
    python bench/compile_offload.py --device cpu --width 64 --batch 1024   # the machinery only:
        CPU graphs are offloaded here on purpose, and the host is the device, so nothing is freed
"""

from __future__ import annotations

import argparse
import copy
import pathlib
import platform
import sys
import time
from datetime import date

import torch
from torch import nn

import remat.torch as rt
from remat.compiled.budget import BudgetTooSmall
from remat.compiled.measure import measured_peak
from remat.step_memory import held_at_start
from remat.units import format_bytes

ROOT = pathlib.Path(__file__).resolve().parents[1]


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def step(model: nn.Module, x: torch.Tensor) -> None:
    model(x).float().square().mean().backward()


def compiled_step(model, x, backend, budget, offload, devices):
    """(solver, measured peak, seconds) of the first compiled step and a timed second one."""
    torch._dynamo.reset()
    # use() takes the whole step's peak; `budget` is beyond the step's start.
    start = held_at_start(x.device, model, x)
    with rt.use(memory_budget=start + budget, offload=offload) as solver:
        solver.offload_devices = devices
        compiled = torch.compile(model, backend=backend)
        step(compiled, x)  # compiles
        model.zero_grad(set_to_none=False)
        peak = measured_peak(lambda: step(compiled, x), x.device)
        model.zero_grad(set_to_none=False)
        started = time.perf_counter()
        step(compiled, x)
        if x.device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - started
    return solver, peak, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--batch", type=int, default=8192)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--backends", default="aot_eager,inductor")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "compile_budget"))
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    devices = (device.type,)
    torch.manual_seed(0)
    base = nn.Sequential(*(Block(args.width) for _ in range(args.blocks))).to(device, dtype)
    x = torch.randn(args.batch, args.width, device=device, dtype=dtype)
    reference = copy.deepcopy(base)
    step(reference, x)
    rows = []
    for backend in args.backends.split(","):
        try:
            compiled_step(copy.deepcopy(base), x, backend, 1, False, devices)
            raise RuntimeError("a 1-byte budget compiled")
        except BudgetTooSmall as error:
            least = error.least_peak - error.start  # beyond the step's start, as `budget`
        for share in (1.0, 0.9, 0.8):
            budget = int(share * least) - 1
            model = copy.deepcopy(base)
            try:
                solver, peak, seconds = compiled_step(model, x, backend, budget, True, devices)
            except BudgetTooSmall as error:
                beyond = error.least_peak - error.start
                rows.append((backend, least, budget, None, beyond, None, None, None))
                continue
            chosen = solver.choices[-1].chosen
            model.zero_grad(set_to_none=True)
            step(model, x)
            pairs = list(zip(model.parameters(), reference.parameters()))
            if backend == "aot_eager":
                exact = all(torch.equal(a.grad, b.grad) for a, b in pairs)
            else:
                exact = all(torch.allclose(a.grad, b.grad, rtol=1e-3, atol=1e-5) for a, b in pairs)
            rows.append(
                (
                    backend,
                    least,
                    budget,
                    chosen.peak.peak,
                    peak,
                    len(chosen.offloaded),
                    seconds,
                    exact,
                )
            )
            print(rows[-1], flush=True)
    lines = [
        f"# torch.compile with offloading ({device.type})",
        "",
        f"Command: `python {' '.join(sys.argv)}`. Machine: {platform.machine()}, "
        f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}, torch "
        f"{torch.__version__}; {date.today()}. {args.blocks} blocks (LayerNorm, Linear "
        f"{args.width}->{4 * args.width}, GELU, Linear back, residual), batch {args.batch}, "
        f"{args.dtype}. Budgets: one byte under 1.0, 0.9 and 0.8 of the least device-only "
        "predicted peak.",
        "",
        "| backend | least on the device | budget | predicted | measured | moved | step ms | gradients |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for backend, least, budget, predicted, peak, moved, seconds, exact in rows:
        if predicted is None:
            lines.append(
                f"| {backend} | {format_bytes(least)} | {format_bytes(budget)} | refused: least "
                f"with offloading {format_bytes(peak)} | | | | |"
            )
            continue
        # On the CPU the host copies are allocations of the same allocator: not a check.
        within = (
            "host copies included"
            if device.type == "cpu"
            else ("within" if peak <= budget else "OVER")
        )
        lines.append(
            f"| {backend} | {format_bytes(least)} | {format_bytes(budget)} | "
            f"{format_bytes(predicted)} | {format_bytes(peak)} ({within}) | {moved} | "
            f"{1e3 * seconds:.1f} | {'equal' if exact else 'DIFFER'} |"
        )
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = out / f"offload_{device.type}.md"
    report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"wrote {report}")


if __name__ == "__main__":
    main()
