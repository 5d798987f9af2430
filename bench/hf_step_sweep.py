"""Every causal-LM model type transformers ships, trained with AdamW through
remat.integrations.transformers.enable(memory_budget=) at three whole-step budgets: the least
step peak measure() reports, halfway from it to the plain step's peak, and the peak of the same
steps under HF's gradient checkpointing (where the model supports it). Each step's peak is
metered (StepMemoryMeter, the CPU count) and must be within the budget, the first step
included; the parameters after each step must be torch.equal to plain training's.

    python bench/hf_step_sweep.py run bench/results/hf_step_sweep.jsonl [model types ...]
    python bench/hf_step_sweep.py summary bench/results/hf_step_sweep.jsonl \
        > bench/results/hf_step_sweep.md

Types run in forked children (hf_sweep.one: 120 s at most, one thread). Statuses: ok, over
(a step peaked over its budget), params-differ, least-above-hf (remat refused HF's peak, below
its least), remat-error, not-applicable and build-skip (as in hf_sweep). The optimizer is not given to enable(): remat finds it at its first step.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from typing import Any

import torch

import hf_sweep  # noqa: E402  (puts tests/python on the path, imports transformers first)
import remat
import remat.integrations.transformers as rit
import remat.torch as rt

STEPS = 3
# Sequences long enough that activations, not the optimizer's step, set most types' plain peak;
# the shorter one where a tiny config's positions run out.
SHAPES = ((4, 128), (2, 16))


def train(model: torch.nn.Module, ids: torch.Tensor) -> tuple[list[int], list[list[Any]]]:
    """STEPS AdamW steps of `model` on `ids`, each metered: their peaks, and the parameters
    after each."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    peaks, params = [], []
    for step in range(STEPS):
        torch.manual_seed(step)
        with rt.StepMemoryMeter(model, optimizer, ids) as meter:
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        peaks.append(meter.peak_bytes)
        params.append([p.detach().clone() for p in model.parameters()])
    return peaks, params


def hf_checkpointed(plain: torch.nn.Module) -> torch.nn.Module | None:
    """A copy of `plain` with HF's gradient checkpointing on (non-reentrant, as the zoo bench
    runs it), or None where the model does not support it."""
    model = copy.deepcopy(plain)
    kwargs = {"use_reentrant": False}
    try:
        enable = getattr(model, "activation_checkpointing_enable", None)
        if enable is not None:
            enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    except ValueError:  # "does not support gradient checkpointing"
        return None
    return model


def differ(a: list[list[torch.Tensor]], b: list[list[torch.Tensor]]) -> int:
    """How many parameters differ after any step."""
    return sum(
        not torch.equal(x, y) for step_a, step_b in zip(a, b) for x, y in zip(step_a, step_b)
    )


