"""Plots of the exact budget/runtime trade-off (matplotlib, headless)."""

from __future__ import annotations

import pathlib

import numpy as np

from ._solve import ParetoFront


def plot_pareto(
    front: ParetoFront, path: str | pathlib.Path, *, budget: float | None = None, title: str | None = None
) -> pathlib.Path:
    """Writes best saved runtime against budget as a step curve up to front.max_memory, with
    ``budget`` (the one torch would plan for; default front.max_memory) marked. The format
    follows the file's extension (.png, .svg, ...)."""
    budget = front.max_memory if budget is None else budget
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = pathlib.Path(path)
    budgets = np.append(front.budgets, front.max_memory)
    values = np.append(front.max_runtime, front.max_runtime[-1])
    chosen = front.value_at(budget)
    figure, axes = plt.subplots(figsize=(7, 4.2), dpi=120)
    axes.step(budgets, values, where="post", color="#1f5f99", linewidth=1.6, label="best saved runtime (exact)")
    axes.plot(front.budgets, front.max_runtime, "o", color="#1f5f99", markersize=3)
    axes.axvline(budget, color="#c0392b", linestyle="--", linewidth=1.2)
    axes.plot([budget], [chosen], "s", color="#c0392b", markersize=7, label=f"budget {budget:g}: saves {chosen:.4g}")
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
