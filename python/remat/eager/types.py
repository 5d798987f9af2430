"""The data of eager checkpointing: what was measured (Profile, LayerProfile, OpProfile) and what
was planned (MenuEntry, Plan). Measuring makes the profiles, planning the plans, running reads
both; nothing here measures, plans or runs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Sequence

from .._validate import describe

Key = tuple[str, int, int]


@dataclass(frozen=True)
class OpRecord:
    """One op of a layer's forward, in dispatch order (SAC's ignored ops left out)."""

    name: str  # e.g. "aten.mm.default"
    new_bytes: int  # bytes of the storages it creates that are not the layer's outputs
    seconds: float
    cacheable: bool
    # When not cacheable: random, view or in-place, mutated later, returned, not re-run.
    why_not: str = ""


@dataclass(frozen=True)
class OpProfile:
    """A layer's ops, and how its full re-run ends."""

    ops: tuple[OpRecord, ...]
    last_needed: int  # the last op a re-run dispatches (-1: none): where the last save happens
    on_cuda: bool = False  # measured with CUDA tensors
    # On CPU, what running the layer selectively takes besides the ops it re-runs (see
    # measure_modes): (its forward under SAC's caching mode, a re-run that finds every
    # cacheable op cached). None on CUDA, where the modes' cost is host time that overlaps the
    # kernels already queued, and where it could not be measured.
    modes_seconds: tuple[float, float] | None = None
    # SAC's modes replayed the layer: a forward under the caching mode, then a re-run under the
    # cached one, dispatched the profiled ops without a mismatch (see measure_modes). When not
    # (data-dependent ops; autocast's weight-cast cache hit in one run and missed in another),
    # the layer gets no selective options: SAC would fail in backward, or diverge from the plan.
    replays: bool = True
    # False: SAC's modes would cost this layer more than re-running it whole (judged from the
    # per-op cost measured on other layers, see ModesCache), so it gets no selective options.
    worth_it: bool = True
    dispatched: int = 0  # every op the recorded run dispatched, SAC's ignored ones too
    # The layer's forward in a plain run (no dispatch mode, no region), where one was timed
    # (see ModesCache.ops_of); a layer of the same kind takes the same.
    plain_seconds: float | None = None

    @property
    def uncached_floor_seconds(self) -> float:
        """The ops a re-run dispatches that are never cached (views, random ops, ...)."""
        return sum(op.seconds for op in self.ops[: self.last_needed + 1] if not op.cacheable)

    @property
    def rerun_seconds(self) -> float:
        """A full re-run: every op up to the last needed one."""
        return sum(op.seconds for op in self.ops[: self.last_needed + 1])

    @property
    def cached_bytes(self) -> int:
        """What SAC's cache holds with every cacheable op cached (as measure_modes runs it)."""
        return sum(op.new_bytes for op in self.ops if op.cacheable)


@dataclass(frozen=True)
class MenuEntry:
    """One way to checkpoint a layer: which ops are cached, what that holds and re-runs."""

    cached: frozenset[int]  # op indices
    held_bytes: int
    recompute_seconds: float


@dataclass(frozen=True)
class LayerProfile:
    name: str
    saved_bytes: int  # saved for backward, not counting the layer's input or output
    output_bytes: int
    saves_output: bool  # whether the layer's saved tensors include its output
    forward_seconds: float  # median, with autograd recording (as when it is re-run)
    # Selective checkpoint options, (held_bytes, recompute_seconds) each: run as a single-layer
    # region outside every other region, the layer may keep held_bytes of its ops' outputs until
    # its re-run and re-run in recompute_seconds instead of forward_seconds.
    options: tuple[tuple[int, float], ...] = ()
    # Whether offloading its saved bytes takes them all off the device: False when some are
    # outputs the next layer does not take (kept on the device by an offloaded call). Not
    # written to JSON: a profile read back takes every layer as offloadable.
    offloadable: bool = True
    # Whether, run as a region, its input (the previous layer's output, which nothing else then
    # holds) may go to host memory (see remat/offload.hpp). Not written to JSON either.
    input_offloadable: bool = True