def run(model_type: str, mode: str = "run") -> dict[str, Any]:
    r: dict[str, Any] = {"type": model_type}
    t0 = time.time()
    built = hf_sweep.build(model_type, r, SHAPES)
    if built is None:
        return r
    model, plain, ids, layers = built
    plain_peaks, plain_params = train(copy.deepcopy(plain), ids)
    r["plain_peaks"] = plain_peaks
    try:
        copied = copy.deepcopy(model)
        m = rt.measure(
            copied,
            input_ids=ids,
            labels=ids,
            blocks=rit.find_layers(copied),
            loss_fn=lambda o: o.loss,
            optimizer=torch.optim.AdamW(copied.parameters(), lr=1e-3),
        )
        least, plain_peak = m.least_budget_bytes, m.no_checkpoint_step_bytes
    except Exception as e:
        r.update(status="remat-error", stage="measure", error=hf_sweep._err(e), tb=hf_sweep._tb(e))
        return r
    r["least"], r["plain_predicted"] = least, plain_peak
    budgets = {"least": least, "mid": (least + plain_peak) // 2}
    hf = hf_checkpointed(plain)
    if hf is not None:
        hf_peaks, hf_params = train(hf, ids)
        r["hf_peaks"], r["hf_n_differ"] = hf_peaks, differ(plain_params, hf_params)
        budgets["hf"] = max(hf_peaks)
        r["least_within_hf"] = least <= budgets["hf"]
    r["runs"] = {}
    status = "ok"
    for label, budget in budgets.items():
        trained = copy.deepcopy(model)
        handle = None
        try:
            handle = rit.enable(trained, memory_budget=budget)
            peaks, params = train(trained, ids)
            warnings = list(handle.warnings)
        except Exception as e:
            if label == "hf" and isinstance(e, remat.InputError):
                # remat's least step peak is above HF's: the budget is refused, as it must be.
                r["runs"]["hf"] = {"budget": budget, "refused": hf_sweep._err(e)}
                status = "least-above-hf"
                continue
            r.update(
                status="remat-error",
                stage=f"train-{label}",
                error=hf_sweep._err(e),
                tb=hf_sweep._tb(e),
            )
            return r
        finally:
            if handle is not None:
                handle.remove()
        run_ = {
            "budget": budget,
            "peaks": peaks,
            "over": [p - budget for p in peaks if p > budget],
            "n_differ": differ(plain_params, params),
            "warnings": [str(w)[:200] for w in warnings],
        }
        r["runs"][label] = run_
        if label == "hf":
            run_["ratio_to_hf"] = max(peaks) / budget
        if run_["over"] and status == "ok":
            status = "over"
        if run_["n_differ"] and status == "ok":
            status = "params-differ"
    r["status"] = status
    r["total_s"] = round(time.time() - t0, 2)
    return r


def summary(path: str) -> str:
    """The sweep's results as Markdown: counts by status, each type's peaks against its budgets,
    and every type not ok with its error."""
    rows = [json.loads(line) for line in open(path)]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    trained = [
        row for row in rows if row["status"] in ("ok", "over", "params-differ", "least-above-hf")
    ]
    with_hf = [row for row in trained if "hf" in row["runs"]]
    ran_hf = [row for row in with_hf if "peaks" in row["runs"]["hf"]]
    lines = [
        f"{len(rows)} causal-LM types of transformers {hf_sweep.transformers.__version__}, "
        f"torch {torch.__version__}, {STEPS} AdamW steps at each budget, `python "
        "bench/hf_step_sweep.py run FILE`:",
        "",
        "| status | types |",
        "| --- | ---: |",
        *(f"| {status} | {n} |" for status, n in sorted(counts.items())),
        "",
    ]
    if trained:
        lines += [
            "| budget | types | steps over it | highest peak / budget |",
            "| --- | ---: | ---: | ---: |",
        ]
        for label in ("least", "mid", "hf"):
            runs = [
                row["runs"][label]
                for row in trained
                if label in row["runs"] and "peaks" in row["runs"][label]
            ]
            over = sum(len(run["over"]) for run in runs)
            worst = max(max(run["peaks"]) / run["budget"] for run in runs)
            lines.append(f"| {label} | {len(runs)} | {over} of {STEPS * len(runs)} | {worst:.4f} |")
        ratios = sorted(row["runs"]["hf"]["ratio_to_hf"] for row in ran_hf)
        above = [row["type"] for row in with_hf if not row["least_within_hf"]]
        lines += [
            "",
            f"HF's gradient checkpointing trained {len(with_hf)} of them. remat's least step peak "
            f"is within HF's measured step peak on {len(with_hf) - len(above)} of {len(with_hf)}"
            + (f" (not: {', '.join(above)})" if above else "")
            + ". At HF's peak as the budget, remat's step peak / HF's: median "
            f"{ratios[len(ratios) // 2]:.4f}, highest {ratios[-1]:.4f}.",
            "",
        ]
    lines += ["| type | status | stage | error |", "| --- | --- | --- | --- |"]
    for row in rows:
        if row["status"] != "ok":
            error = row.get("error") or ""
            if row["status"] == "least-above-hf":
                run = row["runs"]["hf"]
                error = f"least {row['least']} B, HF's step peak {run['budget']} B"
            if row["status"] == "over":
                error = "; ".join(
                    f"{label}: {run['over']} B over {run['budget']}"
                    for label, run in row["runs"].items()
                    if run["over"]
                )
            error = " ".join(error.replace("|", "/").split())[:160]
            lines.append(f"| {row['type']} | {row['status']} | {row.get('stage', '')} | {error} |")
    return "\n".join(lines)


def main() -> None:
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "summary":
        print(summary(out))
        return
    types = sys.argv[3:] or list(hf_sweep.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)

    def over(result: dict[str, Any]) -> tuple[Any, ...]:
        return ({label: run.get("over") for label, run in result.get("runs", {}).items()},)

    hf_sweep.sweep(out, types, mode, job=run, detail=over)


if __name__ == "__main__":
    main()
