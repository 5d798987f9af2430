"""Block arguments that a block changes: found while the first step measures, never replayed.

A checkpoint region re-runs its block in backward, and measuring runs each block several times
more in the first step. Both assume that a call can be repeated: that the block's Python
arguments come out of a call as they went in. A block that changes one (a key-value cache it
appends to, a counter, a list it fills) would change it again at every repeat: a cache appended
to twice was read past its end in backward (`start (640) + length (128) exceeds dimension
size (640)` on a Hugging Face Llama with use_cache=True).

`state_of` takes a fingerprint of an argument's state made of ids, lengths, tensor versions and
plain values, comparing by value nothing the user wrote (no `__eq__` runs). Two fingerprints of
the same object differ when a field was assigned, a container grew or shrank, or a tensor in it
was replaced, resized or changed in place. Tensor arguments themselves are checked elsewhere
(measuring refuses a block that changes its input in place); modules and functions are not
looked into (the buffers of a module given as an argument are replayed by BufferReplay, as the
block's own are).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import torch
from torch import nn

from ..saved_memory import storage_address
from .snapshots import is_snapshot_mapping

_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, enum.Enum)
_DEPTH = 6  # how deep a fingerprint looks into fields and containers


def state_of(value: Any, depth: int = 0, seen: set[int] | None = None) -> Any:
    """A fingerprint of `value`'s state (see the module's docstring)."""
    seen = set() if seen is None else seen
    if isinstance(value, _PLAIN):
        return ("value", value)
    if isinstance(value, torch.Tensor):
        return ("tensor", id(value), value._version, tuple(value.shape), _address(value))
    if isinstance(value, (nn.Module, type)) or callable(value) or depth >= _DEPTH:
        return ("object", id(value))
    if id(value) in seen:
        return ("seen", id(value))
    seen.add(id(value))
    if isinstance(value, (list, tuple)):
        return ("list", id(value), len(value)) + tuple(state_of(v, depth + 1, seen) for v in value)
    if isinstance(value, dict):
        return ("dict", id(value), len(value)) + tuple(
            (repr(k), state_of(v, depth + 1, seen)) for k, v in value.items()
        )
    if isinstance(value, (set, frozenset)):
        return ("set", id(value), len(value))
    fields = _fields(value)
    return ("fields", id(value)) + tuple(
        (name, state_of(v, depth + 1, seen)) for name, v in fields.items()
    )


def _address(tensor: torch.Tensor) -> int:
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):  # no storage (a subclass, a functional wrapper)
        return 0
    return storage_address(storage) + int(tensor.storage_offset()) * tensor.element_size()


def _fields(value: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    fields = dict(getattr(value, "__dict__", None) or {})
    for cls in type(value).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if isinstance(name, str) and name not in fields and hasattr(value, name):
                fields[name] = getattr(value, name)
    return fields


@dataclasses.dataclass(frozen=True, eq=False)
class _Entries:
    """A mapping a block may write into (see snapshots.py): the values it held when the call
    began, and their fingerprint. The call may add, replace or drop entries, since its other
    runs see a copy of the mapping; the values themselves are shared by the copies and must not
    change."""

    values: tuple[Any, ...]
    state: Any

    @classmethod
    def of(cls, mapping: Any) -> "_Entries":
        values = tuple(mapping.values())
        return cls(values, tuple(state_of(v) for v in values))

    def unchanged(self) -> bool:
        return tuple(state_of(v) for v in self.values) == self.state


def argument_states(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint of each argument that could be changed by the call, by its name in the
    call: `args[i]` or the keyword. Tensors and plain values are left out."""
    named = [(f"args[{i}]", v) for i, v in enumerate(args)] + list(kwargs.items())
    return {
        name: _Entries.of(value) if is_snapshot_mapping(value) else state_of(value)
        for name, value in named
        if not isinstance(value, (torch.Tensor, *_PLAIN, nn.Module))
    }


class ChangesItsArgument(RuntimeError):
    """A block changed a Python argument across one call: it cannot be re-run or measured."""


def check_unchanged(block: str, before: dict[str, Any], after: dict[str, Any]) -> None:
    """Raises ChangesItsArgument naming `block` and the first argument whose state changed."""
    for name, state in before.items():
        if not state.unchanged() if isinstance(state, _Entries) else after.get(name) != state:
            raise ChangesItsArgument(
                f"remat: {block} changed its argument {name} during its call (a cache it "
                "appends to, a counter, a list it fills; a dict the block only stores entries "
                "in is replayed, not refused). A checkpoint region re-runs the block "
                "in backward, and the first step measures it several times, so the change would "
                "be made again each time. Pass that argument only outside training (for a "
                "Hugging Face cache: use_cache=False), or leave this block out of blocks="
            )
