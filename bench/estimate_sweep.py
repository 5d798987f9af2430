"""remat.torch.estimate on every causal-LM type transformers ships, built from a tiny config
(bench/hf_sweep_configs.py) on the meta device, against the same model's plain AdamW step
measured on the CPU with real tensors.

    python bench/estimate_sweep.py run bench/results/estimate/sweep.jsonl [model types ...]
    python bench/estimate_sweep.py summary bench/results/estimate/sweep.jsonl > .../sweep.md

Statuses: ok (the plain peak predicted within 2% or 1 MiB of the measured one), off (outside
it), estimate-error (estimate raised), not-applicable and build-skip (as bench/hf_sweep.py:
the plain model cannot train from a batch of tokens, or has no tiny config). Each type runs in
a forked child (120 s at most, one thread).
"""

from __future__ import annotations

import copy
import json
import sys
import time

import torch

import hf_sweep  # noqa: E402  (puts tests/python and bench on the path, imports transformers)
import remat.torch as rt  # noqa: E402
from estimate import _plain_peak  # noqa: E402  (bench/estimate.py)
from hf_sweep_configs import OVERRIDES, POST, build_config  # noqa: E402

MiB = 2**20


def run(model_type: str, _mode: str) -> dict:
    from transformers import AutoModelForCausalLM

    row: dict = {"type": model_type}
    try:
        config = build_config(model_type, OVERRIDES.get(model_type))
    except Exception as error:
        return {**row, "status": "build-skip", "error": hf_sweep._err(error)}
    model = meta = None
    for attention in ("sdpa", "eager"):
        try:
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(config, attn_implementation=attention)
            with torch.device("meta"):
                meta = AutoModelForCausalLM.from_config(config, attn_implementation=attention)
            break
        except Exception as error:
            last = error
    if model is None or meta is None:
        return {**row, "status": "not-applicable", "error": hf_sweep._err(last)}
    for built in (model, meta):
        if model_type in POST:
            POST[model_type](built)
        built.train()
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int):
        vocab = getattr(config.get_text_config(), "vocab_size", 256)
    ids = torch.randint(0, min(vocab, 256), (2, 16), generator=torch.Generator().manual_seed(1))
    try:
        measured = _plain_peak(
            copy.deepcopy(model), lambda m: m(input_ids=ids, labels=ids).loss, ids
        )
    except Exception as error:
        return {**row, "status": "not-applicable", "error": hf_sweep._err(error)}
    started = time.perf_counter()
    try:
        found = rt.estimate(
            meta,
            input_ids=ids,
            labels=ids,
            loss_fn=lambda out: out.loss,
            optimizer=torch.optim.AdamW(meta.parameters()),
        )
    except Exception as error:
        return {**row, "status": "estimate-error", "error": hf_sweep._err(error)}
    predicted = found.plan_named("no checkpointing").peak_bytes
    close = abs(predicted - measured) <= max(measured // 50, MiB)
    return {
        **row,
        "status": "ok" if close else "off",
        "predicted": predicted,
        "measured": measured,
        "ratio": predicted / measured,
        "estimate_s": round(time.perf_counter() - started, 2),
    }


def summary(path: str) -> str:
    rows = [json.loads(line) for line in open(path)]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    ratios = sorted(r["ratio"] for r in rows if "ratio" in r)
    lines = [
        f"# remat.torch.estimate on every causal-LM type ({len(rows)} types, transformers "
        f"{hf_sweep.transformers.__version__}, torch {torch.__version__})",
        "",
        "Produced by `python bench/estimate_sweep.py`: each type from a tiny config on the meta "
        "device, its plain AdamW step's peak predicted on fake tensors against the same step "
        "measured on the CPU.",
        "",
        "| status | types |",
        "| --- | ---: |",
        *(f"| {status} | {n} |" for status, n in sorted(counts.items())),
        "",
    ]
    if ratios:
        lines += [
            f"Predicted / measured over the {len(ratios)} types estimated: from "
            f"{ratios[0]:.4f} to {ratios[-1]:.4f}, median {ratios[len(ratios) // 2]:.4f}.",
            "",
        ]
    lines += ["| type | status | predicted / measured or error |", "| --- | --- | --- |"]
    for row in rows:
        if row["status"] != "ok":
            detail = f"{row['ratio']:.4f}" if "ratio" in row else row.get("error", "")
            detail = " ".join(str(detail).replace("|", "/").split())[:120]
            lines.append(f"| {row['type']} | {row['status']} | {detail} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "summary":
        print(summary(out), end="")
        return
    types = sys.argv[3:] or list(hf_sweep.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    hf_sweep.sweep(out, types, mode, job=run, detail=lambda result: (result.get("ratio", ""),))


if __name__ == "__main__":
    main()
