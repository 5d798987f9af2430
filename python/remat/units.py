"""Byte budgets as users write them: 2147483648, "2GiB", "1.5 GB", "512MiB"."""

from __future__ import annotations

import math
import numbers
import re
from decimal import Decimal
from fractions import Fraction

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_PATTERN = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | float | str, field: str = "memory_budget") -> int:
    """Bytes from an int, a float (numpy's included) or a string with a unit (KB/MB/GB/TB are
    powers of 1000, KiB/MiB/GiB/TiB powers of 1024); a string's number is read exactly, as the
    decimal it is. Rounds down to whole bytes; raises ValueError naming `field` for anything
    else."""
    if isinstance(value, bool):
        raise ValueError(f"{field}: expected bytes, got a bool")
    if isinstance(value, numbers.Integral):
        # An int stays exact: through a float 2**60 - 1 rounds up and 10**400 overflows.
        number, scale = int(value), 1
    elif isinstance(value, numbers.Real):
        number, scale = float(value), 1
    elif isinstance(value, str):
        match = _PATTERN.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise ValueError(
                f"{field}: cannot read {value!r} as bytes (write e.g. 2147483648, '2GiB', "
                "'1.5GB', '512MiB')"
            )
        number, scale = _exact(match.group(1)), _UNITS[unit]
    else:
        raise ValueError(
            f"{field}: expected bytes as a number or a string, got {type(value).__name__}"
        )
    if number < 0 or isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"{field}: {value!r} is not a finite number of bytes >= 0")
    total = number * scale
    if total >= 2**62:
        raise ValueError(f"{field}: {value!r} is too large")
    if isinstance(value, numbers.Real) and 0 < total < 1:  # floored: a budget of 0 bytes
        raise ValueError(
            f"{field}: {value!r} is less than a byte. {field} is in bytes (e.g. '6GiB'); a "
            "fraction such as 0.5 is torch's activation_memory_budget ratio, which "
            "remat.torch.use() keeps without a memory_budget"
        )
    return math.floor(total)


def _exact(number: str) -> Fraction | int:
    """The written decimal exactly (as a float, "1.005KB" is 1004.9999999999999 bytes and rounds
    down to 1004). Its magnitude is checked first, so "1e-999999999" costs no power of ten of a
    billion digits: from 10^19 up it is too large for any unit, under 10^-14 it is under a byte
    for every unit (the largest is below 10^13)."""
    decimal = Decimal(number)
    if decimal.is_zero() or decimal.adjusted() < -14:
        return 0
    if decimal.adjusted() >= 19:
        return 2**62  # too large, as the caller says
    return Fraction(decimal)


def format_bytes(count: float) -> str:
    """1536 -> '1.50 KiB': binary units, three significant digits."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(count) >= size:
            return f"{count / size:.3g} {unit}"
    return f"{int(count)} B"


def format_seconds(seconds: float) -> str:
    """0.00492 -> '4.92 ms': three significant digits in s, ms or us."""
    for unit, size in (("s", 1.0), ("ms", 1e-3)):
        if abs(seconds) >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds * 1e6:.3g} us"
