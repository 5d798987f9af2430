"""memory_budget under FSDP2 (fully_shard on every decoder layer and the model), one rank: plain
FSDP2, and remat.integrations.transformers.enable(memory_budget=) at halfway between HF
checkpointing's step peak and plain's. Every step's peak (StepMemoryMeter: max_memory_allocated on
CUDA, the live-storage count on the CPU) against the budget, gradients against plain FSDP2's.

    python bench/fsdp_step_budget.py --device cuda   # NCCL, Llama d1024 x 8, seq 2048, bf16
    python bench/fsdp_step_budget.py                 # CPU, gloo, a small Llama (a smoke test)

Writes OUT.json and OUT.md (default bench/results/fsdp_step_budget_<device>).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import pathlib
import sys
import tempfile

import torch
import torch.distributed as dist

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
from zoo import torchvision_cpu  # noqa: E402, F401  (before transformers)

# isort: split
import transformers  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

import remat.integrations.transformers as rit  # noqa: E402
import remat.torch as rt  # noqa: E402

STEPS = 4
MiB = 2**20


def build(device: str) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    if device == "cuda":
        config = transformers.LlamaConfig(
            hidden_size=1024,
            intermediate_size=2816,
            num_hidden_layers=8,
            num_attention_heads=8,
            num_key_value_heads=8,
            vocab_size=32000,
        )
        batch, seq, dtype = 2, 2048, torch.bfloat16
    else:
        config = transformers.LlamaConfig(
            hidden_size=128,
            intermediate_size=344,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=4,
            vocab_size=2000,
        )
        batch, seq, dtype = 2, 128, torch.float32
    config.use_cache = False
    model = transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).train()
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
    return model, ids


def sharded(model: torch.nn.Module) -> torch.nn.Module:
    for layer in model.model.layers:
        fully_shard(layer)
    return fully_shard(model)


def train(model: torch.nn.Module, ids: torch.Tensor) -> tuple[list[int], list[list[torch.Tensor]]]:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    peaks, grads = [], []
    for _ in range(STEPS):
        with rt.StepMemoryMeter(model, optimizer, ids, device=ids.device) as meter:
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
        peaks.append(meter.peak_bytes)
        grads.append([p.grad.to_local().clone() for p in model.parameters()])
        optimizer.zero_grad(set_to_none=True)
    return peaks, grads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = pathlib.Path(args.out or ROOT / "bench" / "results" / f"fsdp_step_budget_{args.device}")
    store = tempfile.mktemp()
    backend = "nccl" if args.device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=0, world_size=1)
    try:
        base, ids = build(args.device)
        plain_peaks, plain_grads = train(sharded(copy.deepcopy(base)), ids)
        checkpointed = copy.deepcopy(base)
        checkpointed.activation_checkpointing_enable()
        hf_peaks, _ = train(sharded(checkpointed), ids)
        budget = (max(hf_peaks) + max(plain_peaks)) // 2
        model = copy.deepcopy(base)
        handle = rit.enable(model, memory_budget=budget)  # before sharding, as torchtitan
        peaks, grads = train(sharded(model), ids)
        equal = all(
            torch.equal(a, b)
            for step, plain in zip(grads, plain_grads)
            for a, b in zip(step, plain)
        )
        result = {
            "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
            "plain_peaks": plain_peaks,
            "hf_checkpointing_peaks": hf_peaks,
            "budget": budget,
            "remat_peaks": peaks,
            "steps_over": sum(p > budget for p in peaks),
            "predicted": handle.plan.step.predicted_peak_bytes if handle.plan.step else None,
            "regions": len(handle.plan.regions),
            "grads_equal": equal,
            "warnings": handle.warnings,
        }
    finally:
        dist.destroy_process_group()
        if os.path.exists(store):
            os.remove(store)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    lines = [
        f"# memory_budget under FSDP2, one rank ({result['device']})",
        "",
        f"Command: `python bench/fsdp_step_budget.py {' '.join(sys.argv[1:])}`.",
        "",
        "| run | step peaks MiB |",
        "| --- | --- |",
        f"| plain FSDP2 | {', '.join(f'{p / MiB:.1f}' for p in plain_peaks)} |",
        f"| HF checkpointing | {', '.join(f'{p / MiB:.1f}' for p in hf_peaks)} |",
        f"| remat at {budget / MiB:.1f} MiB | {', '.join(f'{p / MiB:.1f}' for p in peaks)} |",
        "",
        f"Steps over the budget: {result['steps_over']} of {STEPS}; predicted "
        f"{(result['predicted'] or 0) / MiB:.1f} MiB; {result['regions']} regions; gradients "
        f"equal to plain FSDP2's: {equal}.",
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
