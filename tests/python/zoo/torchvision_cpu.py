"""Makes torchvision 0.28.0's PyPI wheel import on torch 2.13.0's CPU build.

torchvision 0.28.0 is the release made for torch 2.13, but PyPI carries only its CUDA build: its
`_C.so` links libtorch_cuda and fails to load on the CPU torch, which torchvision tolerates (its
ops are then absent), except that `_meta_registrations` registers fake kernels for
`torchvision::nms` and `torchvision::qnms` unconditionally, and registering one for an operator
that does not exist raises. Transformers imports torchvision whenever it is installed, so that
error breaks `import transformers` too.

Defining the two schemas first (as `_C.so` would) lets the import finish. They get no kernels:
calling `torchvision.ops.nms` raises torch's "no kernel" error, never a wrong answer. The model
zoo needs only torchvision's models, which are plain torch. Import this module before
torchvision or transformers.
"""

from __future__ import annotations

import torch

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_library = None  # kept alive: a Library that is collected takes its definitions with it


def install() -> None:
    """Defines the missing schemas when torchvision's own ops did not load; idempotent."""
    global _library
    if _library is not None:
        return
    missing = [name for name in _SCHEMAS if not _defined(name)]
    if not missing:
        return
    _library = torch.library.Library("torchvision", "FRAGMENT")
    for name in missing:
        _library.define(_SCHEMAS[name])


def _defined(name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
        return True
    except RuntimeError:
        return False


install()
