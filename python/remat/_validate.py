"""Conversion of user arrays to what the core takes, with the CLI's error messages."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np


def describe(value: Any) -> str:
    """The JSON-style name of a value's type, as the CLI prints it."""
    if isinstance(value, bool):
        return "a boolean"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, numbers.Number):
        return "a number"
    return f"a {type(value).__name__}"


def number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{field}: expected a number, got {describe(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{field}: {value} does not fit in a double") from None


_PLAIN_NUMBERS = frozenset({float, int, np.float64, np.float32, np.int64, np.int32})


def vector(values: Any, field: str) -> np.ndarray:
    """A contiguous float64 vector from a list, tuple, NumPy array or torch tensor (on any
    device: it is copied to the host); names the bad index."""
    if type(values).__module__.startswith("torch") and hasattr(values, "detach"):
        values = values.detach().cpu().numpy()  # without importing torch
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(
                f"{field}: expected a one-dimensional array, got {values.ndim} dimensions"
            )
        if values.dtype.kind not in "biuf" or values.dtype.kind == "b":
            raise TypeError(f"{field}: expected numbers, got an array of {values.dtype}")
        return np.ascontiguousarray(values, dtype=np.float64)
    # A set or a dict view has a length but no order: which runtime goes with which memory
    # would be a guess.
    if isinstance(values, (str, bytes, dict, set, frozenset)) or not hasattr(values, "__getitem__"):
        raise TypeError(f"{field}: expected an array, got {describe(values)}")
    # Fast path: every element a plain number (bool is not one). Checking types with map() and
    # converting in C keeps a 10^4-item list well under a millisecond.
    if set(map(type, values)) <= _PLAIN_NUMBERS:
        try:
            return np.asarray(values, dtype=np.float64)
        except OverflowError:
            pass  # an int beyond double range: the slow path names its index
    out = np.empty(len(values), dtype=np.float64)
    for index, value in enumerate(values):
        out[index] = number(value, f"{field}[{index}]")
    return out
