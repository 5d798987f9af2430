"""The SAC policy of one menu entry: which of a layer's ops torch's selective checkpointing keeps.

Measuring runs it to time SAC's modes on a layer (measuring/ops.py), running to follow a plan.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from ..saved_memory import is_traced, sac_storage, storage_key
from ._runtime import _tensors
from .types import Key, MenuEntry, OpProfile


def _same_op(name: str) -> str:
    """torch.compile's tracing dispatches aten.view where eager dispatched aten._unsafe_view
    (reshape of a fresh tensor); both alias their input and are never cached."""
    return "aten.view.default" if name == "aten._unsafe_view.default" else name


_REALIGN_WITHIN = 8  # profiled ops a traced op may be ahead of its position


def _warn(message: str) -> None:
    warnings.warn(f"remat: {message}", RuntimeWarning, stacklevel=4)


class _Policy:
    """The SAC policy of one menu entry for one forward of its layer: the i-th op (in dispatch
    order, SAC's ignored ops left out) is saved when i is cached. If the ops seen differ from
    the profiled ones, everything after the difference is re-computed (always correct) and a
    warning says so.

    Under torch.compile (the op outputs are tracing's fake tensors) a short stretch may be
    dispatched otherwise than in eager (CPU dropout traces as native_dropout where eager ran
    empty_like, bernoulli_, div_, mul). There the policy realigns instead: an op the profile
    has within the next few positions resumes the plan from it, one it lacks is re-computed;
    ops of the profile it skips are not kept; a warning says so once."""

    def __init__(
        self,
        names: tuple[str, ...],
        cached: frozenset[int],
        label: str,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.names, self.cached, self.label = names, cached, label
        self.warn = warn or _warn
        self.index = 0
        self.diverged = False
        self.realigned = False
        self.kept: list[int] = []  # profile positions kept, in order
        self.cached_storages: set[Key] = set()

    def __call__(self, ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        if self.diverged:
            return CheckpointPolicy.PREFER_RECOMPUTE
        name = _same_op(str(func))
        index = self.index
        if index < len(self.names) and _same_op(self.names[index]) == name:
            self.index += 1
        elif any(is_traced(t) for t in _tensors(ctx.op_output)):
            ahead = range(index + 1, min(len(self.names), index + 1 + _REALIGN_WITHIN))
            found = next((k for k in ahead if _same_op(self.names[k]) == name), None)
            if not self.realigned:
                self.realigned = True
                self.warn(
                    f"{self.label} traced op {func} at position {index}, where eager ran "
                    f"{self.names[index] if index < len(self.names) else 'none'}; the policy "
                    "realigns on the ops that follow (the differing ones are re-computed)"
                )
            if found is None:
                return CheckpointPolicy.PREFER_RECOMPUTE
            index, self.index = found, found + 1
        else:
            self.diverged = True
            self.warn(
                f"{self.label} ran op {func} at position {index}, not the profiled "
                f"{self.names[index] if index < len(self.names) else 'end'}; its remaining ops "
                "are re-computed"
            )
            return CheckpointPolicy.PREFER_RECOMPUTE
        if index not in self.cached:
            return CheckpointPolicy.PREFER_RECOMPUTE
        self.kept.append(index)
        self.cached_storages |= {
            storage_key(t) for t in _tensors(ctx.op_output) if not is_traced(t)
        }
        return CheckpointPolicy.MUST_SAVE


def context_fn(
    profile: OpProfile,
    entry: MenuEntry,
    label: str,
    warn: Callable[[str], None] | None = None,
) -> Callable[[], Any]:
    """What torch.utils.checkpoint's `context_fn` takes for this menu entry. `warn` gets what
    goes off the plan (a RuntimeWarning when not given)."""
    names = tuple(op.name for op in profile.ops)

    def contexts() -> Any:
        policy = _Policy(names, entry.cached, label, warn)
        try:  # torch's own modes on a cache that SavedTensorMeter can count
            from torch.utils.checkpoint import _CachedTorchDispatchMode, _CachingTorchDispatchMode
        except ImportError:
            return create_selective_checkpoint_contexts(policy)
        storage = sac_storage()
        return (
            _CachingTorchDispatchMode(policy, storage),
            _CachedTorchDispatchMode(None, storage, False),
        )

    return contexts
