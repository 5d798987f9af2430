"""A layer's menu: the op-level options its op profile offers, priced in the profile's unit.

Each entry caches a set of the layer's ops (the exact knapsack's best set at one of a few cache
budgets) and re-runs the others; with_menus gives a profile's layers these options.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from ... import _solve
from ..types import LayerProfile, MenuEntry, OpProfile, Profile


def entry_of(profile: OpProfile, cached: frozenset[int]) -> MenuEntry:
    """Caching the ops `cached`: the bytes they create, and the re-run time of the others."""
    held = sum(profile.ops[i].new_bytes for i in cached)
    spared = sum(profile.ops[i].seconds for i in cached)
    return MenuEntry(cached, held, max(0.0, profile.rerun_seconds - spared))


def menu(profile: OpProfile, entries: int = 12) -> list[MenuEntry]:
    """The layer's trade-off curve between cache bytes and re-run time: the exact knapsack's
    best set at `entries` budgets spread over the cacheable bytes (plus the two ends), each
    entry on the Pareto front (none holds more and re-runs longer than another)."""
    items = [i for i, op in enumerate(profile.ops) if op.cacheable and op.seconds > 0]
    free = frozenset(i for i in items if profile.ops[i].new_bytes == 0)
    costly = [i for i in items if profile.ops[i].new_bytes > 0]
    found: dict[frozenset[int], MenuEntry] = {free: entry_of(profile, free)}
    if costly:
        weights = [float(profile.ops[i].new_bytes) for i in costly]
        values = [profile.ops[i].seconds for i in costly]
        total = sum(weights)
        budgets = sorted({total * (k + 1) / entries for k in range(entries)} | {total})
        for budget in budgets:
            result = _solve.solve(weights, values, budget, scale=1.0)
            chosen = frozenset(costly[j] for j in result.saved) | free
            found[chosen] = entry_of(profile, chosen)
    ordered = sorted(found.values(), key=lambda e: (e.held_bytes, e.recompute_seconds))
    front: list[MenuEntry] = []
    for entry in ordered:
        if not front or entry.recompute_seconds < front[-1].recompute_seconds:
            front.append(entry)
    return front


def with_menus(profile: Profile, ops: Sequence[Any]) -> Profile:
    """`profile` with each layer's menu (from its op profile, None for none) as its options.

    Op times are measured one op at a time under a dispatch mode, which adds overhead per op;
    they are scaled so that a layer's ops add up to its measured forward time, the unit every
    other time in the profile is in. An option that keeps ops runs under SAC's modes: on CPU it
    pays what they were measured to take on this layer (`ops.measure_modes`: the caching
    forward over the layer's forward time, and a re-run that finds every cacheable op cached)
    plus the ops it re-runs besides; one that keeps none runs as a plain region."""
    if not any(o is not None for o in ops):
        return profile
    layers: list[LayerProfile] = []
    selective: list[tuple[OpProfile, tuple[MenuEntry, ...]] | None] = []
    for layer, op_profile in zip(profile.layers, ops):
        if op_profile is None or not (op_profile.replays and op_profile.worth_it):
            # planned as a block (see OpProfile.replays and worth_it)
            layers.append(layer)
            selective.append(None)
            continue
        scale = time_scale(op_profile, layer.forward_seconds)
        entries = tuple(menu(op_profile))
        options = tuple(
            (e.held_bytes, option_seconds(op_profile, e, scale, layer.forward_seconds))
            for e in entries
        )
        layers.append(replace(layer, options=options))
        selective.append((op_profile, entries))
    return replace(profile, layers=tuple(layers), selective=tuple(selective))


def time_scale(op_profile: Any, forward_seconds: float) -> float:
    """What turns the layer's op times (measured one by one) into its forward time's unit."""
    total = sum(op.seconds for op in op_profile.ops)
    return forward_seconds / total if total > 0 else 1.0


def option_seconds(op_profile: Any, entry: Any, scale: float, forward_seconds: float) -> float:
    """The re-run time of one menu entry, in the profile's unit (see with_menus): an entry that
    keeps ops pays its caching forward's time over the plain forward (`forward_seconds`) too."""
    if not entry.cached or op_profile.modes_seconds is None:
        return entry.recompute_seconds * scale
    caching_forward, cached_rerun = op_profile.modes_seconds
    rerun_ops = entry.recompute_seconds - op_profile.uncached_floor_seconds
    forward_extra = max(0.0, caching_forward - forward_seconds)
    return max(0.0, rerun_ops) * scale + forward_extra + cached_rerun
