"""One plan for every rank of a process group.

Ranks that profile on their own can plan differently (timing noise, a slow rank): under FSDP a
re-run block all-gathers its parameters again in backward, so two plans mean two sequences of
collectives, and the job hangs. Under an initialized process group every eager entry point
therefore plans from one profile that all ranks agree on, and checks the result:

- profiles are gathered from every rank and combined: bytes by their maximum (a plan must fit
  the rank that saves most; ranks with uneven inputs differ here), times by their median (one
  slow rank, as in the measured case, does not move a median of three or more; with two ranks
  the median is the mean); op-level menus (which ops each option keeps) are the first rank's,
  since menus made from different timings differ, each entry priced on every rank (bytes by
  their maximum, times by their median: a rank with larger inputs caches more bytes for the
  same ops), and a layer whose ops differ between ranks gets no op-level options;
- tuning timings (chain plans) are combined the same way, so every rank picks the same layout;
- a checksum of the plan is all-gathered and compared; a mismatch raises naming the ranks;
- what each step is planned for is agreed on at its start (`step_inputs`): ranks see different
  shapes (uneven batches, dynamic padding), and a shape new on one rank alone would send that
  rank alone into the collectives above. Plans are kept for the combination of every rank's
  inputs, so that all ranks look up, measure and plan in the same steps;
- the collectives run on a gloo group of their own with a timeout
  (``REMAT_DIST_TIMEOUT_SECONDS``, default 600): a rank that never arrives is an error, not a
  hang.

With no process group (or a group of one), every function here returns its input unchanged.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import statistics
from typing import Any

_groups: dict[tuple[tuple[int, ...], float], Any] = {}

# Which ranks must follow one plan: None, every rank of the initialized process group; a
# ProcessGroup, its ranks (one pipeline stage's data-parallel replicas, say); "local", this rank
# alone (no collective at all).
PlanGroup = Any


def active(group: PlanGroup = None) -> bool:
    """Whether plans must be agreed on: an initialized process group of more than one rank."""
    import torch.distributed as dist

    if isinstance(group, str):
        if group != "local":
            raise ValueError(f"plan_group: expected None, a ProcessGroup or 'local', got {group!r}")
        return False
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return dist.get_world_size(group) > 1


def _timeout_seconds() -> float:
    return float(os.environ.get("REMAT_DIST_TIMEOUT_SECONDS", "600"))


def _group(group: PlanGroup) -> Any:
    """A gloo group over the plan group's ranks (CPU objects, whatever the training backend),
    with a timeout; made by the member ranks alone."""
    import torch.distributed as dist

    seconds = _timeout_seconds()
    ranks = tuple(dist.get_process_group_ranks(group or dist.group.WORLD))
    key = (ranks, seconds)
    if key not in _groups:
        _groups[key] = dist.new_group(
            ranks=list(ranks),
            backend="gloo",
            timeout=datetime.timedelta(seconds=seconds),
            use_local_synchronization=True,
        )
    return _groups[key]


def _queued_without_the_gil() -> Any:
    """No Python dispatcher around a collective (torch.compile's partitioner runs under it, and
    calls remat there): under it gloo's work is queued with the GIL held, while gloo's worker
    thread, freeing the previous collective's tensors, holds the queue's lock and waits for the
    GIL. Two ranks compiling under DDP deadlocked so (gdb: ProcessGroupGloo::enqueue against
    ~AsyncAllgatherWork in take_gil); a few all_gather_object calls under the dispatcher do."""
    import torch

    return torch._C._DisablePythonDispatcher()


def all_gather(value: Any, what: str, group: PlanGroup = None) -> list[Any]:
    """`value` from every rank of the plan group, in rank order; a timeout becomes an error that
    says what was being agreed on."""
    import torch.distributed as dist

    try:
        gloo = _group(group)
        gathered: list[Any] = [None] * dist.get_world_size(gloo)
        with _queued_without_the_gil():
            dist.all_gather_object(gathered, value, group=gloo)
    except RuntimeError as error:
        raise RuntimeError(
            f"remat: rank {dist.get_rank()} timed out or failed agreeing on {what} with the "
            f"other ranks (REMAT_DIST_TIMEOUT_SECONDS={_timeout_seconds():g}): {error}"
        ) from error
    return gathered


def step_inputs(inputs: int, known: bool, group: PlanGroup = None) -> tuple[tuple[int, ...], bool]:
    """Every rank's `inputs` (a number naming what this rank's step is called with, the same
    number for the same inputs) in rank order, and whether every rank has `known` (a profile of
    its inputs): one all_gather of two integers a step, on the plan group's gloo group."""
    import torch
    import torch.distributed as dist

    mine = torch.tensor([inputs, int(known)], dtype=torch.int64)
    try:
        gloo = _group(group)
        gathered = [torch.empty_like(mine) for _ in range(dist.get_world_size(gloo))]
        with _queued_without_the_gil():
            dist.all_gather(gathered, mine, group=gloo)
    except RuntimeError as error:
        raise RuntimeError(
            f"remat: rank {dist.get_rank()} timed out or failed agreeing on the step's inputs "
            f"with the other ranks (REMAT_DIST_TIMEOUT_SECONDS={_timeout_seconds():g}); under a "
            "process group every rank must call the model (with gradients enabled) as often as "
            f"the others: {error}"
        ) from error
    return tuple(int(g[0]) for g in gathered), all(bool(g[1]) for g in gathered)


def agree_on_timings(timings: dict[str, float], group: PlanGroup = None) -> dict[str, float]:
    """Tuning's measured seconds per candidate, the median across ranks."""
    if not active(group):
        return timings
    gathered = all_gather(timings, "the tuning timings", group)
    return {label: statistics.median(t[label] for t in gathered) for label in timings}


def plan_checksum(regions: Any, extra: Any = None) -> str:
    return hashlib.sha256(repr((tuple(map(tuple, regions)), extra)).encode()).hexdigest()[:16]


def verify_same_plan(
    regions: Any, extra: Any = None, what: str = "checkpoint plan", group: PlanGroup = None
) -> None:
    """Raises naming the ranks whose plan differs from the first rank's."""
    if not active(group):
        return
    checksums = all_gather(plan_checksum(regions, extra), f"the {what}'s checksum", group)
    differ = [rank for rank, c in enumerate(checksums) if c != checksums[0]]
    if differ:
        raise RuntimeError(
            f"remat: ranks {differ} (of the plan group) made a different {what} than its first "
            f"(checksums {checksums}); every rank must follow one plan"
        )
