"""Type stubs of the C++ extension (see python/remat/_core.cpp)."""

from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

__version__: str

class InputError(ValueError): ...
class PlannerMemoryError(MemoryError): ...
class WorkLimitError(TimeoutError): ...
class InvalidSchedule(ValueError): ...

def solve(
    memory: npt.NDArray[np.float64],
    runtime: npt.NDArray[np.float64],
    max_memory: float,
    solver: str,
    scale: float,
    time_limit: float | None,
    max_planner_bytes: int,
    refuse_on_memory_limit: bool = False,
) -> dict[str, Any]: ...
def pareto(
    memory: npt.NDArray[np.float64],
    runtime: npt.NDArray[np.float64],
    max_memory: float,
    scale: float,
    max_planner_bytes: int,
    time_limit: float | None,
) -> tuple[list[int], list[float], int]: ...
def solvers() -> list[str]: ...

class ChainSchedule:
    memory: int
    recompute: int
    actions: int
    memory_bytes: int
    recompute_time: float
    unit_bytes: int
    slots: int
    predicted_recompute_time: float
    schedule: list[tuple[str, int, int, bool]]

class EagerPlan:
    regions: list[tuple[int, int, int, int]]
    peak_bytes: int
    recompute_time: float
    minimum_budget: int
    no_checkpoint_bytes: int
    unit_bytes: int

def default_max_planner_bytes() -> int: ...
def plan_profile(
    input_bytes: int,
    activation_bytes: list[int],
    forward_time: list[float],
    budget: int,
    slots: int,
    max_planner_bytes: int,
) -> ChainSchedule: ...
def simulate_profile(
    input_bytes: int,
    activation_bytes: list[int],
    forward_time: list[float],
    strategy: str,
    parameter: int,
) -> ChainSchedule: ...
def optimal_chain_recompute(layers: int, memory: int) -> int | None: ...

UNBOUNDED_CAPACITY: int

# (unbounded, cut value, per node: on the sink's side); capacities >= 0 or UNBOUNDED_CAPACITY.
def min_cut(
    nodes: int,
    tails: Sequence[int],
    heads: Sequence[int],
    capacities: Sequence[int],
    source: int,
    sink: int,
) -> tuple[bool, int, list[bool]]: ...

# An eager layer: (saved_bytes, output_bytes, saves_output, forward_time, options), each option
# (held_bytes, recompute_time). A region: (first, last, depth, option), option -1 = none.
_EagerLayer = tuple[int, int, bool, float, Sequence[tuple[int, float]]]
_EagerRegion = tuple[int, int, int, int]

def eager_plan(
    input_bytes: int,
    layers: Sequence[_EagerLayer],
    region_overhead: float,
    max_region_layers: int,
    budget: int,
    slots: int,
    max_planner_bytes: int,
) -> EagerPlan: ...
def eager_minimum(
    input_bytes: int,
    layers: Sequence[_EagerLayer],
    region_overhead: float,
    max_region_layers: int,
) -> EagerPlan: ...
def eager_evaluate(
    input_bytes: int,
    layers: Sequence[_EagerLayer],
    region_overhead: float,
    max_region_layers: int,
    regions: list[_EagerRegion],
) -> tuple[int, float]: ...

class OffloadPlan:
    layers: list[tuple[str, int]]  # ("keep" | "region" | "option" | "offload", option index)
    peak_bytes: int
    host_bytes: int
    minimum_budget: int
    unit_bytes: int
    recompute_time: float
    stall_time: float
    copy_time: float

def offload_plan(
    input_bytes: int,
    layers: Sequence[_EagerLayer],
    region_overhead: float,
    budget: int,
    bandwidth: float,
    host_budget: int,
    backward_time: Sequence[float],
    offloadable: Sequence[bool],
    input_offloadable: Sequence[bool],
    slots: int,
    host_slots: int,
) -> OffloadPlan: ...