@dataclass(frozen=True)
class Profile:
    input_bytes: int
    layers: tuple[LayerProfile, ...]
    region_overhead_seconds: float = 0.0  # what one checkpoint region costs besides its re-run
    # The most layers one region may span (0: any). 1 for blocks that are not proven to form a
    # chain: auto_checkpoint on a model whose own code runs between its blocks.
    max_region_layers: int = 0
    # Whether the last layer's output is held after the forward until backward reaches the code
    # after the chain, which frees it before the last layer's backward (auto_checkpoint: a
    # model's final norm saves its last block's output). The planner sees that code as one
    # more, empty layer: the output counts in the forward's peak, and the last layer may be a
    # region whose re-run comes once the output is gone.
    output_held: bool = False
    # Per layer, for op-level plans: its ops and its menu (each LayerProfile's options are the
    # menu's (held bytes, re-run seconds)); empty for block-level plans.
    selective: tuple[tuple[OpProfile, tuple[MenuEntry, ...]] | None, ...] = field(
        default=(), repr=False, compare=False
    )

    def core_layers(self) -> list[tuple[int, int, bool, float, tuple[tuple[int, float], ...]]]:
        return [
            (
                l.saved_bytes,
                l.output_bytes,
                l.saves_output,
                l.forward_seconds,
                tuple((int(held), float(seconds)) for held, seconds in l.options),
            )
            for l in self.layers
        ]

    def planned_layers(self) -> list[tuple[int, int, bool, float, tuple[tuple[int, float], ...]]]:
        """core_layers as the planner takes them: with output_held, the code after the chain as
        an empty last layer (it saves and passes on nothing, takes no time)."""
        return self.core_layers() + ([(0, 0, False, 0.0, ())] if self.output_held else [])

    @property
    def forward_seconds(self) -> float:
        return sum(l.forward_seconds for l in self.layers)

    def to_json(self) -> str:
        """The profile as `remat eager PROFILE.json` reads it (times in seconds). Layers' options
        (their selective-checkpoint menus as bytes and times) are kept; which ops each option
        keeps is not, so a profile read back plans but cannot run op-level regions."""
        return json.dumps(
            {
                "input_bytes": self.input_bytes,
                "region_overhead": self.region_overhead_seconds,
                "max_region_layers": self.max_region_layers,
                "layers": [
                    {
                        "name": l.name,
                        "saved_bytes": l.saved_bytes,
                        "output_bytes": l.output_bytes,
                        "saves_output": l.saves_output,
                        "forward_time": l.forward_seconds,
                        "options": [
                            {"held_bytes": held, "recompute_time": seconds}
                            for held, seconds in l.options
                        ],
                    }
                    for l in self.layers
                ]
                + ([_AFTER_THE_CHAIN] if self.output_held else []),
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> "Profile":
        """A profile written by to_json (or by hand, in `remat eager`'s format), checked as the
        CLI checks it: a wrong type, a negative or fractional byte count, NaN or a key given
        twice raises ValueError naming the field and the layer."""
        data = json.loads(text, object_pairs_hook=_no_key_twice, parse_constant=_no_constant)
        if not isinstance(data, dict):
            raise ValueError(f"profile: expected a JSON object, got {describe(data)}")
        if not isinstance(data.get("layers"), list):
            raise ValueError(f"layers: expected an array, got {describe(data.get('layers'))}")
        layers = []
        for i, layer in enumerate(data["layers"]):
            at = f"layers[{i}]"
            if not isinstance(layer, dict):
                raise ValueError(f"{at}: expected an object, got {describe(layer)}")
            name = layer.get("name", f"layer{i}")
            if not isinstance(name, str):
                raise ValueError(f"{at}.name: expected a string, got {describe(name)}")
            options = layer.get("options", [])
            if not isinstance(options, list):
                raise ValueError(f"{at}.options: expected an array, got {describe(options)}")
            layers.append(
                LayerProfile(
                    name=name,
                    saved_bytes=_bytes(layer, "saved_bytes", at),
                    output_bytes=_bytes(layer, "output_bytes", at),
                    saves_output=_flag(layer, "saves_output", at),
                    forward_seconds=_seconds(layer, "forward_time", at),
                    options=tuple(
                        (
                            _bytes(option, "held_bytes", f"{at}.options[{j}]"),
                            _seconds(option, "recompute_time", f"{at}.options[{j}]"),
                        )
                        for j, option in enumerate(options)
                    ),
                )
            )
        return cls(
            _bytes(data, "input_bytes", None),
            tuple(layers),
            _seconds(data, "region_overhead", None, default=0.0),
            _bytes(data, "max_region_layers", None, default=0),
        )


def _no_key_twice(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"{key}: appears twice in one object")
        found[key] = value
    return found


def _no_constant(name: str) -> Any:
    raise ValueError(f"profile: {name} is not JSON; every value must be a finite number")


def _field(data: Any, key: str, at: str | None, default: Any) -> tuple[Any, str]:
    where = key if at is None else f"{at}.{key}"
    if not isinstance(data, dict):
        raise ValueError(f"{at}: expected an object, got {describe(data)}")
    if key not in data:
        if default is None:
            raise ValueError(f"{where}: missing")
        return default, where
    return data[key], where


def _number(data: Any, key: str, at: str | None, default: float | None) -> tuple[Any, str]:
    value, where = _field(data, key, at, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: expected a number, got {describe(value)}")
    return value, where


def _bytes(data: Any, key: str, at: str | None, default: int | None = None) -> int:
    value, where = _number(data, key, at, default)
    if value < 0 or value != int(value):
        raise ValueError(f"{where}: expected a whole number >= 0, got {value!r}")
    return int(value)


def _seconds(data: Any, key: str, at: str | None, default: float | None = None) -> float:
    value, where = _number(data, key, at, default)
    if not 0 <= value < float("inf"):
        raise ValueError(f"{where}: expected a finite number >= 0, got {value!r}")
    return float(value)


def _flag(data: Any, key: str, at: str | None) -> bool:
    value, where = _field(data, key, at, False)
    if not isinstance(value, bool):
        raise ValueError(f"{where}: expected true or false, got {describe(value)}")
    return value


# The code after the chain, written out as the empty layer the planner sees (remat eager reads
# no output_held flag).
_AFTER_THE_CHAIN = {
    "name": "(after the chain)",
    "saved_bytes": 0,
    "output_bytes": 0,
    "saves_output": False,
    "forward_time": 0.0,
    "options": [],
}


class Region(NamedTuple):
    """A checkpoint region: layers first..last re-run in backward; depth 0 is outermost (a
    region of depth d + 1 lies inside one of depth d and re-runs again in its backward)."""

    first: int
    last: int
    depth: int


@dataclass(frozen=True)
class OffloadFigures:
    """Which layers a plan offloads (their saved activations copied to host memory after
    their forward and back before their backward), and what the model predicts for the
    copies (remat/offload.hpp)."""

    layers: tuple[int, ...]  # offloaded layers (their saved activations move), by index
    inputs: tuple[int, ...]  # regions whose input (the previous layer's output) moves
    bandwidth: float  # bytes per second, each way
    host_bytes: int  # offloaded bytes on the host at the end of the forward
    host_budget: int | None
    copy_seconds: float  # every copy, out and back
    stall_seconds: float  # copy time not hidden behind compute

    @property
    def hidden_share(self) -> float:
        """The share of the copy time that runs behind compute (1.0 with no copy)."""
        if self.copy_seconds <= 0:
            return 1.0
        return 1.0 - self.stall_seconds / self.copy_seconds


@dataclass(frozen=True)
class StepPeak:
    """A plan's predicted peak for the whole training step, against a budget on that peak
    (``memory_budget``): what the step holds besides the blocks' activations, from a measured
    step (remat/eager/planning/step_budget.py)."""

    memory_budget: int
    predicted_peak_bytes: int
    fixed_bytes: int  # held when the step begins: parameters, buffers, gradients, optimizer state
    activation_bytes: int  # the blocks' activations at their predicted peak
    working_bytes: int  # beside the blocks' activations while they run: backward working set,
    # gradients, what the code between blocks holds, temporaries (and any measured excess)
    head_bytes: int  # after the blocks' forward: the head's activations, logits and loss
    outside_bytes: int  # the peak outside the blocks (the optimizer step, say), all of it
    where: str  # "blocks", "head" or "outside": the part of the step where the peak falls
    margin_bytes: int = 0  # measured steps' excess over the prediction, added back


@dataclass(frozen=True)
class Plan:
    """Where the checkpoint regions go, which layers are offloaded, and what the planner
    predicts for them."""

    regions: tuple[Region, ...]  # pre-order
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
    # Pipeline parallelism: how many microbatches' activations the stage holds at once, and the
    # stage's predicted peak over all of them (the planned peak when 1).
    microbatches_in_flight: int = 1
    predicted_stage_peak_bytes: int = 0
    # The selective checkpoint option of each region, in the order of `regions`: an index into
    # its layer's `options`, or -1 (the region re-runs whole). Empty: every region re-runs whole.
    options: tuple[int, ...] = ()
    # What the plan was made for: the input's shapes, dtypes and devices (None: from a profile).
    input_signature: Any = field(default=None, repr=False, compare=False)
    # The layers whose saved activations go to host memory (None: none). Their copies' stall is
    # part of the plan's cost, not of predicted_recompute_seconds.
    offload: OffloadFigures | None = None
    # With a budget on the whole step's peak: that peak, predicted (None: the budget was on the
    # blocks' activations alone).
    step: StepPeak | None = None

    @property
    def offloaded(self) -> tuple[int, ...]:
        """The layers whose saved activations this plan offloads."""
        return () if self.offload is None else self.offload.layers

    @property
    def inputs_offloaded(self) -> tuple[int, ...]:
        """The regions whose input (the previous layer's output) this plan offloads."""
        return () if self.offload is None else self.offload.inputs

    def core_regions(self) -> list[tuple[int, int, int, int]]:
        """The regions as the C++ core takes them: (first, last, depth, option)."""
        return core_regions(self.regions, self.options)

    def held_at_end_of_forward(self) -> int:
        """The chain's input and what every layer holds after the forward pass."""
        return self.profile.input_bytes + sum(self.held_after_forward())

    def runs(self) -> list[int]:
        """How many times each layer's forward runs in a step (1: its activations are kept)."""
        runs = [1] * len(self.profile.layers)
        for first, last, _ in self.regions:
            for layer in range(first, last + 1):
                runs[layer] += 1
        return runs

    def kept(self) -> list[bool]:
        """Whether each layer's saved activations are kept from the first forward pass (on the
        device, or offloaded to host memory and back)."""
        return [r == 1 for r in self.runs()]

    def menu_entry(self, region: int) -> MenuEntry | None:
        """The menu entry region `region` runs with, None for a whole re-run."""
        option = self.options[region] if region < len(self.options) else -1
        if option < 0:
            return None
        selective = self.profile.selective[self.regions[region][0]]
        assert selective is not None  # an option is only given where the layer has a menu
        return selective[1][option]

    def keeps_ops(self, region: int) -> bool:
        """Whether region `region` runs selectively: its entry keeps some of its ops. An entry
        that keeps none is a whole re-run (torch's early stop ends it at the last saved op,
        which that entry's time counts and a whole region's forward time does not)."""
        entry = self.menu_entry(region)
        return entry is not None and bool(entry.cached)

    def held_after_forward(self) -> list[int]:
        """Bytes each layer holds once the forward pass is done: a plain layer its saved bytes
        and its output, a region only its output (on its last layer) and, run with an option,
        the option's held bytes, layers inside a region nothing. With the chain's input they add
        up to the peak at the end of the forward pass; a re-run in backward can raise the peak
        above that (never above the prediction). An offloaded layer holds its output (its saved
        bytes are on the host once the next layer's forward ends)."""
        layers = self.profile.layers
        # The chain's last layer holds its output only when it saves it, or when the code after
        # the chain keeps it (output_held): then no layer ends the chain.
        n = len(layers) + (1 if self.profile.output_held else 0)
        held = []
        outer = [(first, last) for first, last, depth in self.regions if depth == 0]
        cache = {
            first: layers[first].options[option][0]
            for (first, _, _), option in zip(self.regions, self.options)
            if option >= 0
        }
        offloaded = set(self.offloaded)
        # A moved input is gone once the layer after the region that took it has run forward.
        moved = {i - 1 for i in self.inputs_offloaded}
        for i, layer in enumerate(layers):
            region = next(((f, l) for f, l in outer if f <= i <= l), None)
            if i in moved:
                held.append(layer.saved_bytes if region is None and i not in offloaded else 0)
            elif i in offloaded:  # never the last layer
                held.append(layer.output_bytes)
            elif region is not None:
                output = layer.output_bytes if i == region[1] and i < n - 1 else 0
                held.append(output + cache.get(i, 0))
            elif i < n - 1 or layer.saves_output:
                held.append(layer.saved_bytes + layer.output_bytes)
            else:
                held.append(layer.saved_bytes)
        return held

    def __str__(self) -> str:
        """The plan as a table (``print(plan)``; remat/eager/table.py formats it)."""
        return _PLAN_FORMAT[0](self) if _PLAN_FORMAT else repr(self)


# How print(plan) shows a plan: registered by .table, which the package imports first. The data
# does not import its presentation (table.py reads this module's types).
_PLAN_FORMAT: list[Callable[[Plan], str]] = []


def core_regions(
    regions: Sequence[Sequence[int]], options: Sequence[int] = ()
) -> list[tuple[int, int, int, int]]:
    """(first, last, depth) regions with their options (-1 where `options` has none)."""
    chosen = list(options) + [-1] * (len(regions) - len(options))
    return [(int(r[0]), int(r[1]), int(r[2]), int(o)) for r, o in zip(regions, chosen)]
