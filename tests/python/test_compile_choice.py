"""torch.compile's byte budget, piece by piece: the choice is monotone in the budget and predicts
lazily, the liveness walk counts views once and frees after last use (hand-built graphs), the
lower bound never changes the choice, and the trade-off plots read in MiB."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

import torch.fx as fx  # noqa: E402

from conftest import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
from remat.compiled import (  # noqa: E402
    BudgetTooSmall,
    StepPeak,
    choose,  # noqa: E402
)
from remat.compiled.liveness import walk_graph  # noqa: E402


def peak(value):
    return StepPeak(peak=value, forward_peak=value, saved=0, backward_peak=value)


def part(value, offloaded=frozenset()):
    """A predicted partition of that peak, as Partitioner.predict returns it."""
    from remat.compiled.partition import Partition

    return Partition(frozenset(), peak(value), frozenset(offloaded))


def test_choice_is_monotone_in_the_budget():
    """Over random predictions: a smaller budget never gives a higher predicted peak or less
    recompute, and the choice is the least recompute that fits."""
    import random

    generator = random.Random(0)
    for _ in range(200):
        plans = []
        for index in range(generator.randint(1, 12)):
            plans.append(((index,), float(index)))
        peaks = {plan: generator.randint(1, 100) for plan, _ in plans}
        previous = None
        for budget in range(110, 0, -1):
            try:
                choice = choose(plans, lambda r, _, __: part(peaks[r]), budget)
            except BudgetTooSmall as error:
                assert budget < min(peaks.values())
                assert error.least_peak == min(peaks.values())
                break
            chosen = choice.chosen
            fitting = [r for (r,), _ in [(p, c) for p, c in plans] if peaks[(r,)] <= budget]
            assert chosen.recompute == min(float(r) for r in fitting)
            if previous is not None:
                assert chosen.peak.peak <= previous.peak.peak
                assert chosen.recompute >= previous.recompute
            previous = chosen


def test_choice_predicts_lazily():
    calls = []

    def predict(recomputed, budget, offload):
        calls.append(recomputed)
        return part(50 - 10 * len(recomputed))

    plans = [((), 0.0), ((0,), 1.0), ((0, 1), 2.0), ((0, 1, 2), 3.0)]
    assert choose(plans, predict, 45).chosen.recomputed == (0,)
    assert calls == [(), (0,)]


def graph_of(function, *shapes):
    """An fx graph of ``function`` with fake-tensor 'val' meta, as the partitioner sees it."""
    from torch.fx.experimental.proxy_tensor import make_fx

    return make_fx(function, tracing_mode="fake")(*[torch.empty(s) for s in shapes]).graph


def test_liveness_counts_views_once_and_frees_after_last_use():
    def function(x):
        a = x * 2  # 4 KiB
        b = a.view(-1)  # a view: no bytes
        c = b + 1  # 4 KiB, a dies after this
        d = c * c  # 4 KiB, c dies
        return d.sum()

    graph = graph_of(function, (32, 32))
    walk = walk_graph(graph, {}, kept=set())
    assert walk.peak == 2 * 4096  # never three 4 KiB tensors at once
    assert walk.held_at_end == 4  # the returned scalar


def test_liveness_keeps_what_the_graph_returns_and_counts_given_tensors():
    def function(x):
        a = x * 2
        b = a + 1
        c = b + x  # a, b and c live at once; b and x die here
        return a.sum(), c  # a dies after its sum

    graph = graph_of(function, (16, 16))
    walk = walk_graph(graph, {}, kept=set())
    # a is returned, so it lives to the end: a, b, c at once when c is made; x is not counted
    assert walk.peak == 3 * 1024 and walk.held_at_end == 1024 + 4
    placeholder = next(iter(graph.find_nodes(op="placeholder")))
    from remat.compiled.liveness import _storages

    given = _storages(placeholder)
    # a tensor handed in (a saved activation) counts until its last use, then is freed
    walk = walk_graph(graph, dict(given), kept=set())
    assert walk.peak == 4 * 1024 and walk.held_at_end == 1024 + 4


def test_a_lower_bound_skips_plans_without_changing_the_choice():
    """Over random predictions with random floors under them: plans whose floor is above the
    budget are skipped (not predicted), and the choice and the error are those of predicting
    every plan."""
    import random

    generator = random.Random(1)
    for _ in range(200):
        plans = [((index,), float(index)) for index in range(generator.randint(1, 12))]
        peaks = {plan: generator.randint(1, 100) for plan, _ in plans}
        floors = {plan: int(peaks[plan] * generator.random()) for plan in peaks}
        for budget in range(110, 0, -7):
            predicted = []

            def bounded(recomputed, limit, offload):
                if limit is not None and floors[recomputed] > limit:
                    return None
                predicted.append(recomputed)
                return part(peaks[recomputed])

            try:
                want = choose(plans, lambda r, _, __: part(peaks[r]), budget)
            except BudgetTooSmall as error:
                with pytest.raises(BudgetTooSmall) as got:
                    choose(plans, bounded, budget)
                assert got.value.least_peak == error.least_peak
                continue
            got = choose(plans, bounded, budget)
            assert got.chosen == want.chosen
            skipped = {r for (r, _) in plans if floors[r] > budget}
            assert not skipped & set(predicted) and got.bounded == len(
                skipped & {c.recomputed for c in want.candidates}
            )


def test_plot_of_one_peak_reads_in_mib_without_an_axis_offset():
    """One plan (or plans of equal peaks) used to print '+2.751' over ticks 0.0000-0.0004."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import remat.plot

    figure, axes = plt.subplots()
    peak = 2885128 / 2**20
    axes.plot([peak], [0.0], "o")
    remat.plot._readable_axes(axes, [peak], [0.0])
    figure.canvas.draw()
    for axis in (axes.xaxis, axes.yaxis):
        assert axis.get_major_formatter().get_offset() == ""
    low, high = axes.get_xlim()
    assert low < peak < high and high - low >= 0.5
    labels = [float(t.get_text().replace("\u2212", "-")) for t in axes.get_xticklabels()]
    assert min(labels) < peak < max(labels) and max(labels) - min(labels) >= 0.25
    plt.close(figure)


def test_fx_graph_helper_is_real():
    assert isinstance(graph_of(lambda x: x + 1, (2,)), fx.Graph)
