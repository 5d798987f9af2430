"""Finding a model's blocks: the repeated modules that carry most of its parameters.

"The longest nn.ModuleList" picks the wrong list on common models (a block's inner MLP is an
nn.Sequential longer than the list of blocks). A transformer's layers, a ResNet's stages are
modules of one class, repeated, holding most of the parameters: that is what is looked for.
"""

from __future__ import annotations

import dataclasses
import functools
from collections import Counter
from dataclasses import dataclass
from typing import Sequence, TypeGuard

from torch import nn

_CONTAINERS = (nn.ModuleList, nn.Sequential)


@dataclass(frozen=True)
class Blocks:
    """The blocks auto_checkpoint wraps, where they live, and how it will run them."""

    path: str  # dotted path from the model, e.g. "model.layers"
    modules: tuple[nn.Module, ...]
    names: tuple[str, ...]  # dotted path of each block, e.g. "model.layers.3"
    # The container, when it is a stock nn.Sequential that runs its blocks as one chain (each on
    # the previous one's output): regions may then span several blocks.
    chain: nn.Sequential | None
    # Other containers of repeated blocks discovery left out, each with at least half the
    # parameters of the chosen (an encoder beside a decoder).
    left_out: tuple[Blocks, ...] = ()

    @functools.cached_property
    def _name_by_id(self) -> dict[int, str]:
        return {id(m): n for m, n in zip(self.modules, self.names)}

    def name_of(self, module: nn.Module) -> str:
        """A block's dotted path; another module's class name."""
        return self._name_by_id.get(id(module), type(module).__name__)

    def contents(self) -> str:
        """Where the blocks are and what they are: "model.layers (32 × LlamaDecoderLayer)"."""
        classes = Counter(type(m).__name__ for m in self.modules)
        kinds = " + ".join(f"{count} × {name}" for name, count in classes.most_common())
        return f"{self.path} ({kinds})"

    def describe(self) -> str:
        how = "one chain (nn.Sequential)" if self.chain is not None else "each block on its own"
        return f"{self.contents()}, checkpointed {how}"

    def __str__(self) -> str:
        return self.describe()


def _parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _is_stock_sequential(module: nn.Module) -> TypeGuard[nn.Sequential]:
    return isinstance(module, nn.Sequential) and type(module).forward is nn.Sequential.forward


def _flatten(container: nn.Module, path: str) -> list[tuple[str, nn.Module]]:
    """A container's callable members; lists of lists (stages of blocks) are flattened."""
    out = []
    for name, child in container.named_children():
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            out += _flatten(child, f"{path}.{name}")
        else:
            out.append((f"{path}.{name}", child))
    return out


def _score(members: list[tuple[str, nn.Module]]) -> tuple[int, int]:
    """Parameters held by the most common class among the members (which must repeat), then
    how many members there are."""
    if len(members) < 2:
        return (-1, 0)
    classes = Counter(type(m) for _, m in members)
    common, count = classes.most_common(1)[0]
    if count < 2:
        return (-1, 0)
    held = sum(_parameter_count(m) for _, m in members if type(m) is common)
    return (held, len(members))


def _resolve(model: nn.Module, path: str) -> nn.Module:
    """The module at a dotted path from `model`. A leading "model." names the root (as the paths
    remat prints do), unless the root has a member `model` on which the path resolves (Hugging
    Face's LlamaForCausalLM keeps its layers at `model.layers`)."""
    parts = path.split(".")
    tries = [parts]
    if parts[0] == "model":
        tries = [parts, parts[1:]] if hasattr(model, "model") else [parts[1:]]
    errors = []
    for attempt in tries:
        found = _walk(model, attempt)
        if isinstance(found, nn.Module):
            return found
        errors.append(found)
    raise ValueError(errors[0])


def _walk(model: nn.Module, parts: list[str]) -> nn.Module | str:
    """The module at `parts` from `model`, or the error that names where the walk stopped."""
    target: nn.Module = model
    for depth, part in enumerate(parts):
        if not hasattr(target, part) and not (part.isdigit() and isinstance(target, _CONTAINERS)):
            where = ".".join(["model", *parts[:depth]])
            children = ", ".join(name for name, _ in target.named_children()) or "none"
            return f"blocks: {where} has no member '{part}' (its children: {children})"
        found = target[int(part)] if part.isdigit() else getattr(target, part)  # type: ignore[index]
        if not isinstance(found, nn.Module):
            return f"blocks: model.{'.'.join(parts[: depth + 1])} is not an nn.Module"
        target = found
    return target


