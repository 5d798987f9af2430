"""What the last ``remat.torch.tradeoff()`` surveyed, so that ``use(memory_budget=...)`` can say
when it partitions another graph than the one the curve was drawn for.

tradeoff() compiles the model together with its loss; a user who then compiles the model alone
(``torch.compile(model)(x).mean().backward()``) partitions a graph whose output is kept for the
loss outside it, with other candidate ops and another least peak, and a budget read off the
curve can then be refused. A graph is known by its size (nodes, forward outputs) and its
candidate ops' sizes, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..units import format_bytes

GraphKey = tuple[int, int, tuple[int, ...]]


@dataclass(frozen=True)
class Survey:
    key: GraphKey
    least_peak: int  # bytes: the least predicted peak on the curve
    backend: str


_LAST: list[Survey] = []  # the last survey of this process, if any


def graph_key(nodes: int, forward_outputs: int, candidate_sizes: Sequence[int]) -> GraphKey:
    return nodes, forward_outputs, tuple(int(size) for size in candidate_sizes)


def remember(key: GraphKey, least_peak: int, backend: str) -> None:
    _LAST[:] = [Survey(key, least_peak, backend)]


def forget() -> None:
    _LAST.clear()


def mismatch(key: GraphKey, least_peak: int | None = None) -> str | None:
    """A sentence for a graph other than the one last surveyed (None: the same, or none
    surveyed). `least_peak`: this graph's least predicted peak, where it is known."""
    if not _LAST or _LAST[0].key == key:
        return None
    survey = _LAST[0]
    this = "" if least_peak is None else f", this graph's is {format_bytes(least_peak)}"
    return (
        f"this compiled graph is not the one remat.torch.tradeoff() surveyed ({key[0]} nodes "
        f"and {key[1]} forward outputs against {survey.key[0]} and {survey.key[1]}; the "
        "curve's least predicted peak is "
        f"{format_bytes(survey.least_peak)}{this}). tradeoff() compiled loss(model(*inputs)) "
        f"as one function with backend={survey.backend!r}: compile the same (the loss inside "
        "the compiled function, the same backend, since inductor decomposes ops into another "
        "graph), or give tradeoff() the loss and backend you compile with, so that the curve "
        "describes this compile"
    )
