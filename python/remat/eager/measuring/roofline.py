"""Roofline times for a step run on fake tensors, where no kernel runs and no clock means
anything.

Each op takes max(FLOPs / peak FLOP rate, bytes moved / memory bandwidth) plus a fixed launch
cost, at a named device's peak rates: FLOPs from torch.utils.flop_counter's formulas (matrix
products, convolutions, attention), bytes moved as the op's tensor inputs and outputs, read and
written once. Views move nothing and cost nothing. This is a lower bound on a real kernel's
time (no kernel reaches the peak), and it ignores overlap and fusion.

RooflineClock is a dispatch mode that adds each op's time to a virtual clock as the op runs;
while it is active, remat's clock() reads that clock, so every duration remat's measuring
takes on the fake step (a block's forward, an op's share of a menu) is the roofline one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

_HALF = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class DeviceRates:
    """A device's peak rates, as its maker states them (dense, no sparsity).

    Attributes:
        name: the device.
        half_flops: FLOP/s of matrix products in 16-bit floats (bf16, fp16) on tensor cores.
        float_flops: FLOP/s in float32 (torch runs fp32 matrix products without TF32 unless
            told to).
        bytes_per_second: memory bandwidth.
        launch_seconds: what one kernel costs at least (its launch and a small tail).
    """

    name: str
    half_flops: float
    float_flops: float
    bytes_per_second: float
    launch_seconds: float = 4e-6

    def __post_init__(self) -> None:
        for field in ("half_flops", "float_flops", "bytes_per_second"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{field}: must be a positive number, got {value!r}")
        if not self.launch_seconds >= 0:
            raise ValueError(f"launch_seconds: must be at least 0, got {self.launch_seconds!r}")

    def op_seconds(self, flops: int, moved_bytes: int, dtype: torch.dtype | None) -> float:
        rate = self.half_flops if dtype in _HALF else self.float_flops
        return max(flops / rate, moved_bytes / self.bytes_per_second) + self.launch_seconds


# SXM parts; figures from the makers' datasheets.
DEVICES = {
    "H100": DeviceRates("H100", 989e12, 67e12, 3.35e12),
    "H200": DeviceRates("H200", 989e12, 67e12, 4.8e12),
    "A100": DeviceRates("A100", 312e12, 19.5e12, 2.039e12),
    "L4": DeviceRates("L4", 121e12, 30.3e12, 0.3e12),
}


def device_rates(rates: str | DeviceRates) -> DeviceRates:
    """`rates` by name (one of DEVICES), or as given."""
    if isinstance(rates, DeviceRates):
        return rates
    found = DEVICES.get(str(rates).upper())
    if found is None:
        raise ValueError(
            f"rates: unknown device {rates!r}; give one of {', '.join(DEVICES)} or a "
            "remat.torch.DeviceRates"
        )
    return found


def _tensor_bytes(value: Any) -> tuple[int, torch.dtype | None]:
    total, dtype = 0, None
    for item in tree_flatten(value)[0]:
        if isinstance(item, torch.Tensor):
            total += item.numel() * item.element_size()
            dtype = dtype or (item.dtype if item.is_floating_point() else None)
    return total, dtype


class RooflineClock(TorchDispatchMode):
    """Adds each op's roofline time at `rates` to `seconds` (see the module's docstring)."""

    def __init__(self, rates: DeviceRates) -> None:
        super().__init__()
        self.rates = rates
        self.seconds = 0.0
        self.flops = 0

    def read(self) -> float:
        return self.seconds

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func.is_view or func._overloadpacket in _FREE:
            return out
        written, out_dtype = _tensor_bytes(out)
        if not written:  # no tensor made or written (prim.device, a size)
            return out
        formula = flop_registry.get(func._overloadpacket)
        flops = int(formula(*args, **kwargs, out_val=out)) if formula is not None else 0
        read, dtype = _tensor_bytes((args, kwargs))
        self.flops += flops
        self.seconds += self.rates.op_seconds(flops, read + written, dtype or out_dtype)
        return out


# Ops that launch no kernel: metadata, and tensors whose memory is not written.
_FREE = {
    torch.ops.aten.detach,
    torch.ops.aten.empty,
    torch.ops.aten.empty_strided,
    torch.ops.aten.empty_like,
    torch.ops.aten.lift_fresh,
}