def _from_container(container: nn.Module, path: str) -> Blocks:
    members = _flatten(container, path)
    if not members:
        raise ValueError(f"blocks: {path} holds no modules")
    chain = container if _is_stock_sequential(container) else None
    return Blocks(
        path=path,
        modules=tuple(m for _, m in members),
        names=tuple(name for name, _ in members),
        chain=chain,
    )


def find_blocks(
    model: nn.Module, blocks: str | nn.Module | Sequence[nn.Module] | None = None
) -> Blocks:
    """The blocks to checkpoint: `blocks` as given, else found in `model`.

    Found: the model itself when it is a stock nn.Sequential; else, among its nn.ModuleList and
    nn.Sequential containers (lists of lists flattened), the one whose repeated class holds the
    most parameters, more members breaking ties, the outermost first.

    Args:
        model: the model whose blocks are wanted.
        blocks: a dotted path such as "model.layers", a container, or a list of modules
            (None: found).

    Returns:
        The blocks, their names and, for a stock nn.Sequential called as a whole, that chain;
        ``print(blocks)`` says which were chosen.

    Example:
        ```python
        print(remat.torch.find_blocks(model))  # model.layers (32 x LlamaDecoderLayer)
        ```
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"model: expected an nn.Module whose calls are training steps, got "
            f"{type(model).__name__}; a function has no blocks to checkpoint (wrap it in an "
            "nn.Module, or use remat.torch.checkpoint_sequential on a list of functions)"
        )
    if blocks is not None:
        given = _given_blocks(model, blocks)
        if not given.modules:
            # Nothing would be checkpointed, and nothing would say so.
            raise ValueError(f"blocks: {given.path} holds no modules to checkpoint")
        return given
    if isinstance(model, nn.ModuleList):
        raise ValueError("model: an nn.ModuleList cannot be called; pass the model that runs it")
    if _is_stock_sequential(model):
        return _from_container(model, "model")
    candidates: list[tuple[tuple[int, int], str, nn.Module]] = []
    for name, module in model.named_modules():
        if not isinstance(module, _CONTAINERS) or module is model:
            continue
        score = _score(_flatten(module, f"model.{name}"))
        if score[0] >= 0:
            candidates.append((score, f"model.{name}", module))
    if not candidates:
        raise ValueError(
            "model: found no nn.ModuleList or nn.Sequential of repeated blocks to checkpoint; "
            'pass blocks= (a dotted path such as "layers", a container, or a list of modules)'
        )
    best = max(candidates, key=lambda candidate: candidate[0])  # the first of equals
    inside_best = {id(m) for m in best[2].modules()}
    left_out = tuple(
        _from_container(module, path)
        for score, path, module in candidates
        if 2 * score[0] >= best[0][0]
        and id(module) not in inside_best
        and all(m is not best[2] for m in module.modules())
    )
    return dataclasses.replace(_from_container(best[2], best[1]), left_out=left_out)


def _given_blocks(model: nn.Module, blocks: str | nn.Module | Sequence[nn.Module]) -> Blocks:
    if isinstance(blocks, str):
        target = _resolve(model, blocks)
        path = blocks if blocks.startswith("model") else f"model.{blocks}"
        if isinstance(target, _CONTAINERS):
            return _from_container(target, path)
        return Blocks(path, (target,), (path,), None)
    if isinstance(blocks, nn.Module):
        path = _paths(model).get(id(blocks), f"<{type(blocks).__name__}>")
        if isinstance(blocks, _CONTAINERS):
            return _from_container(blocks, path)
        return Blocks(path, (blocks,), (path,), None)
    modules = list(blocks)
    for index, module in enumerate(modules):
        if not isinstance(module, nn.Module):
            raise TypeError(f"blocks[{index}]: expected an nn.Module, got {type(module).__name__}")
    paths = _paths(model)
    return Blocks(
        "blocks",
        tuple(modules),
        tuple(paths.get(id(m), f"blocks[{i}]") for i, m in enumerate(modules)),
        None,
    )


def _paths(model: nn.Module) -> dict[int, str]:
    """Each submodule's dotted path from the model, by id."""
    return {id(m): f"model.{n}" if n else "model" for n, m in model.named_modules()}
