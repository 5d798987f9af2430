"""Mapping arguments a block writes into, such as Gemma 4's ``shared_kv_states``: every run of
a call but the first sees the mapping as the call began.

A block may store entries in a mapping it is passed, for later blocks to read (Gemma 4's
layers store their keys and values there for the layers that reuse them). The call itself
writes into the real mapping, as in plain training. Every other run of that call (the
checkpoint region's re-run in backward, the first step's measuring runs) gets its own shallow
copy of the mapping as it was when the call began (tensors by reference, no copies), and writes
into that copy: it sees no later block's entries, and no later block sees its writes.

The entries themselves are shared by the copies, so they must come out of a call as they went
in: a list appended to inside the mapping is still refused (see mutation.py).
"""

from __future__ import annotations

import copy
from collections import UserDict
from typing import Any


def is_snapshot_mapping(value: Any) -> bool:
    """A dict, or a UserDict (transformers' KVSharingDict), whose only state is its entries."""
    if isinstance(value, dict):
        return not getattr(value, "__dict__", None)
    if isinstance(value, UserDict):
        return set(vars(value)) == {"data"} and type(value.data) is dict
    return False


class CallSnapshot:
    """The mapping arguments of one block call, copied when the call began."""

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._args = {i: copy.copy(v) for i, v in enumerate(args) if is_snapshot_mapping(v)}
        self._kwargs = {k: copy.copy(v) for k, v in kwargs.items() if is_snapshot_mapping(v)}

    def __bool__(self) -> bool:
        return bool(self._args or self._kwargs)

    def replayed(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """`args` and `kwargs` with a fresh copy of each snapshot in place of its mapping."""
        if not self:
            return args, kwargs
        args = tuple(copy.copy(self._args[i]) if i in self._args else a for i, a in enumerate(args))
        kwargs = {
            k: copy.copy(self._kwargs[k]) if k in self._kwargs else v for k, v in kwargs.items()
        }
        return args, kwargs
