"""Eager PyTorch: checkpoint a chain of layers to an absolute memory budget.

    import remat.torch
    y = remat.torch.checkpoint_sequential(model.layers, x, memory_budget="2GiB")
    remat.torch.auto_checkpoint(model, memory_budget="2GiB")   # every later step follows a plan

The budget is on saved-for-backward bytes: what autograd keeps between forward and backward
(activations), not parameters, gradients or optimizer state. remat measures, once per input
shape, what each layer saves and how long its forward takes (layer by layer, so measuring never
holds more than one layer's activations), plans the least recompute time whose peak fits with
the C++ planner (``remat._core.eager_plan``: nested regions, optimal under its model), and runs
the plan with non-reentrant ``torch.utils.checkpoint``, RNG state preserved so dropout replays
identically.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import statistics
import threading
import time
import types
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from . import _core
from .saved_memory import excluded_storages, is_persistent, storage_key
from .units import format_bytes, parse_bytes

__all__ = [
    "AutoCheckpoint",
    "LayerProfile",
    "Plan",
    "Profile",
    "auto_checkpoint",
    "checkpoint_sequential",
    "plan",
    "profile_layers",
    "run_plan",
    "tune_plan",
    "uniform_regions",
]

# --- profile ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerProfile:
    name: str
    saved_bytes: int  # saved for backward, not counting the layer's input or output
    output_bytes: int
    saves_output: bool  # whether the layer's saved tensors include its output
    forward_seconds: float  # median, with autograd recording (as when it is re-run)


@dataclass(frozen=True)
class Profile:
    input_bytes: int
    layers: tuple[LayerProfile, ...]
    region_overhead_seconds: float = 0.0  # what one checkpoint region costs besides its re-run

    def core_layers(self) -> list[tuple[int, int, bool, float]]:
        return [(l.saved_bytes, l.output_bytes, l.saves_output, l.forward_seconds) for l in self.layers]

    @property
    def forward_seconds(self) -> float:
        return sum(l.forward_seconds for l in self.layers)

    def to_json(self) -> str:
        """The profile as `remat eager PROFILE.json` reads it (times in seconds)."""
        return json.dumps(
            {
                "input_bytes": self.input_bytes,
                "region_overhead": self.region_overhead_seconds,
                "layers": [
                    {
                        "name": l.name,
                        "saved_bytes": l.saved_bytes,
                        "output_bytes": l.output_bytes,
                        "saves_output": l.saves_output,
                        "forward_time": l.forward_seconds,
                    }
                    for l in self.layers
                ],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> "Profile":
        data = json.loads(text)
        layers = tuple(
            LayerProfile(
                name=str(l.get("name", f"layer{i}")),
                saved_bytes=int(l["saved_bytes"]),
                output_bytes=int(l["output_bytes"]),
                saves_output=bool(l.get("saves_output", False)),
                forward_seconds=float(l["forward_time"]),
            )
            for i, l in enumerate(data["layers"])
        )
        return cls(int(data["input_bytes"]), layers, float(data.get("region_overhead", 0.0)))


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    return []


def _storage_bytes(value: Any) -> tuple[set[tuple[str, int, int]], int]:
    keys = {storage_key(t) for t in _tensors(value)}
    return keys, sum(key[2] for key in keys)


def _detached(value: Any) -> Any:
    """The same values cut from the graph, each tensor keeping whether it requires grad."""
    if isinstance(value, torch.Tensor):
        return value.detach().requires_grad_(value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    return value


def _synchronize(value: Any) -> None:
    for tensor in _tensors(value):
        if tensor.is_cuda:
            torch.cuda.synchronize(tensor.device)
            return


def _restore(buffers: Sequence[torch.Tensor], saved: Sequence[torch.Tensor]) -> None:
    # Through .data: the graph may hold these buffers (batch_norm saves its running statistics,
    # though its training backward never reads them), and a version bump would fail backward.
    for buffer, value in zip(buffers, saved):
        buffer.data.copy_(value)


class _PreservedState:
    """Profiling runs layers several times: it must not advance the RNG (dropout) or move
    BatchNorm's running statistics, or training would differ from a run without remat."""

    def __init__(self, modules: Iterable[nn.Module], devices: set[torch.device]) -> None:
        self._buffers = [b for m in modules for b in m.buffers()]
        self._cuda = sorted({d.index or 0 for d in devices if d.type == "cuda"})

    def __enter__(self) -> None:
        self._saved_buffers = [b.detach().clone() for b in self._buffers]
        self._rng = torch.random.get_rng_state()
        self._cuda_rng = [torch.cuda.get_rng_state(d) for d in self._cuda]

    def __exit__(self, *exc: Any) -> None:
        _restore(self._buffers, self._saved_buffers)
        torch.random.set_rng_state(self._rng)
        for device, state in zip(self._cuda, self._cuda_rng):
            torch.cuda.set_rng_state(state, device)


