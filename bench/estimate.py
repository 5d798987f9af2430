"""remat.torch.estimate against measured steps, and the estimate of public model shapes.

    python bench/estimate.py --out bench/results/estimate

1. The zoo (tests/python/zoo), each model built on the meta device and estimated on fake
   tensors with AdamW, against the same step measured on the CPU with real tensors
   (StepMemoryMeter): the peak without checkpointing, remat's least peak (measure()), and at a
   budget halfway between them the estimate's plan against auto_checkpoint's real steps.
2. Three public decoder shapes (Llama 3.2 1B, Llama 3 8B, Llama 3 70B), bf16, AdamW, batch 1,
   at sequence 2048 and 8192: the predicted peaks and remat's plan for 24, 80 and 141 GiB, with
   recompute times at H100's peak rates (an estimate, a lower bound).

Writes estimate.md and estimate.json to --out.

    python bench/estimate.py --device cuda --out DIR   # on a GPU: estimate_cuda.md

3. On CUDA: a Llama-style decoder in plain torch (bf16, hidden 2048, 8 layers, seq 2048, AdamW)
   estimated with device="cuda" at the GPU's rates, against its steps measured by
   torch.cuda.max_memory_allocated: without checkpointing, every block checkpointed, and
   remat at a budget halfway between; and the predicted recompute time of checkpointing every
   block against the measured difference of the two step times.
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))

import remat.torch as rt  # noqa: E402
from remat.units import format_bytes, format_seconds  # noqa: E402
from zoo import torchvision_cpu  # noqa: E402,F401  (before transformers)

GiB = 2**30
SHAPES = {
    "llama-1b": dict(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=True,
    ),
    "llama-8b": dict(
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    ),
    "llama-70b": dict(
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        tie_word_embeddings=False,
    ),
}
SEQS = (2048, 8192)
DEVICES = {"24 GiB": 24 * GiB, "80 GiB": 80 * GiB, "141 GiB": 141 * GiB}


def _plain_peak(model, step, batch, steps=2):
    """The last of `steps` plain AdamW steps' peak, the batch held as the estimate holds it."""
    optimizer = torch.optim.AdamW(model.parameters())
    peak = 0
    for _ in range(steps):
        with rt.StepMemoryMeter(model, optimizer, batch) as meter:
            loss = step(model)
            loss.backward()
            del loss
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        peak = meter.peak_bytes
    return peak


def zoo_rows() -> list[dict]:
    from zoo import adopt
    from zoo.models import ZOO

    rows = []
    for name, zoo in ZOO.items():
        args, kwargs = zoo.batch()
        torch.manual_seed(0)
        model = zoo.build(zoo.attention[0])
        with torch.device("meta"):
            meta = zoo.build(zoo.attention[0])
        started = time.perf_counter()
        try:
            found = rt.estimate(
                meta,
                *args,
                blocks=adopt.blocks_of(zoo, meta),
                loss_fn=zoo.loss,
                optimizer=torch.optim.AdamW(meta.parameters()),
                **kwargs,
            )
        except RuntimeError as error:
            rows.append({"model": name, "error": str(error).split(" (")[0]})
            continue
        seconds = time.perf_counter() - started

        def step(m):
            return zoo.loss(m(*args, **kwargs))

        plain = _plain_peak(copy.deepcopy(model), step, (args, kwargs))
        probe = copy.deepcopy(model)
        measured = rt.measure(
            probe,
            *args,
            blocks=adopt.blocks_of(zoo, probe),
            loss_fn=zoo.loss,
            optimizer=torch.optim.AdamW(probe.parameters()),
            **kwargs,
        )
        budget = (measured.least_budget_bytes + measured.no_checkpoint_step_bytes) // 2
        at = found.at(budget)
        trained = copy.deepcopy(model)
        handle = adopt.enable_step(zoo, trained, budget)
        optimizer = torch.optim.AdamW(trained.parameters())
        peaks = []
        for _ in range(3):
            with rt.StepMemoryMeter(trained, optimizer, (args, kwargs)) as meter:
                loss = step(trained)
                loss.backward()
                del loss
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            peaks.append(meter.peak_bytes)
        rows.append(
            {
                "model": name,
                "estimate_seconds": seconds,
                "plain_predicted": found.plan_named("no checkpointing").peak_bytes,
                "plain_measured": plain,
                "least_predicted": found.plan_named("least").peak_bytes,
                "least_measured": measured.least_budget_bytes,
                "budget": budget,
                "at_budget_predicted": found.evaluate(handle.plan).peak_bytes,
                "estimate_plan_peak": at.peak_bytes,
                "at_budget_measured": max(peaks[1:]),
                "same_regions": at.plan is not None
                and handle.plan is not None
                and tuple(at.plan.regions) == tuple(handle.plan.regions),
            }
        )
        print(name, rows[-1], flush=True)
    return rows


