"""Op-level (selective) checkpointing of one layer: its ops, its menu, and the SAC policy.

torch's selective activation checkpointing (``create_selective_checkpoint_contexts``) runs a
checkpointed layer's forward once, keeping the outputs of the ops its policy marks "save" in a
cache (and nothing else but the layer's inputs); in backward it re-runs the forward in order,
taking each cached op's outputs from the cache instead of computing them, and stops as soon as
every tensor backward needs has been re-made (non-reentrant checkpoint's early stop). So, for a
set P of cached ops:

- held while the rest of the step runs: the bytes of the storages P's ops create;
- re-run time: the time of the ops not in P, up to the op during which the last tensor backward
  needs is saved (measured: a re-run stops at that save, so an op whose inputs are saved before
  it runs is itself not re-run, while the views computed for it are).

That is a 0/1 knapsack (items: ops; weight: the bytes an op creates; value: its time), and its
trade-off curve is the layer's menu, from "recompute everything" (nothing cached: a checkpoint
region) to "cache every op that would re-run" (no re-run time, more bytes than autograd would
have saved). Plain (no region) is the other end, kept by the chain planner itself.

What is never cached, so that SAC stays exact and the accounting additive:
- random ops (dropout, attention with dropout_p > 0): they re-run from the RNG state checkpoint
  preserves, in order; caching one would shift the RNG offsets of those re-run after it
  (attention without dropout draws nothing, and is cached like any other op);
- views and in-place ops (they create no storage; caching a view would keep its base alive);
- ops whose outputs are mutated later in the layer (SAC refuses mutated cache entries);
- ops that create one of the layer's outputs: the cache would hold an output the model's code may
  drop (a router's logits, attention probabilities: bytes no plan counted) or change in place
  (SAC then refuses it in backward);
- ops after the last one backward needs (never re-run, nothing to spare).

Measured, not estimated: each op's time comes from running the layer under a dispatch mode that
times every op (synchronizing the device around it), the least of a few runs.
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import replace
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import create_selective_checkpoint_contexts

from ...saved_memory import estimating_now, storage_key, storage_of, torch_checkpoint_packs
from .._runtime import (
    _detached,
    _modules_of,
    _signature,
    _synchronize,
    _tensors,
    clock,
    forward_hooks_silenced,
)
from ..generators import note_draws
from ..op_facts import argument, draws_random, facts_of
from ..policy import _Policy
from ..types import Key, OpProfile, OpRecord
from .calls import CallMeasurement, SaveRecorder, measure_call, saves_dropped


class _OpRecorder(TorchDispatchMode):
    """Times every op and notes which storages it creates and which it writes to."""

    def __init__(self, device_sync: bool, modules: Sequence[nn.Module] = ()) -> None:
        super().__init__()
        self.device_sync = device_sync
        self.modules = modules  # whose calls these ops are: the generators they draw from
        self.now = clock()
        self.names: list[str] = []
        self.seconds: list[float] = []
        self.created: list[set[Key]] = []
        self.random: list[bool] = []
        self.mutates: list[set[int]] = []  # per op: the earlier ops whose outputs it writes
        self.producer: dict[Key, int] = {}
        # The storage each producer's key named: a key whose storage has died names a new one
        # when an op's output takes its address again. Weak, so that the recording holds no
        # more than the layer does (keeping every op's output was a block's whole forward).
        self._named: dict[Key, Any] = {}
        # Ops dispatched before the last tensor was saved: a re-run stops right at that save
        # (an op's inputs are saved before it is dispatched, its outputs after).
        self.dispatched_at_last_save = 0
        self.dispatched = 0  # every op, SAC's ignored ones too
        self.own_pack: Any = None  # as GeneratorWatch's
        self.inner_checkpoint = False

    def note_save(self) -> None:
        """Called at every save (parameters' too): a re-run stops right at the last one."""
        self.dispatched_at_last_save = len(self.names)

    def __exit__(self, *exc: Any) -> Any:
        # The graph's hooks reach the recorder too, and the layer has ended.
        self._named.clear()
        return super().__exit__(*exc)

    def _new_storages(self, out: Any, inputs: set[Key]) -> set[Key]:
        """The keys of the storages `out` holds that no earlier op made, or that took the
        address of one that has died; each is named from now on as made by the op dispatched
        now."""
        created = set()
        index = len(self.names)
        for tensor in _tensors(out):
            key = storage_key(tensor)
            if key in inputs or key in created:
                continue
            named = self._named.get(key)
            if named is not None and named() is not None:
                continue
            created.add(key)
            self.producer[key] = index
            self._named[key] = weakref.ref(storage_of(tensor))
        return created

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[override]
        kwargs = kwargs or {}
        self.dispatched += 1
        if self.own_pack is not None and not self.inner_checkpoint:
            self.inner_checkpoint = torch_checkpoint_packs(self.own_pack)
        facts = facts_of(func)
        if facts.ignored:
            return func(*args, **kwargs)
        note_draws(self.modules, facts, args, kwargs)
        inputs = _storage_keys(args, kwargs)
        if self.device_sync:
            torch.cuda.synchronize()
        start = self.now()
        out = func(*args, **kwargs)
        if self.device_sync:
            torch.cuda.synchronize()
        seconds = self.now() - start
        created = self._new_storages(out, inputs)
        # The ops whose outputs this one writes to (keyword arguments too: torch.add(s, v,
        # out=s) writes s through its `out`), resolved now: a key may name a later op's
        # storage once this one's has died.
        index = len(self.names)
        written = {storage_key(t) for t in _tensors(argument(facts.writes, args, kwargs))}
        mutated = {self.producer[k] for k in written if self.producer.get(k, index) < index}
        self.names.append(facts.name)
        self.seconds.append(seconds)
        self.created.append(created)
        self.random.append(draws_random(facts, args, kwargs))
        self.mutates.append(mutated)
        return out


def _storage_keys(args: tuple, kwargs: dict) -> set[Key]:
    """The storages of the tensors among an op's arguments (one level of lists, as aten's)."""
    keys = set()
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            keys.add(storage_key(value))
        elif isinstance(value, (list, tuple, dict)):
            keys.update(storage_key(t) for t in _tensors(value))
    return keys


def _casts_weights(function: Callable[..., Any], args: tuple, kwargs: dict) -> bool:
    """Whether the layer runs under autocast with weights of another dtype. Autocast casts each
    such weight once per autocast region and caches the cast: a shared block's later calls, or
    a forward after a measuring run, find it cast, while the re-run in backward (after the region
    ended) casts it again. SAC matches a re-run's ops to the forward's by op and count, so the
    extra casts make it raise, or hand one cast's cached value to another. Whole regions re-run
    any casts safely, so such a layer is planned as a block."""
    devices = {t.device.type for t in _tensors((args, kwargs))}
    autocast = {d: torch.get_autocast_dtype(d) for d in devices if torch.is_autocast_enabled(d)}
    if not autocast:
        return False
    return any(
        p.is_floating_point() and p.device.type in autocast and p.dtype != autocast[p.device.type]
        for module in _modules_of(function)
        for p in module.parameters()
    )


def _new_recorder(function: Callable[..., Any], args: tuple, kwargs: dict) -> _OpRecorder:
    cuda = any(t.is_cuda for t in _tensors((args, kwargs))) and not estimating_now()
    return _OpRecorder(cuda, _modules_of(function))


def _record(function: Callable[..., Any], args: tuple, kwargs: dict, excluded: set[Key]):
    recorder = _new_recorder(function, args, kwargs)
    with torch.enable_grad(), SaveRecorder(excluded, recorder.note_save) as saved, recorder:
        out = function(*args, **kwargs)
    return recorder, saved.keys, {storage_key(t) for t in _tensors(out)}


class ModesCache:
    """What one measuring pass learns about SAC's modes, so that it measures them rarely.

    By op sequence (the layer's module classes, its argument signature and its recorded ops:
    names, bytes, which are cacheable): layers that dispatch the same ops on tensors of the
    same sizes cost the modes the same and replay alike; they are measured on the first.

    By op names (the same, without sizes), when the layer's forward time is known: what the
    modes add is per-op Python (the modes, the policy, the cache), so a layer of the same ops at
    other sizes (a ConvNeXt stage's block) is charged what they added to the first one's
    forward, and replays alike (the same code dispatched the same ops).

    By kind of block (auto_checkpoint: its modules, parameters and buffers, and its argument
    signature; see `kind`): a block of a kind already profiled reuses that op profile once a
    plain measuring run dispatched as many ops, so it is not recorded op by op at all.

    Per dispatched op, on CPU: what the modes cost (the caching forward's time over the plain
    forward, plus the cached re-run's), over the layers measured so far. A layer whose ops
    would cost, at FLOOR_SHARE of that rate, at least its whole forward time is not measured:
    every option that caches ops would re-run longer than the whole-block region that caches
    none, and hold more, so no plan would take one; it is planned as a block
    (OpProfile.worth_it). The forward time weighed here is that of a plain run of the layer,
    made before anything costlier (see _plain_forward). On CUDA the modes' cost is host time that overlaps the kernels, not
    charged, and every layer is measured."""

    # The share of the measured per-op rate another layer is taken to pay at least: its ops
    # pass through the same Python (the modes and the policy), with other arguments.
    FLOOR_SHARE = 0.5

    def __init__(self, shortcuts: bool = True) -> None:
        # Without shortcuts every layer is recorded and its modes measured: ranks planning
        # together run the same number of forwards (under FSDP each runs collectives), which
        # timings and data-dependent op counts would not ensure.
        self.shortcuts = shortcuts
        self._found: dict[Any, tuple[float, float] | None] = {}
        # By op names alone (the classes, the ops and which are cacheable, where a re-run
        # ends; not their sizes): what the modes added to a forward, and the cached re-run.
        self._overheads: dict[Any, tuple[float, float] | None] = {}
        self._kinds: dict[Any, OpProfile] = {}
        # By a kind's classes: whether the last layer of them was worth profiling (see records).
        self._classes_worth: dict[Any, bool] = {}
        self._dispatched = 0  # ops dispatched by the layers whose modes were measured
        self._seconds = 0.0  # what the modes cost them over their forwards

    def complete(
        self,
        function: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        profile: "OpProfile",
        forward_seconds: float | None,
        repeats: int = 0,
        plain_seconds: float | None = None,
    ) -> "OpProfile":
        """`profile` (from measure_with_ops) with its modes measured, found for its op
        sequence, or judged not worth measuring against `forward_seconds` (None: measured).
        `plain_seconds`: a plain run's time, when the caller has one (see _plain_forward)."""
        if not profile.replays:  # its recorded runs differed already
            return profile
        classes = tuple(type(m) for m in _modules_of(function))
        ops = tuple((op.name, op.new_bytes, op.cacheable) for op in profile.ops)
        key = (classes, _signature((args, kwargs), ints=True), ops, profile.last_needed)
        names = (classes, tuple((op.name, op.cacheable) for op in profile.ops), profile.last_needed)
        if self.shortcuts and key in self._found:
            found = self._found[key]
        elif self.shortcuts and forward_seconds is not None and names in self._overheads:
            found = self._rebased(self._overheads[names], forward_seconds)
        else:
            weighed = self.shortcuts and forward_seconds is not None and not profile.on_cuda
            args, kwargs = _detached(args), _detached(kwargs)
            plain = forward_seconds
            if weighed:
                assert forward_seconds is not None  # weighed only when timed
                plain = self._plain_forward(function, args, kwargs, forward_seconds, plain_seconds)
                if self.floor_seconds(profile.dispatched) >= plain:
                    return replace(profile, worth_it=False)
            _synchronize(args)
            found = self._found[key] = measure_modes(function, args, kwargs, profile, repeats)
            if forward_seconds is not None:
                overhead = None if found is None else (found[0] - forward_seconds, found[1])
                self._overheads[names] = overhead
            if found is not None and weighed and plain is not None and profile.dispatched:
                self._dispatched += profile.dispatched
                self._seconds += max(0.0, found[0] - plain) + found[1]
        # On CUDA the modes' cost is host time that overlaps the kernels already queued.
        seconds = None if profile.on_cuda else found
        return replace(profile, modes_seconds=seconds, replays=found is not None)

    @staticmethod
    def _rebased(
        overhead: tuple[float, float] | None, forward_seconds: float
    ) -> tuple[float, float] | None:
        """Modes measured on a layer of the same ops, for a layer whose forward takes
        `forward_seconds`: what they add to the forward is kept, as is the cached re-run."""
        if overhead is None:
            return None
        return forward_seconds + overhead[0], overhead[1]

    @staticmethod
    def _plain_forward(
        function: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        forward_seconds: float,
        plain_seconds: float | None,
    ) -> float:
        """The layer's forward time as the modes are weighed against it: the least of
        `forward_seconds` and a run with no dispatch mode and no region around it. The first
        step times a layer as a region under the measuring mode, which on a small CPU layer
        adds more than the layer's own ops (ConvNeXt's blocks: 0.2 ms of ops timed at 0.8 ms),
        and would make the modes look cheap next to it."""
        if plain_seconds is None:
            now = clock()
            _synchronize((args, kwargs))
            start = now()
            with torch.enable_grad(), saves_dropped():
                out = function(*args, **kwargs)
            _synchronize(out)
            plain_seconds = now() - start
            del out
        return min(forward_seconds, plain_seconds)

    def floor_seconds(self, dispatched: int) -> float:
        """What SAC's modes would cost a layer that dispatches `dispatched` ops at least, at
        FLOOR_SHARE of the rate measured so far (0 before any)."""
        if not self._dispatched:
            return 0.0
        return self.FLOOR_SHARE * dispatched * self._seconds / self._dispatched

    @staticmethod
    def kind(module: nn.Module, signature: Any) -> Any:
        """A block's kind: its submodules' classes, its parameters' and buffers' shapes,
        dtypes and devices, and the signature it was called with."""
        modules = tuple((name, type(m)) for name, m in module.named_modules())
        tensors = tuple(
            (name, tuple(t.shape), t.dtype, t.device, t.requires_grad)
            for name, t in (*module.named_parameters(), *module.named_buffers())
        )
        return modules, tensors, signature

    def records(self, kind: Any) -> bool:
        """Whether a layer of `kind` records its ops in the run that measures it: its kind is
        new, and either the modes' per-op cost is not known yet or a layer of the same classes
        (another stage's block, at other sizes) was found worth profiling (see ops_of)."""
        if not self.shortcuts:
            return True
        if kind in self._kinds:
            return False
        return not self._dispatched or self._classes_worth.get(_classes_of(kind), False)

    def known(self, kind: Any, dispatched: int) -> "OpProfile | None":
        """The op profile of a layer of `kind` already profiled, when this call dispatched as
        many ops: ops_of returns it without running anything."""
        found = self._kinds.get(kind)
        return found if found is not None and found.dispatched == dispatched else None

    def ops_of(
        self,
        kind: Any,
        function: Callable[..., Any],
        args: tuple,
        kwargs: dict,
        excluded: set[Key],
        measured: CallMeasurement,
        recorded: "OpProfile | None",
        time_plainly: bool = False,
        room: int | None = None,
    ) -> "OpProfile":
        """A layer's op profile, SAC's modes measured only where they could pay: `recorded`
        by its measuring run (measure_with_ops); else that of a layer of its kind that
        dispatched as many ops; else none worth having when the modes' per-op cost at
        FLOOR_SHARE exceeds its forward time; else recorded now, in one more run. `measured`:
        its measuring run, with the forward time the modes are weighed against.
        `time_plainly`: a layer of a new kind that could get options is timed in a plain run
        (no mode, no region) if it was not already, kept as the profile's plain_seconds: the
        first step measures a block inside its region under a dispatch mode, whose per-op cost
        would make a whole region's re-run look dearer than the ops a selective one re-runs.
        `room`: the bytes the runs may hold beyond the layer's own working set (a first step's
        budget, less what the step holds); a layer whose recording (its saves kept) or modes
        (every cacheable op cached) would hold more gets no options, and is not remembered as
        such, so that a later step with room profiles its kind."""
        if recorded is None:
            known = self.known(kind, measured.dispatched)
            if known is not None:
                return known
        # The runs below only measure: hooks that watch the block's modules must not see them.
        with forward_hooks_silenced(_modules_of(function)):
            seconds, plain = measured.forward_seconds, None
            if recorded is None:
                floor = self.floor_seconds(measured.dispatched)
                if 0 < floor < seconds:  # before recording it, weigh it against a plain run
                    detached = _detached(args), _detached(kwargs)
                    plain = seconds = self._plain_forward(function, *detached, seconds, None)
                if floor >= seconds:
                    found = _planned_whole(measured, plain)
                    self._kinds.setdefault(kind, found)
                    self._classes_worth[_classes_of(kind)] = False
                    return found
                if room is not None and sum(k[2] for k in measured.saved_keys) > room:
                    return _planned_whole(measured, plain)
                recorded = record_ops(function, args, kwargs, excluded)
            if room is not None and recorded.cached_bytes > room:
                return _planned_whole(measured, plain)
            if time_plainly and plain is None and recorded.replays:
                detached = _detached(args), _detached(kwargs)
                plain = seconds = self._plain_forward(function, *detached, seconds, None)
            found = self.complete(function, args, kwargs, recorded, seconds, plain_seconds=plain)
        found = replace(found, plain_seconds=plain)
        self._kinds.setdefault(kind, found)
        self._classes_worth[_classes_of(kind)] = found.worth_it and found.replays
        return found


def _planned_whole(measured: CallMeasurement, plain: float | None) -> OpProfile:
    """The profile of a layer given no selective options (its ops not profiled)."""
    return OpProfile((), -1, worth_it=False, dispatched=measured.dispatched, plain_seconds=plain)


def _classes_of(kind: Any) -> Any:
    """A kind's submodules' classes, without names, sizes or signature."""
    modules, _, _ = kind
    return tuple(cls for _, cls in modules)


def _op_profile(recorders: Sequence[_OpRecorder], outputs: set[Key]) -> OpProfile:
    """The ops of the first recorded run, each timed as the least over `recorders`. When the
    runs dispatched other ops (data-dependent ops), the first run's times and replays=False."""
    recorder = recorders[0]
    seconds = [[s] for s in recorder.seconds]
    same_ops = True
    for again in recorders[1:]:
        if again.names != recorder.names:
            same_ops = False
            break
        for times, s in zip(seconds, again.seconds):
            times.append(s)
    mutated_later = {producer for written in recorder.mutates for producer in written}
    # The outputs are alive at the end: the last op to create their key made them (an earlier
    # one's storage under that key had died, its address taken again).
    made_by = {key: recorder.producer[key] for key in outputs if key in recorder.producer}
    returned = set(made_by.values())
    last_needed = recorder.dispatched_at_last_save - 1
    ops = []
    for index, name in enumerate(recorder.names):
        created = {key for key in recorder.created[index] if made_by.get(key) != index}
        why_not = ""
        if recorder.random[index]:
            why_not = "random"
        elif not recorder.created[index]:
            why_not = "view or in-place"
        elif index in mutated_later:
            why_not = "mutated later"
        elif index in returned:
            why_not = "returned"
        elif index > last_needed:
            why_not = "not re-run"
        ops.append(
            OpRecord(
                name=name,
                new_bytes=sum(k[2] for k in created),
                seconds=min(seconds[index]),
                cacheable=not why_not,
                why_not=why_not,
            )
        )
    return OpProfile(
        tuple(ops),
        last_needed,
        recorder.device_sync,
        replays=same_ops,
        dispatched=recorder.dispatched,
    )


def _recorded_runs(
    first: _OpRecorder,
    function: Callable[..., Any],
    args: tuple,
    kwargs: dict,
    excluded: set[Key],
    repeats: int,
) -> list[_OpRecorder]:
    """`first` and up to `repeats` more recorded runs, stopping at one whose ops differ."""
    recorders = [first]
    for _ in range(repeats):
        again, _, _ = _record(function, args, kwargs, excluded)
        recorders.append(again)
        if again.names != first.names:
            break
    return recorders


def profile_ops(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    excluded: set[Key],
    repeats: int = 2,
    modes: ModesCache | None = None,
) -> OpProfile:
    """The ops of one call of a layer, measured on detached copies of its inputs (the caller
    restores RNG state and buffers), with SAC's modes (`modes`: where findings for layers of
    the same ops are kept). Each op's time is the least over 1 + `repeats` runs. Under
    autocast with weights to cast, the layer gets no selective options (see _casts_weights)."""
    profile = record_ops(function, args, kwargs, excluded, repeats)
    return (modes or ModesCache()).complete(function, args, kwargs, profile, None, repeats)


def record_ops(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    excluded: set[Key],
    repeats: int = 0,
) -> OpProfile:
    """profile_ops without SAC's modes (ModesCache.complete measures them)."""
    args, kwargs = _detached(args), _detached(kwargs)
    if _casts_weights(function, args, kwargs):
        return OpProfile((), -1, replays=False)
    first, _, outputs = _record(function, args, kwargs, excluded)
    return _op_profile(_recorded_runs(first, function, args, kwargs, excluded, repeats), outputs)


def measure_with_ops(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    excluded: set[Key],
    repeats: int = 0,
    name: str | None = None,
) -> tuple[CallMeasurement, OpProfile]:
    """measure_call and profile_ops from one recorded run: the run that notes what autograd
    saves also records the ops (their times, the storages they create and write, the generators
    they draw from), so a layer profiled at op level runs once less than measuring and
    profiling it apart. The forward time is the least of that run (slowed by the recording)
    and `repeats` plain ones; each op's time the least of that run and `repeats` recorded
    ones. The op profile still lacks SAC's modes: ModesCache.complete measures them, once the
    caller knows the layer's forward time."""
    first = op_recorder(function, args, kwargs)
    measured = measure_call(function, args, kwargs, excluded, repeats, name, recorder=first)
    if first is None:
        return measured, recorded_profile(None, measured.output)
    outputs = {storage_key(t) for t in _tensors(measured.output)}
    args, kwargs = _detached(args), _detached(kwargs)
    runs = _recorded_runs(first, function, args, kwargs, excluded, repeats)
    return measured, _op_profile(runs, outputs)


def op_recorder(function: Callable[..., Any], args: tuple, kwargs: dict) -> _OpRecorder | None:
    """A recorder of a layer's ops for the run that measures it (CallWatch's `recorder`), or
    None when the layer casts weights under autocast: it gets no selective options (see
    _casts_weights; recorded_profile then gives the empty profile)."""
    if _casts_weights(function, args, kwargs):
        return None
    return _new_recorder(function, args, kwargs)


def recorded_profile(recorder: _OpRecorder | None, out: Any) -> OpProfile:
    """The op profile of the run `recorder` watched, which returned `out`; SAC's modes are
    still to be measured (ModesCache.complete)."""
    if recorder is None:
        return OpProfile((), -1, replays=False)
    return _op_profile([recorder], {storage_key(t) for t in _tensors(out)})


def measure_modes(
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    profile: OpProfile,
    repeats: int,
) -> tuple[float, float] | None:
    """What a selective run of this layer takes besides the ops it re-runs, measured on the layer
    itself (the least of max(1, `repeats`) runs each): its forward under SAC's caching mode, every
    cacheable op cached (with_menus charges what it takes over the plain forward, the layer's
    measured forward time); and its re-run under the cached mode, less the ops past the last
    needed one (a re-run in backward stops before them). On a small CPU layer the modes are a
    real share of its time: each op passes through Python (the modes and the policy), and a
    re-run still runs the layer's Python and autograd for the ops it takes from the cache (on
    CUDA the figures are host time, not charged). None when SAC does not replay the layer: the
    caching forward ran other ops than the profiled ones, or the re-run an op the caching forward
    did not run (data-dependent control flow, autocast's weight-cast cache). profile_ops does
    not call it for a layer whose profiling runs already differed."""
    names = tuple(op.name for op in profile.ops)
    everything = frozenset(i for i, op in enumerate(profile.ops) if op.cacheable)
    now = clock()
    caching: list[float] = []
    cached: list[float] = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a diverging policy's: no figure
            for _ in range(max(1, repeats)):
                policy = _Policy(names, everything, "profiling")
                for times, mode in zip(
                    (caching, cached), create_selective_checkpoint_contexts(policy)
                ):
                    start = now()
                    with mode, torch.enable_grad(), saves_dropped():
                        out = function(*args, **kwargs)
                    times.append(now() - start)
                    del out
                if policy.diverged or policy.index != len(names):
                    return None
    except RuntimeError:  # the re-run met an op the caching forward did not run
        return None
    after = sum(op.seconds for op in profile.ops[profile.last_needed + 1 :])
    return min(caching), max(0.0, min(cached) - after)
