"""One profile for every rank of a process group to plan from (see remat._distributed).

Bytes by their maximum, times by their median across ranks; op-level menus are the first rank's,
each entry priced on every rank.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from ... import _distributed
from ..._distributed import PlanGroup
from ..measuring.menu import entry_of, option_seconds, time_scale
from ..types import LayerProfile, Profile


def agree_on_profile(profile: Profile, budget: int, group: PlanGroup = None) -> Profile:
    """The profile every rank plans from: bytes by maximum, times by median across ranks. Raises
    on every rank when the ranks' budgets differ (a budget too small on one rank alone would
    raise there and leave the others waiting)."""
    if not _distributed.active(group):
        return profile
    gathered = _distributed.all_gather((profile, budget), "the profile", group)
    budgets = [b for _, b in gathered]
    if any(b != budgets[0] for b in budgets):
        by_rank = ", ".join(f"rank {r}: {b}" for r, b in enumerate(budgets))
        raise RuntimeError(
            f"remat: the ranks of the plan group were given different memory budgets ({by_rank} "
            "bytes); every rank must follow one plan, made for one budget"
        )
    profiles = [p for p, _ in gathered]
    counts = {len(p.layers) for p in profiles}
    if len(counts) != 1:
        by_rank = ", ".join(f"rank {r}: {len(p.layers)}" for r, p in enumerate(profiles))
        raise RuntimeError(f"remat: ranks measured different numbers of layers ({by_rank})")
    layers, selective = [], []
    for index, versions in enumerate(zip(*(p.layers for p in profiles))):
        layer = LayerProfile(
            name=versions[0].name,
            saved_bytes=max(l.saved_bytes for l in versions),
            output_bytes=max(l.output_bytes for l in versions),
            saves_output=any(l.saves_output for l in versions),
            forward_seconds=statistics.median(l.forward_seconds for l in versions),
            offloadable=all(l.offloadable for l in versions),
            input_offloadable=all(l.input_offloadable for l in versions),
        )
        menus = [p.selective[index] if p.selective else None for p in profiles]
        options, agreed_menu = _agreed_options(versions, menus)
        layers.append(replace(layer, options=options))
        selective.append(agreed_menu)
    return Profile(
        input_bytes=max(p.input_bytes for p in profiles),
        layers=tuple(layers),
        region_overhead_seconds=statistics.median(p.region_overhead_seconds for p in profiles),
        max_region_layers=profile.max_region_layers,
        output_held=profile.output_held,
        selective=tuple(selective) if any(m is not None for m in selective) else (),
    )


def _agreed_options(
    versions: tuple[LayerProfile, ...], menus: list[Any]
) -> tuple[tuple[tuple[int, float], ...], Any]:
    """One layer's op-level options, as every rank would price the first rank's menu: each
    entry caches the same ops on every rank, holding the most bytes any rank's ops hold and
    re-running in the median of their times. None (no options) unless every rank profiled the
    same ops and can cache each entry's."""
    if any(m is None for m in menus):
        return (), None
    names = [tuple(op.name for op in ops.ops) for ops, _ in menus]
    if any(n != names[0] for n in names):
        return (), None
    first_ops, entries = menus[0]
    options, agreed = [], []
    for entry in entries:
        held, seconds = [], []
        for layer, (ops, _) in zip(versions, menus):
            if not all(ops.ops[i].cacheable for i in entry.cached):
                return (), None
            own = entry_of(ops, entry.cached)
            scale = time_scale(ops, layer.forward_seconds)
            held.append(own.held_bytes)
            seconds.append(option_seconds(ops, own, scale, layer.forward_seconds))
        options.append((max(held), statistics.median(seconds)))
        agreed.append(replace(entry, held_bytes=max(held)))
    return tuple(options), (first_ops, tuple(agreed))