def shape_rows() -> list[dict]:
    import transformers

    rows = []
    for name, shape in SHAPES.items():
        config = transformers.LlamaConfig(
            vocab_size=128256, max_position_embeddings=8192, use_cache=False, **shape
        )
        with torch.device("meta"):
            model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
        for seq in SEQS:
            ids = torch.zeros(1, seq, dtype=torch.long, device="meta")
            started = time.perf_counter()
            found = rt.estimate(
                model,
                ids,
                labels=ids,
                loss_fn=lambda out: out.loss,
                optimizer=torch.optim.AdamW(model.parameters()),
            )
            row = {
                "shape": name,
                "seq": seq,
                "estimate_seconds": time.perf_counter() - started,
                "start_bytes": found.start_bytes,
                "forward_seconds": found.forward_seconds,
                "peaks": {p.name: p.peak_bytes for p in found.plans},
                "recompute": {p.name: p.recompute_seconds for p in found.plans},
            }
            for label, budget in DEVICES.items():
                at = found.at(budget)
                row[label] = (
                    None
                    if at.plan is None
                    else {
                        "peak_bytes": at.peak_bytes,
                        "recompute_seconds": at.recompute_seconds,
                        "regions": len(at.plan.regions),
                    }
                )
            rows.append(row)
            print(name, seq, f"{row['estimate_seconds']:.1f}s", row["peaks"], flush=True)
    return rows