def _modules_of(function: Any) -> list[nn.Module]:
    if isinstance(function, nn.Module):
        return [function]
    if isinstance(function, functools.partial):
        return [m for part in (function.func, *function.args) for m in _modules_of(part)]
    owner = getattr(function, "__self__", None)
    return [owner] if isinstance(owner, nn.Module) else []


def _name(function: Callable[..., Any]) -> str:
    if isinstance(function, functools.partial):
        return _name(function.func)
    if isinstance(function, nn.Module):
        return type(function).__name__
    return getattr(function, "__name__", type(function).__name__)


def profile_layers(
    functions: Sequence[Callable[[Any], Any]],
    input: Any,
    *,
    repeats: int = 3,
    exclude: Iterable[Any] = (),
) -> Profile:
    """Measures what each layer saves for backward and its forward time on `input`.

    Layers run one at a time on a detached copy of the previous output, so profiling holds one
    layer's activations at a time. Storages of parameters and buffers (of the modules among
    `functions` and in `exclude`) are not activations and are not counted. The RNG state and
    module buffers are restored afterwards."""
    functions = list(functions)
    if repeats < 1:
        raise ValueError(f"repeats: must be >= 1, got {repeats}")
    modules = [m for f in functions for m in _modules_of(f)]
    excluded = excluded_storages(modules + list(exclude))
    devices = {t.device for t in _tensors(input)}
    layers = []
    with _PreservedState(modules, devices):
        _, input_bytes = _storage_bytes(input)
        h = input
        for index, function in enumerate(functions):
            x = _detached(h)
            saved: set[tuple[str, int, int]] = set()

            def pack(tensor: torch.Tensor) -> torch.Tensor:
                if not is_persistent(tensor, excluded):
                    saved.add(storage_key(tensor))
                return tensor

            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = function(x)
            in_keys, _ = _storage_bytes(x)
            out_keys, out_bytes = _storage_bytes(out)
            own = sum(key[2] for key in saved - in_keys - out_keys)
            seconds = []
            for _ in range(repeats):
                _synchronize(x)
                start = time.perf_counter()
                with torch.enable_grad():
                    again = function(x)
                _synchronize(again)
                seconds.append(time.perf_counter() - start)
                del again
            layers.append(
                LayerProfile(
                    name=_name(function),
                    saved_bytes=own,
                    output_bytes=out_bytes,
                    saves_output=bool(saved & out_keys),
                    forward_seconds=statistics.median(seconds),
                )
            )
            h = _detached(out)
            del out, x
            if not _tensors(h):
                raise TypeError(
                    f"functions[{index}]: returned {type(h).__name__}; every layer must return "
                    "a tensor (or a tuple of tensors) for the next one"
                )
    return Profile(input_bytes, tuple(layers), _region_overhead(input, repeats))


