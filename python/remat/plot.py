"""Plots of the exact budget/runtime trade-off (matplotlib, headless)."""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING, Any

import numpy as np

from ._solve import ParetoFront


def _pyplot() -> Any:
    """matplotlib's pyplot, headless; a clear error where the `plot` extra is not installed."""
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            "remat.plot needs matplotlib, which remat installs only with its plot extra: "
            'pip install ".[plot]" from a clone (or pip install matplotlib)'
        ) from error
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


if TYPE_CHECKING:
    from .compiled import Tradeoff


def plot_pareto(
    front: ParetoFront,
    path: str | pathlib.Path,
    *,
    budget: float | None = None,
    title: str | None = None,
) -> pathlib.Path:
    """Writes best saved runtime against budget as a step curve up to front.max_memory, with
    ``budget`` (the one torch would plan for; default front.max_memory) marked. The format
    follows the file's extension (.png, .svg, ...)."""
    budget = front.max_memory if budget is None else budget
    plt = _pyplot()

    path = pathlib.Path(path)
    budgets = np.append(front.budgets, front.max_memory)
    values = np.append(front.max_runtime, front.max_runtime[-1])
    chosen = front.value_at(budget)
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=120)
    axes.step(
        budgets,
        values,
        where="post",
        color="#1f5f99",
        linewidth=1.6,
        label="best saved runtime (exact)",
    )
    axes.plot(front.budgets, front.max_runtime, "o", color="#1f5f99", markersize=3)
    axes.axvline(budget, color="#c0392b", linestyle="--", linewidth=1.2)
    axes.plot(
        [budget],
        [chosen],
        "s",
        color="#c0392b",
        markersize=7,
        label=f"budget {budget:g}: saves {chosen:.4g}",
    )
    axes.set_xlabel("memory budget (same unit as the instance's memory)")
    axes.set_ylabel("saved runtime")
    axes.set_title(title or f"Exact trade-off curve ({len(front.budgets)} breakpoints)")
    axes.set_xlim(left=0)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def _readable_axes(axes: Any, peaks: list[float], recomputes: list[float]) -> None:
    """Ticks in the data's own values: no offset ("+2.751" over ticks 0.0000-0.0004), and a
    span around a single peak (one plan, or plans of equal peaks) or a single recompute."""
    axes.ticklabel_format(axis="both", useOffset=False)
    for values, set_limits, least_pad in (
        (peaks, axes.set_xlim, 0.25),
        (recomputes, axes.set_ylim, 1.0),
    ):
        low, high = min(values), max(values)
        if high - low <= 0.02 * max(abs(high), abs(low)):
            pad = max(0.05 * max(abs(high), abs(low)), least_pad)
            set_limits(low - pad, high + pad)


def plot_tradeoff(
    tradeoff: "Tradeoff", path: str | pathlib.Path, *, title: str | None = None
) -> pathlib.Path:
    """Writes a compiled model's trade-off (``remat.torch.tradeoff``): estimated recompute
    against predicted step peak for every plan, the Pareto-optimal ones joined as the steps a
    byte budget moves along, and the measured peaks where some were measured."""
    plt = _pyplot()

    path = pathlib.Path(path)
    mib = float(2**20)
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=120)
    others = [p for p in tradeoff.points if not p.pareto]
    curve = sorted(tradeoff.curve, key=lambda p: p.predicted_peak)
    if others:
        axes.plot(
            [p.predicted_peak / mib for p in others],
            [p.recompute for p in others],
            "o",
            color="#999999",
            markersize=3,
            label="other plans (dominated)",
        )
    axes.step(
        [p.predicted_peak / mib for p in curve],
        [p.recompute for p in curve],
        where="post",
        color="#1f5f99",
        marker="o",
        markersize=4,
        label="least recompute within a budget",
    )
    measured = [(p, p.measured_peak) for p in tradeoff.points if p.measured_peak is not None]
    if measured:
        axes.plot(
            [peak / mib for _, peak in measured],
            [p.recompute for p, _ in measured],
            "s",
            color="#c0392b",
            markersize=6,
            label="measured peak",
        )
        for point, peak in measured:  # each measurement drawn from the prediction it checks
            axes.annotate(
                "",
                xy=(peak / mib, point.recompute),
                xytext=(point.predicted_peak / mib, point.recompute),
                arrowprops={"arrowstyle": "->", "color": "#c0392b", "lw": 0.8},
            )
    peaks = [p.predicted_peak / mib for p in tradeoff.points]
    peaks += [peak / mib for _, peak in measured]
    _readable_axes(axes, peaks, [p.recompute for p in tradeoff.points])
    axes.set_xlabel("step peak (MiB)")
    axes.set_ylabel(f"estimated recompute ({tradeoff.runtime_unit})")
    axes.set_title(title or f"torch.compile ({tradeoff.backend}) peak against recompute")
    axes.grid(alpha=0.3)
    axes.legend(loc="upper right")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
