"""What the eager modules share: walking tensor trees, device synchronization, the clock that
times work, and putting back the RNG state and module buffers that measuring or re-running would
otherwise change."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import enum
import functools
import time
import types
from collections import OrderedDict
from typing import Any, Callable, Iterable, Iterator, Sequence

import torch
from torch import nn

from ..saved_memory import estimating_now, storage_key
from .generators import GeneratorStates
from .snapshots import is_snapshot_mapping

# Clocks that stand in for time (see timed_by), innermost last.
_STAND_INS: list[Callable[[], float]] = []


@contextlib.contextmanager
def timed_by(read: Callable[[], float]) -> Iterator[None]:
    """Work is timed by `read` in here: an estimated step on fake tensors, whose ops take no
    real time, reads a clock that its ops' roofline times advance (measuring/roofline.py)."""
    _STAND_INS.append(read)
    try:
        yield
    finally:
        _STAND_INS.remove(read)


def clock() -> Callable[[], float]:
    """The clock that times work. With one intra-op thread and no CUDA, all of a step's work runs
    on the calling thread (autograd's CPU backward included), so its CPU time is the work itself:
    time other processes take from a shared CPU is not counted, which the wall clock would.
    Otherwise (several threads, or a GPU whose kernels the host only waits for) the wall clock.
    Inside timed_by, its clock."""
    if _STAND_INS:
        return _STAND_INS[-1]
    if torch.get_num_threads() == 1 and not torch.cuda.is_initialized():
        return time.thread_time
    return time.perf_counter