def _region_overhead(input: Any, repeats: int) -> float:
    """Seconds one checkpoint region adds to a step besides re-running its layers: a region
    around a single cheap op, forward and backward, against the op alone."""
    device = next(iter(_tensors(input))).device if _tensors(input) else torch.device("cpu")
    x = torch.ones(8, device=device, requires_grad=True)

    def op(t: torch.Tensor) -> torch.Tensor:
        return t * 2.0

    def step(wrapped: bool) -> float:
        _synchronize(x)
        start = time.perf_counter()
        y = checkpoint(op, x, use_reentrant=False, preserve_rng_state=True) if wrapped else op(x)
        y.sum().backward()
        _synchronize(x)
        return time.perf_counter() - start

    rng = torch.random.get_rng_state()
    for wrapped in (False, True):
        step(wrapped)  # warm-up
    samples = [step(True) - step(False) for _ in range(max(5, 3 * repeats))]
    torch.random.set_rng_state(rng)
    return max(0.0, statistics.median(samples))


# --- plan ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """Where the checkpoint regions go, and what the planner predicts for them."""

    regions: tuple[tuple[int, int, int], ...]  # (first layer, last layer, depth), pre-order
    memory_budget: int
    predicted_peak_bytes: int
    predicted_recompute_seconds: float
    minimum_budget_bytes: int  # the least peak any plan reaches
    no_checkpoint_bytes: int  # the peak with no checkpoint at all
    profile: Profile = field(repr=False)
    # When tuned: each candidate that fits, with its measured chain forward + backward seconds;
    # `choice` names the one these regions come from.
    timings: tuple[tuple[str, float], ...] = ()
    choice: str = "planner"

    def runs(self) -> list[int]:
        """How many times each layer's forward runs in a step (1: its activations are kept)."""
        runs = [1] * len(self.profile.layers)
        for first, last, _ in self.regions:
            for layer in range(first, last + 1):
                runs[layer] += 1
        return runs

    def kept(self) -> list[bool]:
        """Whether each layer's saved activations are kept from the first forward pass."""
        return [r == 1 for r in self.runs()]

    def table(self) -> str:
        p = self.profile
        forward = p.forward_seconds
        share = self.predicted_recompute_seconds / forward if forward > 0 else 0.0
        lines = [
            f"remat checkpoint plan: {len(p.layers)} layers, budget "
            f"{format_bytes(self.memory_budget)}",
            f"  predicted peak saved {format_bytes(self.predicted_peak_bytes)} (no checkpoint "
            f"{format_bytes(self.no_checkpoint_bytes)}, least possible "
            f"{format_bytes(self.minimum_budget_bytes)})",
            f"  predicted recompute {self.predicted_recompute_seconds * 1e3:.3g} ms = "
            f"{share:.0%} of the forward pass ({forward * 1e3:.3g} ms), with "
            f"{p.region_overhead_seconds * 1e6:.0f} us per region",
            f"  {len(self.regions)} checkpoint regions; runs = forward evaluations per step",
        ]
        if self.timings:
            measured = ", ".join(f"{label} {t * 1e3:.3g} ms" for label, t in self.timings)
            lines.append(f"  tuned: chose {self.choice} by measured forward + backward ({measured})")
        lines += [
            "",
            f"  {'layer':>5}  {'name':<18} {'saved':>10} {'output':>10} {'forward':>10}  runs  regions",
        ]
        depth = max((d for _, _, d in self.regions), default=-1) + 1
        for i, (layer, runs) in enumerate(zip(p.layers, self.runs())):
            marks = [" "] * depth
            for first, last, d in self.regions:
                if first <= i <= last:
                    marks[d] = "=" if first == last else "/" if i == first else "\\" if i == last else "|"
            lines.append(
                f"  {i:>5}  {layer.name[:18]:<18} {format_bytes(layer.saved_bytes):>10} "
                f"{format_bytes(layer.output_bytes):>10} {layer.forward_seconds * 1e3:>7.3g} ms"
                f"  {runs:>4}  {''.join(marks)}"
            )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _default_slots(layers: int) -> int:
    # The program costs n^3 / 6 x slots steps; keep it near 0.1 s on one core.
    return int(min(4096, max(64, 3e8 / max(1.0, layers**3 / 6))))


