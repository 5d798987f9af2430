"""What an op's schema says about it, read once per op rather than at every dispatch.

Measuring a layer runs every op through a Python dispatch mode (measure.ops._OpRecorder,
generators.GeneratorWatch). Reading the schema there (its name, which arguments it writes,
which take a generator, whether it draws random numbers) cost more than the op itself on a
small CPU layer; the schema of an op never changes, so it is read on the op's first dispatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.checkpoint import SAC_IGNORED_OPS

Positions = tuple[tuple[int, str], ...]  # (position, name) of schema arguments


@dataclass(frozen=True)
class OpFacts:
    name: str  # e.g. "aten.mm.default"
    ignored: bool  # one of SAC's ignored ops (never cached, never counted)
    writes: Positions  # arguments it writes (in-place ops, `out=`)
    generators: Positions | None  # arguments that may hold a torch.Generator (None: any)
    seeded: bool  # tagged nondeterministic_seeded: it draws from the RNG...
    dropout_p: int  # ...unless its dropout_p (this position; -1: none) is 0


_FACTS: dict[Any, OpFacts] = {}


def facts_of(func: Any) -> OpFacts:
    found = _FACTS.get(func)
    if found is None:
        found = _FACTS[func] = _read(func)
    return found


def _read(func: Any) -> OpFacts:
    schema = getattr(func, "_schema", None)
    arguments = list(schema.arguments) if schema is not None else []
    writes = tuple(
        (i, a.name)
        for i, a in enumerate(arguments)
        if a.alias_info is not None and a.alias_info.is_write
    )
    generators: tuple[tuple[int, Any], ...] | None = tuple(
        (i, a.name) for i, a in enumerate(arguments) if "Generator" in str(a.type)
    )
    if schema is None:  # not an aten op: any argument may be a generator
        generators = None
    names = [a.name for a in arguments]
    tags = getattr(func, "tags", ())
    return OpFacts(
        name=str(func),
        ignored=func in SAC_IGNORED_OPS,
        writes=writes,
        generators=generators,
        seeded=torch.Tag.nondeterministic_seeded in tags,
        dropout_p=names.index("dropout_p") if "dropout_p" in names else -1,
    )


def argument(positions: Positions, args: tuple, kwargs: dict) -> list[Any]:
    """The values at `positions`, given positionally or by keyword."""
    return [args[i] if i < len(args) else kwargs.get(name) for i, name in positions]


def draws_random(facts: OpFacts, args: tuple, kwargs: dict) -> bool:
    """Whether the op draws from the RNG. Seeded ops do, except attention kernels called with
    dropout_p == 0 (every scaled_dot_product_attention without dropout, which torch tags
    seeded for its dropout): they draw nothing, so caching one shifts no later RNG offset."""
    if not facts.seeded:
        return False
    if facts.dropout_p < 0:
        return True
    index = facts.dropout_p
    value = args[index] if index < len(args) else kwargs.get("dropout_p", 0.0)
    return not (isinstance(value, (int, float)) and value == 0)


def generators_given(facts: OpFacts, args: tuple, kwargs: dict) -> list[torch.Generator]:
    """The generators the op was given (an op whose schema takes none is given none)."""
    if facts.generators is None:
        values = [*args, *kwargs.values()]
    elif not facts.generators:
        return []
    else:
        values = argument(facts.generators, args, kwargs)
    return [v for v in values if isinstance(v, torch.Generator)]