def _tensors(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """The tensors a value holds: in lists, tuples and dicts, and in the fields of other objects
    (a dataclass of hidden states) as deep as _signature looks."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in _tensors(item, depth)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item, depth)]
    fields = _fields(value, depth)
    return [t for item in fields.values() for t in _tensors(item, depth + 1)] if fields else []


def _fields(value: Any, depth: int) -> dict[Any, Any] | None:
    """An object's fields, where a value's tensors and signature look into them: not a module's,
    a callable's, a plain value's, nor past _OBJECT_DEPTH."""
    if (
        isinstance(value, (nn.Module, int, float, complex, *_AS_VALUES))
        or callable(value)
        or depth >= _OBJECT_DEPTH
    ):
        return None
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name, None) for f in dataclasses.fields(value)}
    fields = getattr(value, "__dict__", None)
    return fields if isinstance(fields, dict) else None


def _storage_bytes(value: Any) -> tuple[set[tuple[str, int, int]], int]:
    keys = {storage_key(t) for t in _tensors(value)}
    return keys, sum(key[2] for key in keys)


def _detached(value: Any) -> Any:
    """The same values cut from the graph, each tensor keeping whether it requires grad."""
    if isinstance(value, torch.Tensor):
        return value.detach().requires_grad_(value.requires_grad)
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_detached(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(v) for v in value)
    if isinstance(value, dict):
        return type(value)((k, _detached(v)) for k, v in value.items())
    if is_snapshot_mapping(value):  # a UserDict: a measuring run's writes go to a copy
        copied = copy.copy(value)
        copied.data = {k: _detached(v) for k, v in value.items()}
        return copied
    return value


# Values a signature holds as they are: flags and names, with few distinct values, whose
# comparison runs no user code.
_AS_VALUES = (type(None), bool, str, bytes, torch.dtype, torch.device, torch.layout, enum.Enum)
_OBJECT_DEPTH = 4  # how deep a signature looks into an object's fields


def _signature(value: Any, depth: int = 0, ints: bool = False) -> Any:
    """Shapes, dtypes, devices and requires_grad of a value's tensors, in its structure: what a
    plan made for one input holds for.

    It holds no reference to the value's objects and never calls their __eq__ or __hash__ (a
    frozen dataclass of tensors compares them elementwise). Python numbers count by their type
    only: a timestep or a loss weight that changes every step makes no new plan. With `ints`,
    Python ints count by value, as a block call's arguments do (an int can be a size, a repeat
    count, that changes what the block saves). Another object (a dataclass, an attention mask
    object rebuilt every step) counts by its type and, field by field, what it holds."""
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype, str(value.device), value.requires_grad)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_signature(v, depth, ints) for v in value)
    if isinstance(value, dict):
        # Keys of mixed types do not sort by themselves.
        items = sorted(value.items(), key=lambda item: (type(item[0]).__name__, repr(item[0])))
        return ("dict",) + tuple(
            (_signature(k, depth, ints), _signature(v, depth, ints)) for k, v in items
        )
    if isinstance(value, _AS_VALUES) or ints and type(value) is int:
        return ("value", type(value).__qualname__, value)
    if isinstance(value, (int, float, complex)):
        return ("number", type(value).__qualname__)
    kind = type(value).__module__ + "." + type(value).__qualname__
    fields = _fields(value, depth)
    if fields is None:
        return ("object", kind)
    items = sorted(fields.items(), key=lambda item: str(item[0]))
    return ("object", kind) + tuple((str(k), _signature(v, depth + 1, ints)) for k, v in items)


_TENSOR_TRAITS = ("shape", "dtype", "device", "requires_grad")


def signature_difference(planned: Any, got: Any, where: str) -> str | None:
    """Where two _signature values first differ, in words ("mask: requires_grad False, planned
    True"); None where they are equal."""
    if planned == got:
        return None
    same_kind = isinstance(planned, tuple) and isinstance(got, tuple) and planned[:1] == got[:1]
    kind = planned[0] if same_kind and planned else None
    if kind == "tensor":
        for trait, was, now in zip(_TENSOR_TRAITS, planned[1:], got[1:]):
            if was != now:
                return f"{where}: {trait} {now}, planned {was}"
    elif kind == "value" and planned[1] == got[1]:
        value = "int value " if planned[1] == "int" else ""
        return f"{where}: {value}{got[2]!r}, planned {planned[2]!r}"
    elif kind == "dict" or kind == "object" and planned[1] == got[1]:
        skip = 1 if kind == "dict" else 2
        entries = list(zip(planned[skip:], got[skip:]))
        if len(planned) != len(got) or any(was[0] != now[0] for was, now in entries):
            return f"{where}: other {'keys' if kind == 'dict' else 'fields'} than planned"
        for (key, was), (_, now) in entries:
            label = f".{key}" if kind == "object" else f"[{_kind_of(key)}]"
            found = signature_difference(was, now, where + label)
            if found is not None:
                return found
    elif kind is not None and kind not in ("value", "number", "object", "tensor", "dict"):
        if len(planned) != len(got):
            return f"{where}: {len(got) - 1} items, planned {len(planned) - 1}"
        for index, (was, now) in enumerate(zip(planned[1:], got[1:])):
            found = signature_difference(was, now, f"{where}[{index}]")
            if found is not None:
                return found
    return f"{where}: {_kind_of(got)}, planned {_kind_of(planned)}"


def _kind_of(signature: Any) -> str:
    """A _signature value in a few words."""
    kind = signature[0] if isinstance(signature, tuple) and signature else None
    if kind == "value":
        return repr(signature[2])
    if kind in ("number", "object"):
        return f"a {signature[1]}"
    if kind == "tensor":
        return "a tensor"
    if kind == "dict":
        return f"a dict of {len(signature) - 1}"
    return f"a {kind} of {len(signature) - 1}" if kind else repr(signature)


def _autocast_state() -> tuple[Any, ...]:
    state = []
    for device in ("cpu", "cuda"):
        try:
            enabled = torch.is_autocast_enabled(device)
            dtype = torch.get_autocast_dtype(device) if enabled else None
        except (TypeError, AttributeError):  # a torch whose autocast queries take no device
            enabled = torch.is_autocast_enabled() if device == "cuda" else False
            dtype = torch.get_autocast_gpu_dtype() if enabled else None
        state.append((device, enabled, dtype))
    return tuple(state)


def run_context(modules: Iterable[nn.Module]) -> tuple[Any, ...]:
    """What a plan depends on besides its inputs' shapes: each module's train or eval mode
    (dropout, BatchNorm), its parameters (a submodule swapped for a wider one saves more) and
    which of them train (a frozen layer saves nothing for its weight's gradient, so unfreezing
    one adds saved bytes), and autocast (it changes the dtypes, so the bytes, of what backward
    saves). A plan made under one of these is not reused under another."""
    modules = list(dict.fromkeys(modules))
    training = tuple(m.training for top in modules for m in top.modules())
    parameters = tuple(
        (id(p), p.shape, p.dtype, p.requires_grad) for top in modules for p in top.parameters()
    )
    return training, parameters, _autocast_state()


def in_backward() -> bool:
    """Whether autograd's engine is running (a checkpoint re-run happens there)."""
    return torch._C._current_graph_task_id() != -1


def _synchronize(value: Any) -> None:
    if estimating_now():  # fake tensors: no kernel to wait for
        return
    for tensor in _tensors(value):
        if tensor.is_cuda:
            torch.cuda.synchronize(tensor.device)
            return


def _restore(buffers: Sequence[torch.Tensor], saved: Sequence[torch.Tensor]) -> None:
    # Through .data: the graph may hold these buffers (batch_norm saves its running statistics,
    # though its training backward never reads them), and a version bump would fail backward.
    for buffer, value in zip(buffers, saved):
        buffer.data.copy_(value)


def argument_modules(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[nn.Module]:
    """The modules a call is given as arguments (and in lists, tuples and dicts among them):
    their buffers are the call's state as its own module's are."""
    found = []
    for value in (*args, *kwargs.values()):
        inner = value.values() if isinstance(value, dict) else value
        for item in inner if isinstance(value, (list, tuple, dict)) else (value,):
            if isinstance(item, nn.Module):
                found.append(item)
    return found


def _submodules(tops: Iterable[nn.Module]) -> list[nn.Module]:
    """Every module under `tops`, each once."""
    return list(dict.fromkeys(m for top in tops for m in top.modules()))


# (where it is kept: the module's _buffers or its __dict__, module, name, tensor)
StateEntry = tuple[dict[str, Any], nn.Module, str, torch.Tensor]


def state_entries(modules: Iterable[nn.Module]) -> list[StateEntry]:
    """The modules' buffers, and the tensors they keep as plain attributes outside autograd
    (one that requires grad is a graph's, as a router's loss: a re-run does not read it). By
    owner and name, because a forward may assign a buffer a new tensor rather than change it."""
    found: list[StateEntry] = []
    for m in modules:
        found.extend((m._buffers, m, name, b) for name, b in m._buffers.items() if b is not None)
        attributes = vars(m)
        found.extend(
            (attributes, m, name, value)
            for name, value in attributes.items()
            if type(value) is torch.Tensor and not value.requires_grad
        )
    return found


# What nn.Module keeps in a module's __dict__ (parameters, buffers, submodules, hooks): not put
# back by _PreservedState, which puts back what the model's own code keeps there.
_MODULE_INTERNALS = frozenset(vars(nn.Module()))


class _Attributes:
    """A module's own attributes (not nn.Module's internals) as they are, and the contents of
    the lists and dicts among them: a forward that keeps state on its module (an MoE router's
    `self.aux_loss`, a cache, a counter) leaves it as it found it once put back."""

    def __init__(self, module: nn.Module) -> None:
        self._module = module
        self._values = {k: v for k, v in vars(module).items() if k not in _MODULE_INTERNALS}
        self._contents = [
            (v, list(v) if isinstance(v, list) else dict(v))
            for v in self._values.values()
            if type(v) in (list, dict)
        ]

    def put_back(self) -> None:
        attributes = vars(self._module)
        for name in [k for k in attributes if k not in _MODULE_INTERNALS]:
            if name not in self._values:
                del attributes[name]
        attributes.update(self._values)
        for container, contents in self._contents:
            if isinstance(container, list):
                container[:] = contents
            else:
                container.clear()
                container.update(contents)


class _PreservedState:
    """Profiling runs layers several times: it must not advance the RNG (dropout, and the
    model's own generators: see generators.py), move BatchNorm's running statistics, or leave
    what a forward keeps on its modules (an MoE router's `self.aux_loss`, which the loss then
    read from a graph that measuring never back-propagates), or training would differ from a
    run without remat."""

    def __init__(self, modules: Iterable[nn.Module], devices: set[torch.device]) -> None:
        self._owners = _submodules(modules)
        self._cuda = sorted({d.index or 0 for d in devices if d.type == "cuda"})

    def __enter__(self) -> None:
        self._attributes = [_Attributes(m) for m in self._owners]
        # Buffers, and tensors kept as attributes (a forward may change them in place).
        self._entries = state_entries(self._owners)
        self._saved_values = [t.detach().clone() for _, _, _, t in self._entries]
        self._rng = torch.random.get_rng_state()
        self._cuda_rng = [torch.cuda.get_rng_state(d) for d in self._cuda]
        self._generators = GeneratorStates(self._owners).__enter__()  # the model's own ones

    def __exit__(self, *exc: Any) -> None:
        for attributes in self._attributes:
            attributes.put_back()
        for store, _, name, tensor in self._entries:
            store[name] = tensor
        _restore([tensor for _, _, _, tensor in self._entries], self._saved_values)
        torch.random.set_rng_state(self._rng)
        for device, state in zip(self._cuda, self._cuda_rng):
            torch.cuda.set_rng_state(state, device)
        self._generators.__exit__(*exc)


@contextlib.contextmanager
def forward_hooks_silenced(modules: Iterable[nn.Module]) -> Iterator[None]:
    """The forward hooks and pre-hooks of `modules` and everything inside them put aside: runs
    that only measure a block must not reach code that watches its modules. Hugging Face
    collects router logits and attention weights with such hooks: a measuring run appended
    tensors of a graph never back-propagated to the ones the loss uses."""
    put_aside = []
    for module in {id(m): m for top in modules for m in top.modules()}.values():
        if module._forward_hooks or module._forward_pre_hooks:
            put_aside.append((module, module._forward_hooks, module._forward_pre_hooks))
            module._forward_hooks, module._forward_pre_hooks = OrderedDict(), OrderedDict()
    try:
        yield
    finally:
        for module, hooks, pre_hooks in put_aside:
            module._forward_hooks, module._forward_pre_hooks = hooks, pre_hooks


def _modules_of(function: Any) -> list[nn.Module]:
    """The modules a layer function runs, as far as they can be seen: the function itself, a
    partial's function and arguments, a bound method's owner, or a plain function's (a
    lambda's) default arguments and closure cells, as in `lambda h, block=block: block(h)`.
    Their parameters are not activations; a module reached only through a global is not seen."""
    if isinstance(function, nn.Module):
        return [function]
    if isinstance(function, functools.partial):
        parts = (function.func, *function.args, *function.keywords.values())
        return [m for part in parts for m in _modules_of(part)]
    owner = getattr(function, "__self__", None)
    if isinstance(owner, nn.Module):
        return [owner]
    if isinstance(function, types.FunctionType):
        captured = list(function.__defaults__ or ()) + list(
            (function.__kwdefaults__ or {}).values()
        )
        for cell in function.__closure__ or ():
            try:
                captured.append(cell.cell_contents)
            except ValueError:  # a cell not yet filled
                pass
        return [value for value in captured if isinstance(value, nn.Module)]
    return []


def default_loss(output: Any) -> torch.Tensor:
    """The sum of the output's floating tensors that need gradients (measure's and
    example_inputs' loss when none is given)."""
    tensors = [t for t in _tensors(output) if t.requires_grad and t.is_floating_point()]
    if not tensors:
        raise ValueError("output: has no floating tensor that requires grad; pass loss_fn=")
    return sum(t.float().sum() for t in tensors)  # type: ignore[return-value]
