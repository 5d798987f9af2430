"""python -m remat estimate: will a training step fit, and with which checkpoint plan, estimated
on fake tensors from a model's configuration (no weights, no download, no device).

    python -m remat estimate --hf-config config.json --batch 8 --seq 4096 \\
        --dtype bfloat16 --optimizer adamw --memory 80GiB
    python -m remat estimate --timm vit_base_patch16_224 --batch 64 --image-size 224

Exit 0: estimated (and, with --memory, some plan fits); 1: no plan fits --memory; 2: bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable

import torch

from .units import parse_bytes

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer] | None] = {
    "adamw": lambda params: torch.optim.AdamW(params),
    "adam": lambda params: torch.optim.Adam(params),
    "sgd": lambda params: torch.optim.SGD(params, lr=0.01, momentum=0.9),
    "none": None,
}


class _InputError(Exception):
    """A reason the command cannot run, stated for the user."""


def add_parser(commands: Any) -> None:
    found = commands.add_parser(
        "estimate", help="estimate a training step's peak memory, by checkpoint plan"
    )
    model = found.add_mutually_exclusive_group(required=True)
    model.add_argument("--hf-config", help="a transformers config.json (a causal LM)")
    model.add_argument("--timm", help="a timm model name")
    found.add_argument("--batch", type=int, required=True)
    found.add_argument("--seq", type=int, help="sequence length (--hf-config)")
    found.add_argument("--image-size", type=int, help="image side in pixels (--timm)")
    found.add_argument("--dtype", choices=sorted(_DTYPES), default="float32")
    found.add_argument("--optimizer", choices=sorted(_OPTIMIZERS), default="adamw")
    found.add_argument("--memory", help="the device's memory for the step, e.g. 80GiB")
    found.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="the step's device")
    found.add_argument("--rates", default="H100", help="device whose peak rates time the ops")
    found.add_argument("--json", action="store_true", help="print JSON instead of the table")


def run(args: argparse.Namespace) -> int:
    from .eager.run.estimation import estimate

    try:
        budget = None if args.memory is None else parse_bytes(args.memory, "memory")
        if args.batch < 1:
            raise _InputError(f"batch: must be at least 1, got {args.batch}")
        model, inputs, kwargs, loss_fn = (_hf if args.hf_config else _timm)(args)
        factory = _OPTIMIZERS[args.optimizer]
        optimizer = None if factory is None else factory(model.parameters())
        found = estimate(
            model,
            *inputs,
            optimizer=optimizer,
            loss_fn=loss_fn,
            memory_budget=budget,
            device=args.device,
            rates=args.rates,
            **kwargs,
        )
    except (_InputError, ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(_as_json(found), separators=(",", ":")))
    else:
        print(found.table())
    return 0 if budget is None or found.fits(budget) else 1


def _hf(args: argparse.Namespace) -> tuple[Any, tuple[Any, ...], dict[str, Any], Any]:
    if args.seq is None or args.seq < 1:
        raise _InputError("seq: give the sequence length (--seq N) with --hf-config")
    try:
        import transformers
    except ImportError as error:
        raise _InputError(f"hf-config: needs transformers ({error})") from None
    try:
        config = transformers.AutoConfig.from_pretrained(args.hf_config)
    except (OSError, ValueError, ImportError) as error:
        raise _InputError(f"hf-config: cannot read {args.hf_config!r}: {error}") from None
    config.use_cache = False
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=_DTYPES[args.dtype])
    model.train()
    ids = torch.zeros(args.batch, args.seq, dtype=torch.long, device="meta")
    return model, (ids,), {"labels": ids}, lambda output: output.loss


def _timm(args: argparse.Namespace) -> tuple[Any, tuple[Any, ...], dict[str, Any], Any]:
    if args.image_size is None or args.image_size < 1:
        raise _InputError("image-size: give the image side (--image-size N) with --timm")
    try:
        import timm
    except ImportError as error:
        raise _InputError(f"timm: needs timm ({error})") from None
    with torch.device("meta"):
        try:
            model = timm.create_model(args.timm, pretrained=False)
        except RuntimeError as error:
            raise _InputError(f"timm: {error}") from None
        model = model.to(_DTYPES[args.dtype])
    model.train()
    size = args.image_size
    images = torch.zeros(args.batch, 3, size, size, dtype=_DTYPES[args.dtype], device="meta")

    def loss_fn(output: torch.Tensor) -> torch.Tensor:
        labels = torch.zeros(output.shape[0], dtype=torch.long, device=output.device)
        return torch.nn.functional.cross_entropy(output.float(), labels)

    return model, (images,), {}, loss_fn


def _as_json(found: Any) -> dict[str, Any]:
    return {
        "device": str(found.device),
        "rates": found.rates.name,
        "parameter_bytes": found.parameter_bytes,
        "gradient_bytes": found.gradient_bytes,
        "optimizer_state_bytes": found.optimizer_state_bytes,
        "start_bytes": found.start_bytes,
        "memory_budget": found.memory_budget,
        "fits": None if found.memory_budget is None else found.fits(found.memory_budget),
        "plans": [
            {
                "name": row.name,
                "peak_bytes": row.peak_bytes,
                "recompute_seconds": row.recompute_seconds,
                "regions": None if row.plan is None else [list(r) for r in row.plan.regions],
            }
            for row in found.plans
        ],
    }