class _Block(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.RMSNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width, bias=False)
        self.out = torch.nn.Linear(width, width, bias=False)
        self.norm2 = torch.nn.RMSNorm(width)
        self.up = torch.nn.Linear(width, 8 * width // 3 * 2, bias=False)
        self.down = torch.nn.Linear(8 * width // 3, width, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        attended = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.out(attended.transpose(1, 2).reshape(b, t, d))
        gate, up = self.up(self.norm2(x)).chunk(2, dim=-1)
        return x + self.down(torch.nn.functional.silu(gate) * up)


class _Decoder(torch.nn.Module):
    def __init__(self, width: int, layers: int, vocab: int = 32000) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.layers = torch.nn.ModuleList(_Block(width, width // 128) for _ in range(layers))
        self.norm = torch.nn.RMSNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.every_block = False  # torch.utils.checkpoint on each block, as HF's does

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            if self.every_block:
                x = torch.utils.checkpoint.checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        logits = self.head(self.norm(x)).float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())


def _device_steps(model, ids, steps=4):
    """Peaks and seconds of AdamW steps on ids's device (the first step's excluded)."""
    device = ids.device
    optimizer = torch.optim.AdamW(model.parameters())
    peaks, seconds = [], []
    for _ in range(steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(device)
        started = time.perf_counter()
        meter = None if device.type == "cuda" else rt.StepMemoryMeter(model, optimizer, ids)
        if meter is not None:
            meter.__enter__()
        model(ids).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
            peaks.append(torch.cuda.max_memory_allocated(device))
        else:
            meter.__exit__(None, None, None)
            peaks.append(meter.peak_bytes)
        seconds.append(time.perf_counter() - started)
    return max(peaks[1:]), statistics.median(seconds[1:])


def device_rows(device: str, width: int, layers: int, seq: int) -> dict:
    """Section 3 (see the module's docstring), on `device`."""
    dtype = torch.bfloat16
    rates = "H100"
    if device == "cuda":
        name = torch.cuda.get_device_name()
        rates = next((k for k in ("H200", "H100", "A100", "L4") if k in name), "H100")
    with torch.device("meta"):
        meta = _Decoder(width, layers).to(dtype)
    ids = torch.zeros(1, seq, dtype=torch.long)
    found = rt.estimate(
        meta,
        ids.to("meta"),
        blocks=list(meta.layers),
        device=device,
        rates=rates,
        loss_fn=lambda loss: loss,
        optimizer=torch.optim.AdamW(meta.parameters()),
    )
    torch.manual_seed(0)
    real = _Decoder(width, layers).to(device=device, dtype=dtype)
    ids = torch.randint(0, 32000, (1, seq), device=device)
    plain_peak, plain_seconds = _device_steps(copy.deepcopy(real), ids)
    every = copy.deepcopy(real)
    every.every_block = True
    every_peak, every_seconds = _device_steps(every, ids)
    del every
    budget = (
        found.plan_named("least").peak_bytes + found.plan_named("no checkpointing").peak_bytes
    ) // 2
    planned = copy.deepcopy(real)
    optimizer = torch.optim.AdamW(planned.parameters())
    rt.auto_checkpoint(
        planned, memory_budget=budget, blocks=list(planned.layers), optimizer=optimizer
    )
    remat_peak, _ = _device_steps(planned, ids)
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "rates": rates,
        "shape": {"width": width, "layers": layers, "seq": seq},
        "plain": [found.plan_named("no checkpointing").peak_bytes, plain_peak],
        "every_block": [found.plan_named("every block").peak_bytes, every_peak],
        "at_budget": [found.at(budget).peak_bytes, remat_peak, budget],
        "recompute_seconds": [
            found.plan_named("every block").recompute_seconds,
            every_seconds - plain_seconds,
        ],
        "step_seconds": [plain_seconds, every_seconds],
    }


def device_report(row: dict) -> str:
    lines = [
        f"# remat.torch.estimate on {row['device']}",
        "",
        "Produced by `python bench/estimate.py --device cuda`. A Llama-style decoder "
        f'({row["shape"]}), bf16, AdamW, estimated with device="cuda" at {row["rates"]}\'s '
        "rates, against its steps measured by `torch.cuda.max_memory_allocated` (the worst of "
        "steps 2-4).",
        "",
        "| figure | predicted | measured | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    for key, label in (
        ("plain", "peak, no checkpointing"),
        ("every_block", "peak, every block checkpointed"),
        ("at_budget", "peak, remat at a mid budget"),
    ):
        predicted, measured = row[key][0], row[key][1]
        lines.append(
            f"| {label} | {format_bytes(predicted)} | {format_bytes(measured)} "
            f"| {_ratio(predicted, measured)} |"
        )
    predicted, measured = row["recompute_seconds"]
    lines.append(
        f"| recompute of every block (step time less the plain step's) "
        f"| {format_seconds(predicted)} | {format_seconds(measured)} "
        f"| {predicted / measured if measured > 0 else float('nan'):.3f} |"
    )
    return "\n".join(lines) + "\n"


def _ratio(a: int | None, b: int | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.4f}"


def report(zoo: list[dict], shapes: list[dict]) -> str:
    lines = [
        "# remat.torch.estimate",
        "",
        "Produced by `python bench/estimate.py --out bench/results/estimate` on the CPU.",
        "",
        "## The zoo: predicted on fake tensors against measured on real ones",
        "",
        "Each model is built on the meta device and estimated with AdamW; the measured figures "
        "are the same step on the CPU (StepMemoryMeter, the second step for plain training). "
        "At the mid budget, the plan auto_checkpoint made on the real model is predicted with "
        "the estimate's step (`Estimate.evaluate`) against its measured steps; the regions "
        "column says whether the estimate's own plan (`Estimate.at`), chosen with roofline "
        "times, has the same regions as that plan, chosen with the CPU's times.",
        "",
        "| model | plain predicted / measured | least predicted / measured | mid budget "
        "predicted / measured | same regions as auto_checkpoint | estimate s |",
        "| --- | ---: | ---: | ---: | :---: | ---: |",
    ]
    for row in zoo:
        if "error" in row:
            lines.append(f"| {row['model']} | {row['error']} | | | | |")
            continue
        lines.append(
            f"| {row['model']} | {_ratio(row['plain_predicted'], row['plain_measured'])} "
            f"| {_ratio(row['least_predicted'], row['least_measured'])} "
            f"| {_ratio(row['at_budget_predicted'], row['at_budget_measured'])} "
            f"| {'yes' if row['same_regions'] else 'no'} | {row['estimate_seconds']:.1f} |"
        )
    ok = [r for r in zoo if "error" not in r]
    worst = max(
        abs(r[f"{k}_predicted"] / r[f"{k}_measured"] - 1)
        for r in ok
        for k in ("plain", "least", "at_budget")
    )
    lines += [
        "",
        f"Largest error: {worst:.3%}. Median estimate time "
        f"{statistics.median(r['estimate_seconds'] for r in ok):.1f} s.",
        "",
        "## Public shapes (bf16, AdamW, batch 1)",
        "",
        "Times at H100's peak rates: a lower bound, not a measurement.",
        "",
        "| shape | seq | starts at | no checkpointing | every block | least | 24 GiB | 80 GiB "
        "| 141 GiB | estimate s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | ---: |",
    ]
    for row in shapes:
        cells = []
        for label in DEVICES:
            at = row[label]
            cells.append(
                "does not fit"
                if at is None
                else f"{format_bytes(at['peak_bytes'])}, re-runs "
                f"{format_seconds(at['recompute_seconds'])}"
            )
        peaks = row["peaks"]
        lines.append(
            f"| {row['shape']} | {row['seq']} | {format_bytes(row['start_bytes'])} "
            f"| {format_bytes(peaks['no checkpointing'])} | {format_bytes(peaks['every block'])} "
            f"| {format_bytes(peaks['least'])} | {' | '.join(cells)} "
            f"| {row['estimate_seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results/estimate")
    parser.add_argument("--skip-shapes", action="store_true")
    parser.add_argument("--device", default=None, help="cuda (or cpu): section 3 only")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--seq", type=int, default=2048)
    args = parser.parse_args()
    if args.device is not None:
        row = device_rows(args.device, args.hidden, args.layers, args.seq)
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"estimate_{args.device}.json").write_text(json.dumps(row, indent=1))
        (out / f"estimate_{args.device}.md").write_text(device_report(row))
        print(device_report(row))
        return
    zoo = zoo_rows()
    shapes = [] if args.skip_shapes else shape_rows()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "estimate.json").write_text(json.dumps({"zoo": zoo, "shapes": shapes}, indent=1))
    (out / "estimate.md").write_text(report(zoo, shapes))


if __name__ == "__main__":
    main()
