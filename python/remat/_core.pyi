"""Type stubs of the C++ extension (see python/remat/_core.cpp)."""

from typing import Any

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
) -> dict[str, Any]: ...
def pareto(
    memory: npt.NDArray[np.float64],
    runtime: npt.NDArray[np.float64],
    max_memory: float,
    scale: float,
    max_planner_bytes: int,
) -> tuple[list[int], list[float], int]: ...
def solvers() -> list[str]: ...
def default_max_planner_bytes() -> int: ...
def plan_profile(
    input_bytes: int,
    activation_bytes: list[int],
    forward_time: list[float],
    budget: int,
    slots: int,
    max_planner_bytes: int,
) -> dict[str, Any]: ...
def simulate_profile(
    input_bytes: int,
    activation_bytes: list[int],
    forward_time: list[float],
    strategy: str,
    parameter: int,
) -> dict[str, Any]: ...
def optimal_chain_recompute(layers: int, memory: int) -> int | None: ...
def eager_plan(
    input_bytes: int,
    layers: list[tuple[int, int, bool, float]],
    region_overhead: float,
    budget: int,
    slots: int,
    max_planner_bytes: int,
) -> dict[str, Any]: ...
def eager_minimum(
    input_bytes: int, layers: list[tuple[int, int, bool, float]], region_overhead: float
) -> dict[str, Any]: ...
def eager_evaluate(
    input_bytes: int,
    layers: list[tuple[int, int, bool, float]],
    region_overhead: float,
    regions: list[tuple[int, int, int]],
) -> tuple[int, float]: ...
