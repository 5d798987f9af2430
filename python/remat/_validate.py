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
    return f"a {type(value).__name__}"


def number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{field}: expected a number, got {describe(value)}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{field}: {value} does not fit in a double") from None


def vector(values: Any, field: str) -> np.ndarray:
    """A contiguous float64 vector from a list, tuple or NumPy array; names the bad index."""
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise ValueError(f"{field}: expected a one-dimensional array, got {values.ndim} dimensions")
        if values.dtype.kind not in "biuf" or values.dtype.kind == "b":
            raise TypeError(f"{field}: expected numbers, got an array of {values.dtype}")
        return np.ascontiguousarray(values, dtype=np.float64)
    if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
        raise TypeError(f"{field}: expected an array, got {describe(values)}")
    out = np.empty(len(values), dtype=np.float64)
    for index, value in enumerate(values):
        out[index] = number(value, f"{field}[{index}]")
    return out
