"""Offloading in eager PyTorch, measured: a Llama-style decoder trained under remat's
keep/recompute plans, remat's offload plans (auto_checkpoint(..., offload=...)), torch's
save_on_cpu, and full activation checkpointing (every block a checkpoint region), interleaved in
one process. Each step's time is the median of --repeats; its peak is the allocator's high-water
mark during the step above the memory held before it (parameters, gradients, the batch).

remat runs at budgets from its least with offloading (regions' inputs moved to host memory)
through the least keep/recompute reaches (every block a region: full AC's saved bytes) up the way
to no checkpointing; an offload plan moves a block's saved bytes, or a region's input, to pinned
host memory on a side stream after the next block's forward and prefetches them one block ahead
in backward. Keep/recompute runs only at the budgets it can meet.

Targets (issue 38): at full AC's measured peak, remat's step <= 0.95x full AC's; at 0.75x full
AC's peak, a step <= full AC's. Each is stated met or missed from the measured figures.

    python bench/offload.py --device cuda                   # d=2048, seq 2048, bf16, 8 layers
    python bench/offload.py --device cpu --hidden 64 --seq 32 --layers 4 --repeats 2   # a smoke run

Exactness is checked too: one step of each remat plan against a plain step from the same
weights, gradients compared with torch.equal (CUDA kernels are deterministic for the same
inputs here; a difference is reported, not hidden).
"""

from __future__ import annotations

import argparse
import copy
import math
import pathlib
import platform
import statistics
import sys
import time
from datetime import date
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import remat.torch as rt
from remat.eager import measure_bandwidth
from remat.units import format_bytes

ROOT = pathlib.Path(__file__).resolve().parents[1]
MIB = 1 << 20


class RMSNorm(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class DecoderLayer(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(width), RMSNorm(width)
        self.qkv = nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        hidden = 256 * math.ceil(8 * width / 3 / 256)
        self.gate_up = nn.Linear(width, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, width, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = (
            self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, -1).transpose(1, 3).unbind(2)
        )
        q = q * cos + torch.cat((-q[..., 1::2], q[..., ::2]), -1) * sin
        k = k * cos + torch.cat((-k[..., 1::2], k[..., ::2]), -1) * sin
        attended = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(b, s, d))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, -1)
        return x + self.down(nn.functional.silu(gate) * up)


class Decoder(nn.Module):
    def __init__(self, vocab: int, width: int, heads: int, layers: int) -> None:
        super().__init__()
        self.heads = heads
        self.embed = nn.Embedding(vocab, width)
        self.layers = nn.ModuleList(DecoderLayer(width, heads) for _ in range(layers))
        self.norm = RMSNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        head_dim = x.shape[-1] // self.heads
        positions = torch.arange(ids.shape[1], device=ids.device, dtype=torch.float32)
        inverse = 1.0 / 10000 ** (torch.arange(0, head_dim, 2, device=ids.device) / head_dim)
        angles = torch.outer(positions, inverse).repeat(1, 2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.head(self.norm(x))


class FullAC(nn.Module):
    """Every block a non-reentrant checkpoint region (torch's checkpoint_wrapper, torchtitan's
    full AC)."""

    def __init__(self, model: Decoder) -> None:
        super().__init__()
        self.model = model
        for index, layer in enumerate(model.layers):
            model.layers[index] = _Checkpointed(layer)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids)


class _Checkpointed(nn.Module):
    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: Any) -> Any:
        return checkpoint(self.block, *args, use_reentrant=False)


def loss_of(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), ids.flatten())


def synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def step_once(model: nn.Module, ids: torch.Tensor, wrap: Callable[[], Any] | None) -> None:
    if wrap is None:
        loss_of(model(ids), ids).backward()
    else:
        with wrap():
            loss = loss_of(model(ids), ids)
        loss.backward()


def timed_step(model: nn.Module, ids: torch.Tensor, device: str, wrap=None) -> tuple[float, int]:
    """One step: seconds and the allocator's high-water mark above what was held before."""
    model.zero_grad(set_to_none=False)  # gradients stay allocated: not part of the peak
    synchronize(device)
    before = torch.cuda.memory_allocated() if device == "cuda" else 0
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    step_once(model, ids, wrap)
    synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() - before if device == "cuda" else 0
    return seconds, peak