def plan_profile(profile: Profile, memory_budget: int | float | str, *, slots: int | None = None) -> Plan:
    """The least-recompute plan for a measured profile (see :func:`plan`)."""
    budget = parse_bytes(memory_budget)
    layers = profile.core_layers()
    if not layers:
        raise ValueError("functions: the chain has no layers")
    overhead = profile.region_overhead_seconds
    result = _core.eager_plan(
        profile.input_bytes, layers, overhead, budget, slots or _default_slots(len(layers)), 0
    )
    no_checkpoint, _ = _core.eager_evaluate(profile.input_bytes, layers, overhead, [])
    return Plan(
        regions=tuple(tuple(r) for r in result["regions"]),
        memory_budget=budget,
        predicted_peak_bytes=result["peak_bytes"],
        predicted_recompute_seconds=result["recompute_time"],
        minimum_budget_bytes=result["minimum_budget"],
        no_checkpoint_bytes=no_checkpoint,
        profile=profile,
    )


def plan(
    functions: Sequence[Callable[[Any], Any]] | nn.Sequential,
    input: Any,
    *,
    memory_budget: int | float | str,
    profile: Profile | None = None,
    slots: int | None = None,
    tune: bool = True,
    exclude: Iterable[Any] = (),
) -> Plan:
    """The plan :func:`checkpoint_sequential` would run, without running it.

    With `tune` (and an input), the planner's plan and every torch-style uniform segmentation
    whose predicted peak fits are each timed on the real chain (forward + backward, gradients
    returned rather than accumulated, RNG and BatchNorm statistics restored) and the fastest
    is kept: the planner's time model is forward time, which the hardware does not always
    honour (on CPU a re-run just before its backward finds its activations in cache).

    Raises ``remat.InputError`` (a ValueError) stating the least feasible budget when
    `memory_budget` is below it."""
    functions = list(functions)
    if profile is None:
        profile = profile_layers(functions, input, exclude=exclude)
    elif len(profile.layers) != len(functions):
        raise ValueError(
            f"profile: has {len(profile.layers)} layers, functions has {len(functions)}"
        )
    found = plan_profile(profile, memory_budget, slots=slots)
    if tune and input is not None and _tensors(input):
        found = tune_plan(functions, input, found)
    return found


def uniform_regions(layers: int, segments: int) -> list[tuple[int, int, int]]:
    """The regions of torch.utils.checkpoint.checkpoint_sequential(functions, segments, ...):
    segments of layers // segments layers, all but the last checkpointed."""
    size = layers // segments
    return [(first, first + size - 1, 0) for first in range(0, size * (segments - 1), size)]


def tune_plan(
    functions: Sequence[Callable[[Any], Any]], input: Any, planned: Plan, repeats: int = 3
) -> Plan:
    """The fastest, measured on the chain, of the planner's plan and the uniform segmentations
    whose predicted peak fits the budget."""
    p = planned.profile
    layers, overhead = p.core_layers(), p.region_overhead_seconds
    candidates = {"planner": list(planned.regions)}
    for segments in range(2, len(layers) + 1):
        regions = uniform_regions(len(layers), segments)
        peak, _ = _core.eager_evaluate(p.input_bytes, layers, overhead, regions)
        if peak <= planned.memory_budget and regions not in candidates.values():
            candidates[f"{segments} segments"] = regions
    if len(candidates) == 1:
        return planned
    modules = [m for f in functions for m in _modules_of(f)]
    parameters = [t for m in modules for t in m.parameters() if t.requires_grad]
    devices = {t.device for t in _tensors(input)}
    timings: dict[str, list[float]] = {label: [] for label in candidates}
    with _PreservedState(modules, devices):
        for repeat in range(repeats + 1):
            for label, regions in candidates.items():
                seconds = _time_step(functions, regions, input, parameters)
                if repeat:  # the first round warms up
                    timings[label].append(seconds)
    median = {label: statistics.median(t) for label, t in timings.items()}
    choice = min(median, key=median.__getitem__)
    peak, recompute = _core.eager_evaluate(p.input_bytes, layers, overhead, candidates[choice])
    return dataclasses.replace(
        planned,
        regions=tuple(tuple(r) for r in candidates[choice]),
        predicted_peak_bytes=peak,
        predicted_recompute_seconds=recompute,
        timings=tuple(median.items()),
        choice=choice,
    )


