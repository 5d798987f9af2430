"""Every causal-LM model type transformers ships, built from a tiny config with random weights,
trained through remat.integrations.transformers.enable at the least budget measure() reports
and at a middle one, against the same model trained plainly (gradients torch.equal, 2 steps).

    python bench/hf_sweep.py full bench/results/hf_sweep.jsonl [model types ...]
    python bench/hf_sweep.py summary bench/results/hf_sweep.jsonl > bench/results/hf_sweep.md

Each type runs in a forked child (120 s at most, one thread). Statuses: ok, remat-error,
grads-differ, not-applicable (the plain model fails too: it needs images, or a main model),
build-skip (no tiny config). About 7 minutes on 2 cores.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import pathlib
import signal
import sys
import time
import traceback

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "bench"))
import transformers  # noqa: E402
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: E402

import remat.integrations.transformers as rit  # noqa: E402
import remat.torch  # noqa: E402
from hf_sweep_configs import OVERRIDES, POST, build_config  # noqa: E402
from zoo import torchvision_cpu  # noqa: E402, F401  (before transformers)

torch.set_num_threads(1)
transformers.logging.set_verbosity_error()
logging.getLogger("remat").setLevel(logging.ERROR)


def _err(e):
    return f"{type(e).__name__}: {str(e)[:200]}"


def _tb(e):
    return "".join(traceback.format_exception(type(e), e, e.__traceback__))[-1500:]


def step_grads(model, ids, step):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(step)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return {
        n: (None if p.grad is None else p.grad.detach().clone())
        for n, p in model.named_parameters()
    }, float(out.loss)


def diff(a, b):
    bad = []
    for n in a:
        x, y = a[n], b.get(n, "missing")
        if x is None or y is None:
            if not (x is None and y is None):
                bad.append(n)
        elif isinstance(y, str) or x.shape != y.shape or not torch.equal(x, y):
            bad.append(n)
    return bad


def build(model_type: str, r: dict, shapes: tuple = ((2, 16),)) -> tuple | None:
    """The type's model from a tiny config, in training mode, an untouched copy of it, a batch
    of token ids (of the first of `shapes` a plain step runs at), and its layers as enable()
    finds them; None (with `r`'s status and error set) where it cannot be built or trained
    plainly. `r` also gets its build figures."""
    from transformers import AutoModelForCausalLM

    t0 = time.time()
    try:
        config = build_config(model_type, OVERRIDES.get(model_type))
    except Exception as e:
        r.update(status="build-skip", stage="config", error=_err(e), tb=_tb(e))
        return None
    torch.manual_seed(0)
    model = None
    for attn in ("sdpa", "eager"):
        try:
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
            r["attn"] = attn
            break
        except Exception as e:
            last = e
    if model is None:
        r.update(status="not-applicable", stage="model-build", error=_err(last), tb=_tb(last))
        return None
    r["build_s"] = round(time.time() - t0, 2)
    r["params"] = sum(p.numel() for p in model.parameters())
    r["class"] = type(model).__name__
    if r["build_s"] > 60:
        r.update(status="build-skip", stage="slow-build", error=f"build took {r['build_s']}s")
        return None
    if model_type in POST:
        POST[model_type](model)
    model.train()
    plain = copy.deepcopy(model)
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int):
        vocab = getattr(config.get_text_config(), "vocab_size", 256)
    for shape in shapes:
        g = torch.Generator().manual_seed(1234)
        ids = torch.randint(0, min(vocab, 256), shape, generator=g)
        try:
            step_grads(copy.deepcopy(plain), ids, 0)  # on a copy: some models keep state
            break
        except Exception as e:
            r.update(status="not-applicable", stage="plain-step", error=_err(e), tb=_tb(e))
    else:
        return None
    for failed in ("status", "stage", "error", "tb"):  # a shorter shape's plain step ran
        r.pop(failed, None)
    r["shape"] = list(ids.shape)
    try:
        layers = rit.find_layers(model)
        r["n_layers_found"] = len(layers)
    except Exception as e:
        r.update(status="remat-error", stage="find_layers", error=_err(e), tb=_tb(e))
        return None
    return model, plain, ids, layers


def run(model_type: str, mode: str = "full") -> dict:
    r: dict = {"type": model_type}
    t0 = time.time()
    built = build(model_type, r)
    if built is None:
        return r
    model, plain, ids, layers = built
    ref = [step_grads(plain, ids, s) for s in range(2)]
    r["loss"] = ref[0][1]
    if mode == "build":
        r["status"] = "built"
        return r
    try:
        m = remat.torch.measure(
            model, input_ids=ids, labels=ids, blocks=layers, loss_fn=lambda o: o.loss
        )
        least, none = m.least_activation_budget_bytes, m.no_checkpoint_bytes
        r["least"], r["no_ckpt"] = least, none
    except Exception as e:
        r.update(status="remat-error", stage="measure", error=_err(e), tb=_tb(e))
        return r
    r["runs"] = {}
    for label, budget in (("least", least), ("mid", (least + none) // 2)):
        handle = None
        try:
            handle = rit.enable(model, activation_budget=budget)
            got = [step_grads(model, ids, s) for s in range(2)]
        except Exception as e:
            r.update(status="remat-error", stage=f"train-{label}", error=_err(e), tb=_tb(e))
            return r
        finally:
            if handle is not None:
                try:
                    handle.remove()
                except Exception as e:
                    r.setdefault("remove_errors", []).append(_err(e))
        bad = sorted(set(diff(ref[0][0], got[0][0])) | set(diff(ref[1][0], got[1][0])))
        r["runs"][label] = {
            "budget": budget,
            "n_bad": len(bad),
            "bad": bad[:10],
            "loss_eq": [ref[s][1] == got[s][1] for s in range(2)],
        }
    nbad = max(v["n_bad"] for v in r["runs"].values())
    if nbad:
        # is the plain model itself deterministic?
        again = step_grads(plain, ids, 0)
        r["plain_repeat_bad"] = len(diff(ref[0][0], again[0]))
        r["status"] = "grads-differ"
        r["n_bad"] = nbad
    else:
        r["status"] = "ok"
    r["total_s"] = round(time.time() - t0, 2)
    return r


TIMEOUT = 120


def one(model_type, mode, job=None):
    """`job(model_type, mode)` (default: run) in a forked child, at most TIMEOUT seconds."""
    job = job or run
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            import warnings

            warnings.simplefilter("ignore")
            res = job(model_type, mode)
        except BaseException as e:  # noqa: BLE001
            res = {
                "type": model_type,
                "status": "harness-error",
                "error": f"{type(e).__name__}: {str(e)[:200]}",
            }
        data = json.dumps(res, default=str).encode()
        with os.fdopen(wfd, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(wfd)
    start = time.time()
    chunks = []
    os.set_blocking(rfd, False)
    while True:
        try:
            b = os.read(rfd, 1 << 16)
            if b:
                chunks.append(b)
        except BlockingIOError:
            pass
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            while True:
                try:
                    b = os.read(rfd, 1 << 16)
                except BlockingIOError:
                    break
                if not b:
                    break
                chunks.append(b)
            break
        if time.time() - start > TIMEOUT:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(rfd)
            return {"type": model_type, "status": "timeout", "error": f">{TIMEOUT}s"}
        time.sleep(0.05)
    os.close(rfd)
    try:
        res = json.loads(b"".join(chunks))
    except Exception:
        res = {"type": model_type, "status": "crash", "error": f"child exit status {status}"}
    res["wall_s"] = round(time.time() - start, 2)
    return res


def summary(path: str) -> str:
    """The sweep's results as a Markdown table: counts by status, then every type not ok."""
    rows = [json.loads(line) for line in open(path)]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    lines = [
        f"{len(rows)} causal-LM types of transformers {transformers.__version__}, "
        f"torch {torch.__version__}:",
        "",
        "| status | types |",
        "| --- | ---: |",
        *(f"| {status} | {n} |" for status, n in sorted(counts.items())),
        "",
        "| type | status | stage | error |",
        "| --- | --- | --- | --- |",
    ]
    for row in rows:
        if row["status"] != "ok":
            error = " ".join((row.get("error") or "").replace("|", "/").split())[:120]
            lines.append(f"| {row['type']} | {row['status']} | {row.get('stage', '')} | {error} |")
    return "\n".join(lines)


def sweep(out: str, types: list[str], mode: str, job=None, detail=lambda result: ()) -> None:
    """`job` (default: run) on each type in a forked child (see one), each result appended to
    `out` as a JSON line and printed on a line, with `detail(result)` before its time."""
    with open(out, "a") as f:
        for model_type in types:
            result = one(model_type, mode, job)
            f.write(json.dumps(result, default=str) + "\n")
            f.flush()
            error = (result.get("error") or "")[:150]
            status, stage = result.get("status"), result.get("stage", "")
            print(
                model_type, status, stage, error, *detail(result), result.get("wall_s"), flush=True
            )


def main():
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "summary":
        print(summary(out))
        return
    sweep(out, sys.argv[3:] or list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), mode)


if __name__ == "__main__":
    main()
