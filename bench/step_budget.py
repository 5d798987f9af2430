"""memory_budget as the whole training step's peak, against Hugging Face's own checkpointing, on
decoders built from small configs (random weights, AdamW, the loss inside the model).

For each model: the step peak of plain training and of HF's gradient_checkpointing_enable()
(the largest over steps 2-6, once AdamW's state exists), remat's least feasible step peak
(measure(optimizer=)), and remat.integrations.transformers.enable(memory_budget=) at HF
checkpointing's peak and at halfway to plain's: every step's peak (the first included) and
the median time of steps 4-6 (remat measures its first step part by part and checks the next
two, on the CPU with a dispatch mode that slows every op; those steps are not timed). Peaks are StepMemoryMeter's (equal to torch's MemTracker on the CPU,
tests/python/test_step_memory.py); on CUDA, max_memory_allocated.

    python bench/step_budget.py [--device cuda] [--out bench/results/step_budget]

Writes OUT.json and OUT.md. About 6 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import copy
import json
import pathlib
import statistics
import sys
import time
import warnings

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from zoo import torchvision_cpu  # noqa: E402, F401  (before transformers)

# isort: split
import transformers  # noqa: E402

import remat  # noqa: E402
import remat.integrations.transformers as rit  # noqa: E402
import remat.torch as rt  # noqa: E402

transformers.logging.set_verbosity_error()
STEPS = 6
MiB = 2**20


def _models(device: str):
    """(name, config class, model class, config, batch, seq)."""
    if device == "cuda":
        big = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8)
        return [
            (
                "llama d2048 s2048 bf16",
                "LlamaConfig",
                "LlamaForCausalLM",
                dict(vocab_size=32000, num_attention_heads=16, num_key_value_heads=16, **big),
                1,
                2048,
            ),
        ]
    return [
        (
            "gpt2 d384 8 layers",
            "GPT2Config",
            "GPT2LMHeadModel",
            dict(n_layer=8, n_embd=384, n_head=6, vocab_size=5000, n_positions=256),
            4,
            256,
        ),
        (
            "llama d256 6 layers",
            "LlamaConfig",
            "LlamaForCausalLM",
            dict(
                hidden_size=256,
                intermediate_size=688,
                num_hidden_layers=6,
                num_attention_heads=4,
                num_key_value_heads=4,
                vocab_size=8000,
            ),
            4,
            256,
        ),
        (
            "qwen2 d256 6 layers",
            "Qwen2Config",
            "Qwen2ForCausalLM",
            dict(
                hidden_size=256,
                intermediate_size=688,
                num_hidden_layers=6,
                num_attention_heads=4,
                num_key_value_heads=2,
                vocab_size=8000,
            ),
            4,
            256,
        ),
    ]


def _build(config_class, model_class, config, device, dtype):
    torch.manual_seed(0)
    made = getattr(transformers, model_class)(getattr(transformers, config_class)(**config))
    made.config.use_cache = False
    return made.to(device=device, dtype=dtype).train()


def _train(model, ids, steps=STEPS):
    """AdamW steps; each step's peak and seconds."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    peaks, seconds = [], []
    for _ in range(steps):
        start = time.perf_counter()
        with rt.StepMemoryMeter(model, optimizer, ids) as meter:
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if ids.is_cuda:
            torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
        peaks.append(meter.peak_bytes)
    return peaks, seconds


def _row(label, peaks, seconds, budget=None):
    return {
        "run": label,
        "budget": budget,
        "peaks": peaks,
        "first_step_peak": peaks[0],
        "later_peak": max(peaks[1:]),
        "over_budget_steps": None if budget is None else sum(p > budget for p in peaks),
        "median_step_s": statistics.median(seconds[3:]),
    }


def bench_model(entry, device, dtype):
    name, config_class, model_class, config, batch, seq = entry
    base = _build(config_class, model_class, config, device, dtype)
    ids = torch.randint(0, 1000, (batch, seq), device=device)
    rows = []
    plain = _row("plain", *_train(copy.deepcopy(base), ids))
    rows.append(plain)
    hf_model = copy.deepcopy(base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf_model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False}
        )
    hf = _row("HF gradient_checkpointing_enable", *_train(hf_model, ids))
    rows.append(hf)
    probe = copy.deepcopy(base)
    measured = rt.measure(
        probe,
        ids,
        labels=ids,
        optimizer=torch.optim.AdamW(probe.parameters(), lr=1e-4),
        loss_fn=lambda out: out.loss,
    )
    least = measured.least_budget_bytes
    for label, budget in (
        ("remat at HF's peak", hf["later_peak"]),
        ("remat halfway to plain", (hf["later_peak"] + plain["later_peak"]) // 2),
    ):
        model = copy.deepcopy(base)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                handle = rit.enable(model, memory_budget=budget)
                row = _row(label, *_train(model, ids), budget=budget)
            row["warnings"] = [str(w.message)[:200] for w in caught if "remat" in str(w.message)]
            row["predicted_peak"] = handle.plan.step.predicted_peak_bytes
        except remat.InputError as error:
            row = {"run": label, "budget": budget, "refused": str(error)[:300]}
        rows.append(row)
    return {"model": name, "device": device, "least_step_peak": least, "rows": rows}


def _markdown(results) -> str:
    lines = [
        "# memory_budget: the whole step's peak, against HF's checkpointing",
        "",
        "Generated by `python bench/step_budget.py`. Peaks: StepMemoryMeter (MemTracker's count "
        "on the CPU, max_memory_allocated on CUDA), AdamW, the loss inside the model.",
        "",
    ]
    for result in results:
        lines += [
            f"## {result['model']} ({result['device']})",
            "",
            f"remat's least feasible step peak (measure): "
            f"{result['least_step_peak'] / MiB:.1f} MiB",
            "",
            "| run | budget MiB | first step MiB | later steps MiB | steps over | median step s |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for row in result["rows"]:
            budget = "" if row.get("budget") is None else f"{row['budget'] / MiB:.1f}"
            if "refused" in row:
                lines.append(f"| {row['run']} | {budget} | refused: least above the budget | | | |")
                continue
            lines.append(
                f"| {row['run']} | {budget} | {row['first_step_peak'] / MiB:.1f} | "
                f"{row['later_peak'] / MiB:.1f} | {row['over_budget_steps'] or 0} | "
                f"{row['median_step_s']:.3f} |"
            )
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "step_budget"))
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    torch.set_num_threads(min(2, torch.get_num_threads()))
    results = [bench_model(entry, args.device, dtype) for entry in _models(args.device)]
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    out.with_suffix(".md").write_text(_markdown(results))
    print(_markdown(results))


if __name__ == "__main__":
    main()