def _time_step(
    functions: Sequence[Callable[[Any], Any]],
    regions: Sequence[tuple[int, int, int]],
    input: Any,
    parameters: list[torch.Tensor],
) -> float:
    x = _detached(input)
    inputs = parameters + [t for t in _tensors(x) if t.requires_grad]
    _synchronize(x)
    start = time.perf_counter()
    with torch.enable_grad():
        outputs = [t for t in _tensors(_Execution(functions, regions)(x)) if t.requires_grad]
        if outputs and inputs:
            # Returned, not accumulated: the caller's .grad fields stay as they are.
            torch.autograd.grad(
                outputs, inputs, [torch.ones_like(t) for t in outputs], allow_unused=True
            )
    _synchronize(x)
    return time.perf_counter() - start


# --- execution ----------------------------------------------------------------------------------


def _batchnorm_buffers(functions: Sequence[Any]) -> list[torch.Tensor]:
    return [
        b
        for f in functions
        for top in _modules_of(f)
        for m in top.modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
        for b in m.buffers()
    ]


class _RunningStatsKept:
    """A re-run is not a new batch: BatchNorm's running statistics are put back after it
    (torch.utils.checkpoint alone would update them once more per re-run)."""

    def __init__(self, buffers: list[torch.Tensor]) -> None:
        self._buffers = buffers

    def __enter__(self) -> None:
        self._saved = [b.detach().clone() for b in self._buffers]

    def __exit__(self, *exc: Any) -> None:
        if self._buffers:
            _restore(self._buffers, self._saved)


class _Execution:
    """Runs a chain through a plan's regions; times the re-runs that happen in backward."""

    def __init__(self, functions: Sequence[Callable[[Any], Any]], regions: Sequence[tuple[int, int, int]]) -> None:
        self.functions = list(functions)
        self.regions = [(first, last) for first, last, _ in regions]
        self.inside: dict[int, list[int]] = {-1: []}  # region -> regions directly inside it
        stack: list[int] = []
        for index, (first, last) in sorted(enumerate(self.regions), key=lambda r: (r[1][0], -r[1][1])):
            while stack and self.regions[stack[-1]][1] < first:
                stack.pop()
            self.inside.setdefault(stack[-1] if stack else -1, []).append(index)
            self.inside.setdefault(index, [])
            stack.append(index)
        self.recompute_seconds = 0.0
        self._timing = threading.local()
        self._statistics: dict[int, list[torch.Tensor]] = {}  # region -> BatchNorm buffers

    def __call__(self, h: Any) -> Any:
        return self._segment(0, len(self.functions) - 1, -1, h)

    def _segment(self, first: int, last: int, region: int, h: Any) -> Any:
        starts = {self.regions[r][0]: r for r in self.inside[region]}
        layer = first
        while layer <= last:
            inner = starts.get(layer)
            if inner is None:
                h = self.functions[layer](h)
                layer += 1
                continue
            h = checkpoint(
                functools.partial(self._region, inner), h, use_reentrant=False, preserve_rng_state=True
            )
            layer = self.regions[inner][1] + 1
        return h

    def _region(self, region: int, h: Any) -> Any:
        first, last = self.regions[region]
        if torch._C._current_graph_task_id() == -1:  # the first forward pass
            return self._segment(first, last, region, h)
        # A re-run in backward. It may stop early (torch raises out of it once every saved
        # tensor is back), so the clock stops and the statistics come back in `finally`.
        outermost = not getattr(self._timing, "active", False)
        self._timing.active = True
        start = time.perf_counter()
        try:
            if region not in self._statistics:
                self._statistics[region] = _batchnorm_buffers(self.functions[first : last + 1])
            with _RunningStatsKept(self._statistics[region]):
                out = self._segment(first, last, region, h)
            _synchronize(out)
            return out
        finally:
            if outermost:
                self.recompute_seconds += time.perf_counter() - start
                self._timing.active = False


