"""Fake kernels for ops whose fake implementation in torch refuses what the real kernels run.

``aten._grouped_mm`` (Mixture-of-Experts layers in transformers) runs in float32 and float16 on
the CPU and on CUDA (a fallback beside the bfloat16 kernel), but torch's meta kernel, which fake
tensors use, checks for bfloat16 and raises. Under :class:`FakeKernels` such a call gets its
output from torch's own rule for the grouped matmul's output (its shape, dtype and strides),
with the dtype check left out. Every other op, and any call the rule cannot serve, runs as
before.

Enter it right after the ``FakeTensorMode`` it serves, so that the modes entered after it (the
memory count, the roofline clock) see the op and its output as they would see the real one.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def _grouped_mm_output_rule() -> Callable[..., torch.Tensor] | None:
    # torch's meta kernel builds its output with this helper after its checks; absent from a
    # torch that lays the kernel out otherwise, where the op runs (and raises) as torch has it.
    import torch._meta_registrations as meta

    return getattr(meta, "_create_grouped_mm_output_tensor", None)


class FakeKernels(TorchDispatchMode):
    """Serves ``aten._grouped_mm`` on fake tensors of dtypes other than bfloat16."""

    def __init__(self) -> None:
        super().__init__()
        self._grouped_mm_output = _grouped_mm_output_rule()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten._grouped_mm.default and self._grouped_mm_output is not None:
            output = self._grouped_mm(*args, **kwargs)
            if output is not None:
                return output
        return func(*args, **kwargs)

    def _grouped_mm(
        self,
        mat_a: torch.Tensor,
        mat_b: torch.Tensor,
        offs: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        out_dtype: torch.dtype | None = None,
    ) -> torch.Tensor | None:
        if mat_a.dtype == torch.bfloat16 or mat_a.dtype != mat_b.dtype:
            return None  # torch's own kernel serves it, or refuses it as the real one does
        if not mat_a.is_floating_point() or (
            offs is None and (mat_a.dim() == 2 or mat_b.dim() == 2)
        ):
            return None
        if mat_a.dim() == 3 or mat_b.dim() == 3:
            torch._check(
                mat_a.size(-1) == mat_b.size(-2),
                lambda: "contraction dimension of mat_a and mat_b must match",
            )
        assert self._grouped_mm_output is not None
        return self._grouped_mm_output(mat_a, mat_b, offs, out_dtype)