def gradients_equal(model: nn.Module, reference: nn.Module, ids: torch.Tensor) -> bool:
    for m in (model, reference):
        m.zero_grad(set_to_none=True)
        loss_of(m(ids), ids).backward()
    got = [p.grad for p in model.parameters()]
    want = [p.grad for p in reference.parameters()]
    return all(torch.equal(a, b) for a, b in zip(got, want))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--fractions",
        default="-1,-0.5,0,0.25,0.5",
        help="budgets: f >= 0, least + f x (none - least); f < 0, least + f x (least - the "
        "least with offloading)",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "offload"))
    args = parser.parse_args()
    device, dtype = args.device, getattr(torch, args.dtype)
    if device == "cpu":
        torch.set_num_threads(1)
    torch.manual_seed(0)
    base = Decoder(args.vocab, args.hidden, args.heads, args.layers).to(device, dtype)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), device=device)
    bandwidth = measure_bandwidth(device)
    measured = rt.measure(
        copy.deepcopy(base), ids, loss_fn=lambda out: loss_of(out, ids), verbose=False
    )
    least, everything = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
    lowest = measured.least_offload_budget_bytes
    budgets = []
    for f in (float(f) for f in args.fractions.split(",")):
        room = everything - least if f >= 0 else least - lowest
        budgets.append(least + int(f * room))
    print(
        f"offload bench: least {format_bytes(least)} (offloading {format_bytes(lowest)}), none "
        f"{format_bytes(everything)}, bandwidth {format_bytes(bandwidth)}/s",
        flush=True,
    )

    configs: dict[str, tuple[nn.Module, Any]] = {
        "plain": (copy.deepcopy(base), None),
        "full AC": (FullAC(copy.deepcopy(base)), None),
        "save_on_cpu": (
            copy.deepcopy(base),
            lambda: torch.autograd.graph.save_on_cpu(pin_memory=device == "cuda"),
        ),
    }
    handles = {}
    for budget in sorted(set(budgets)):
        for offload in (False, True):
            if not offload and budget < least:
                continue
            label = f"remat {'offload' if offload else 'keep/recompute'} @ {format_bytes(budget)}"
            model = copy.deepcopy(base)
            handles[label] = rt.auto_checkpoint(
                model,
                activation_budget=budget,
                offload=offload and ("auto" if device == "cuda" else True),
            )
            configs[label] = (model, None)
    exact = {}
    for label, handle in handles.items():  # the first step measures; then one plan-following step
        step_once(handle.model, ids, None)
        exact[label] = gradients_equal(handle.model, configs["plain"][0], ids)
    times: dict[str, list[float]] = {k: [] for k in configs}
    peaks: dict[str, list[int]] = {k: [] for k in configs}
    for model, wrap in configs.values():  # warm-up
        timed_step(model, ids, device, wrap)
    for _ in range(args.repeats):
        for label, (model, wrap) in configs.items():
            seconds, peak = timed_step(model, ids, device, wrap)
            times[label].append(seconds)
            peaks[label].append(peak)
    median = {k: statistics.median(v) for k, v in times.items()}
    peak = {k: max(v) for k, v in peaks.items()}
    full = median["full AC"]
    lines = [
        f"# Offloading in eager PyTorch ({device})",
        "",
        f"Command: `python {' '.join(sys.argv)}`. Machine: {platform.machine()}, "
        f"{torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, torch {torch.__version__}; "
        f"{date.today()}. Llama-style decoder: hidden {args.hidden}, {args.layers} layers, "
        f"{args.heads} heads, batch {args.batch} x seq {args.seq}, {args.dtype}. Copy bandwidth "
        f"(measured, slower direction): {format_bytes(bandwidth)}/s. Median of {args.repeats} "
        "interleaved steps; peak = allocator high-water mark during the step above what was "
        "held before it.",
        "",
        "| config | step ms | / full AC | peak | blocks offloaded / inputs moved | predicted stall ms | gradients equal to plain |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for label in configs:
        handle = handles.get(label)
        plan = handle.plan if handle is not None else None
        offloaded = (
            f"{len(plan.offloaded)} / {len(plan.inputs_offloaded)}" if plan is not None else "-"
        )
        stall = (
            f"{1e3 * plan.offload.stall_seconds:.2f}" if plan is not None and plan.offload else "-"
        )
        equal = {True: "yes", False: "NO"}.get(exact.get(label), "-")
        lines.append(
            f"| {label} | {1e3 * median[label]:.1f} | {median[label] / full:.2f} | "
            f"{format_bytes(peak[label]) if device == 'cuda' else '-'} | {offloaded} | {stall} | {equal} |"
        )
    if device == "cuda":
        lines += ["", *targets(median, peak, handles)]
    for label, handle in handles.items():
        if handle.plan is not None and handle.plan.offload is not None:
            lines += ["", f"## {label}", "", "```", str(handle.plan), "```"]
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = out / f"README_{device}.md"
    report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:40]))
    print(f"wrote {report}")


def targets(median: dict[str, float], peak: dict[str, int], handles: dict[str, Any]) -> list[str]:
    """The issue's two targets, each stated met or missed from the measured figures."""
    full_time, full_peak = median["full AC"], peak["full AC"]
    lines = ["## Targets", ""]
    at_full = [k for k in handles if peak[k] <= full_peak]
    best = min(at_full, key=lambda k: median[k], default=None)
    if best is None:
        lines.append(
            f"- At full AC's peak ({format_bytes(full_peak)}): no remat plan measured within it: **missed**."
        )
    else:
        ratio = median[best] / full_time
        verdict = "met" if ratio <= 0.95 else "missed"
        lines.append(
            f"- At full AC's peak ({format_bytes(full_peak)}): fastest remat plan within it is "
            f"{best}, {ratio:.2f}x full AC's step: **{verdict}** (target <= 0.95x)."
        )
    under = [k for k in handles if peak[k] <= 0.75 * full_peak]
    if not under:
        lines.append(
            f"- At 0.75x full AC's peak ({format_bytes(int(0.75 * full_peak))}): no remat plan "
            "measured within it: **missed**."
        )
    else:
        best = min(under, key=lambda k: median[k])
        verdict = "met" if median[best] <= full_time else "missed"
        lines.append(
            f"- At 0.75x full AC's peak: {best}, {median[best] / full_time:.2f}x full AC's step: "
            f"**{verdict}**."
        )
    return lines


if __name__ == "__main__":
    main()