def run_plan(functions: Sequence[Callable[[Any], Any]], plan: Plan, input: Any) -> Any:
    """Runs `functions` on `input` through `plan`'s checkpoint regions."""
    functions = list(functions)
    if len(functions) != len(plan.profile.layers):
        raise ValueError(f"plan: has {len(plan.profile.layers)} layers, functions has {len(functions)}")
    return _Execution(functions, plan.regions)(input)


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, str(value.device), value.requires_grad)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_signature(v) for v in value)
    if isinstance(value, dict):
        return ("dict",) + tuple((k, _signature(v)) for k, v in sorted(value.items()))
    try:
        hash(value)
        return ("value", value)
    except TypeError:
        return ("object", id(value))


class _PlanCache:
    """Plans by (the functions, the input's shapes and dtypes, the budget). An entry holds weak
    references to the functions, so a recycled id() never returns a stale plan."""

    def __init__(self, capacity: int = 64) -> None:
        self._entries: OrderedDict[Any, tuple[list[Any], Plan]] = OrderedDict()
        self._capacity = capacity

    @staticmethod
    def _refs(functions: Sequence[Any]) -> list[Any]:
        refs = []
        for f in functions:
            try:
                refs.append(weakref.ref(f))
            except TypeError:
                refs.append(lambda f=f: f)  # not weak-referenceable: held (and so stays valid)
        return refs

    def get(self, key: Any, functions: Sequence[Any]) -> Plan | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        refs, found = entry
        if any(ref() is not f for ref, f in zip(refs, functions)):
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return found

    def put(self, key: Any, functions: Sequence[Any], value: Plan) -> None:
        self._entries[key] = (self._refs(functions), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._capacity:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


_plans = _PlanCache()


def checkpoint_sequential(
    functions: Sequence[Callable[[Any], Any]] | nn.Sequential,
    input: Any,
    *,
    memory_budget: int | float | str,
    profile: Profile | None = None,
    slots: int | None = None,
    tune: bool = True,
) -> Any:
    """torch.utils.checkpoint.checkpoint_sequential with a memory budget instead of a segment
    count: the least-recompute nested checkpoint plan whose saved-for-backward bytes fit.

    The first call for a given set of functions, input shape and dtype, and budget measures the
    layers (see :func:`profile_layers`) and plans; later calls reuse the plan. Pass the same
    function objects each step (a new lambda each call is profiled each call). With grad
    disabled the layers simply run."""
    functions = list(functions)
    if not torch.is_grad_enabled():
        for function in functions:
            input = function(input)
        return input
    budget = parse_bytes(memory_budget)
    key = (tuple(id(f) for f in functions), _signature(input), budget, slots, id(profile), tune)
    found = _plans.get(key, functions)
    if found is None:
        found = plan(functions, input, memory_budget=budget, profile=profile, slots=slots, tune=tune)
        _plans.put(key, functions, found)
    return run_plan(functions, found, input)


# --- auto_checkpoint --------------------------------------------------------------------------


def _find_blocks(model: nn.Module) -> nn.Module:
    if isinstance(model, (nn.Sequential, nn.ModuleList)):
        return model
    lists = [
        m for m in model.modules() if isinstance(m, (nn.Sequential, nn.ModuleList)) and len(m) >= 2
    ]
    if not lists:
        raise ValueError(
            "model: found no nn.Sequential or nn.ModuleList of blocks to checkpoint; pass blocks="
        )
    return max(lists, key=len)  # the first of the longest, in module order


class AutoCheckpoint:
    """The handle :func:`auto_checkpoint` returns: the plans made so far, and ``remove()``.

    Block 0's call runs the whole chain through the plan for its input's shape; the calls of
    blocks 1..n-1 that follow (the model's own loop) pass that output through. The blocks must
    be applied in order, each to the previous one's output, with the same extra arguments."""

    def __init__(
        self, model: nn.Module, blocks: nn.Module, memory_budget: int, slots: int | None, tune: bool
    ) -> None:
        self.model = model
        self.blocks = list(blocks)
        if len(self.blocks) < 1:
            raise ValueError("blocks: empty")
        self.memory_budget = memory_budget
        self.slots = slots
        self.tune = tune
        self.plans: dict[Any, Plan] = {}
        self.last_plan: Plan | None = None
        self.last_execution: _Execution | None = None
        self._inside = 0
        self._expect = 0
        self._output: Any = None
        self._originals = []
        for index, block in enumerate(self.blocks):
            self._originals.append(block.__dict__.get("forward"))
            block.forward = types.MethodType(self._forward_of(index, block.forward), block)

    def remove(self) -> None:
        """Restores the blocks' own forward methods."""
        for block, original in zip(self.blocks, self._originals):
            if original is None:
                del block.forward
            else:
                block.forward = original
        self._originals = []

    def _forward_of(self, index: int, original: Callable[..., Any]) -> Callable[..., Any]:
        def forward(_module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            if self._inside or not torch.is_grad_enabled():
                return original(*args, **kwargs)
            if not args:
                raise TypeError("auto_checkpoint: a block's input must be its first positional argument")
            if index == 0:
                return self._run_chain(args[0], args[1:], kwargs)
            if self._expect != index or args[0] is not self._output:
                self._expect, self._output = 0, None
                raise RuntimeError(
                    f"auto_checkpoint: block {index} was called out of order or on another "
                    "tensor; the blocks must be applied in sequence, x = block(x, ...)"
                )
            self._expect = index + 1 if index + 1 < len(self.blocks) else 0
            out = self._output
            if self._expect == 0:
                self._output = None
            return out

        return forward

    def _call_block(self, block: nn.Module, extra: tuple[Any, ...], kwargs: dict[str, Any], h: Any) -> Any:
        self._inside += 1
        try:
            return block(h, *extra, **kwargs)
        finally:
            self._inside -= 1

    def _run_chain(self, x: Any, extra: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        functions = [functools.partial(self._call_block, b, extra, kwargs) for b in self.blocks]
        key = (_signature(x), _signature(extra), _signature(kwargs), self.model.training)
        found = self.plans.get(key)
        if found is None:
            profile = profile_layers(functions, x, exclude=[self.model])
            named = (dataclasses.replace(l, name=type(b).__name__) for l, b in zip(profile.layers, self.blocks))
            profile = dataclasses.replace(profile, layers=tuple(named))
            found = plan_profile(profile, self.memory_budget, slots=self.slots)
            if self.tune:
                found = tune_plan(functions, x, found)
            self.plans[key] = found
        self.last_plan = found
        self.last_execution = _Execution(functions, found.regions)
        out = self.last_execution(x)
        self._expect = 1 if len(self.blocks) > 1 else 0
        self._output = out if len(self.blocks) > 1 else None
        return out


def auto_checkpoint(
    model: nn.Module,
    *,
    memory_budget: int | float | str,
    blocks: nn.Module | Sequence[nn.Module] | None = None,
    slots: int | None = None,
    tune: bool = True,
) -> AutoCheckpoint:
    """Makes every training step of `model` follow a checkpoint plan for `memory_budget`.

    `blocks` defaults to the model itself when it is an nn.Sequential, else its longest
    nn.ModuleList (transformer blocks, ResNet stages). The blocks' forward methods are replaced
    on the instances (parameters, state_dict and hooks are untouched); a new input shape is
    measured and planned (and tuned, see :func:`plan`) on first sight. ``remove()`` on the
    returned handle undoes it."""
    budget = parse_bytes(memory_budget)
    chosen = _find_blocks(model) if blocks is None else blocks
    return AutoCheckpoint(model, chosen, budget, slots, tune)
