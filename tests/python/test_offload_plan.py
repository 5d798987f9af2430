"""remat.eager.plan_offload: keep, recompute or offload each layer. The planner's figures are
checked against a simulator written here from the model's statement (a compute stream, one copy
stream each way, buffers allocated and freed as the step runs), and its choice against every
plan that simulator can score, on random small chains."""

from __future__ import annotations

import itertools
import random

import pytest

from remat import _core
from remat.eager import OffloadPlan, measure_bandwidth, plan_offload
from remat.eager.planning.offload import parse_bandwidth
from remat.eager.types import LayerProfile, Profile


def random_profile(rng: random.Random, n: int) -> Profile:
    layers = []
    for j in range(n):
        options = tuple(
            (rng.randrange(5), 0.25 + 0.5 * rng.randrange(4)) for _ in range(rng.randrange(3))
        )
        layers.append(
            LayerProfile(
                name=f"layer{j}",
                saved_bytes=rng.randrange(9),
                output_bytes=1 + rng.randrange(4),
                saves_output=bool(rng.randrange(2)),
                forward_seconds=0.5 + 0.5 * rng.randrange(6),
                options=options,
            )
        )
    return Profile(
        input_bytes=rng.randrange(4),
        layers=tuple(layers),
        region_overhead_seconds=0.25 * rng.randrange(3),
        max_region_layers=1,
    )


def simulate(profile: Profile, choices, bandwidth: float, backward=None):
    """(peak bytes, re-run seconds, stall seconds, host bytes) of one step, run event by event:
    buffers live on the device from their allocation to their free; the forward of layer j+1
    ends once layer j's copy out is done; the backward of layer j starts once its copy back,
    begun with layer j+1's backward, is done. What layer j copies is its saved bytes
    ("offload") or its input, layer j-1's output ("offload_input", a region)."""
    layers, n = profile.layers, len(profile.layers)
    overhead = profile.region_overhead_seconds
    back = backward or [2 * l.forward_seconds for l in layers]
    live: dict[tuple, int] = {("input",): profile.input_bytes}
    peak = sum(live.values())

    def note():
        nonlocal peak
        peak = max(peak, sum(live.values()))

    def moved(j):  # the buffer layer j sends to the host, and its bytes
        if choices[j][0] == "offload":
            return ("saved", j), layers[j].saved_bytes
        if choices[j][0] == "offload_input":
            return ("out", j - 1), layers[j - 1].output_bytes
        return None, 0

    def rerun(j):
        action, option = choices[j]
        if action in ("region", "offload_input"):
            return layers[j].forward_seconds + overhead
        if action == "option":
            return layers[j].options[option][1] + overhead
        return 0.0

    clock, compute, copy_done = 0.0, 0.0, 0.0
    for j, layer in enumerate(layers):  # forward
        action, option = choices[j]
        clock += layer.forward_seconds
        compute += layer.forward_seconds
        if j + 1 < n or layer.saves_output:  # the last output is the code after the chain's
            live[("out", j)] = layer.output_bytes
        if action in ("keep", "offload"):
            live[("saved", j)] = layer.saved_bytes
        if action == "option":
            live[("cache", j)] = layer.options[option][0]
        note()  # the forward's end, before the previous layer's copy out is awaited
        if j > 0 and moved(j - 1)[0] is not None:
            clock = max(clock, copy_done)
            del live[moved(j - 1)[0]]  # on the host now
        if moved(j)[0] is not None:
            copy_done = clock + moved(j)[1] / bandwidth  # runs beside layer j+1's forward
    prefetch_done = 0.0
    for j in reversed(range(n)):  # backward
        action, _ = choices[j]
        if moved(j)[0] is not None:
            clock = max(clock, prefetch_done)
        if action in ("region", "option", "offload_input"):
            live[("saved", j)] = layers[j].saved_bytes  # the re-run's saves
        if j > 0 and moved(j - 1)[0] is not None:  # prefetched beside this backward
            key, size = moved(j - 1)
            live[key] = size
            prefetch_done = clock + size / bandwidth
        # This layer's backward: what it saved, and its output only if it saved it (or it is
        # kept inside the chain: the next layer's input, which the model counts with it).
        if action != "keep" or j + 1 == n:
            if not layers[j].saves_output:
                live.pop(("out", j), None)
        note()
        spent = back[j] + rerun(j)
        clock += spent
        compute += spent
        for key in [k for k in live if len(k) == 2 and k[1] == j]:
            del live[key]
    host = sum(moved(j)[1] for j in range(n))
    return peak, sum(rerun(j) for j in range(n)), clock - compute, host


def may_move_input(profile: Profile, plan, j: int) -> bool:
    """The model's rule: layer j's input may move when nothing of layer j-1 keeps it on the
    device: j-1 re-runs whole or moved its own input, or keeps or offloads its saved bytes
    without saving its output."""
    before = plan[j - 1][0]
    if before in ("region", "offload_input"):
        return True
    return before in ("keep", "offload") and not profile.layers[j - 1].saves_output


def every_plan(profile: Profile):
    n = len(profile.layers)
    per_layer = []
    for j, layer in enumerate(profile.layers):
        here = [("keep", -1)]
        if j + 1 < n:
            here += [("region", -1), ("offload", -1)]
            here += [("option", k) for k in range(len(layer.options))]
            if j > 0:
                here.append(("offload_input", -1))
        per_layer.append(here)
    for plan in itertools.product(*per_layer):
        allowed = (
            may_move_input(profile, plan, j)
            for j, (action, _) in enumerate(plan)
            if action == "offload_input"
        )
        if all(allowed):
            yield plan


def test_the_plan_is_the_best_the_simulator_scores_and_its_figures_are_the_simulator_s():
    rng = random.Random(4)
    compared = offloading = moving = 0
    for _ in range(150):
        profile = random_profile(rng, 1 + rng.randrange(4))
        bandwidth = 1.0 + rng.randrange(8)
        scored = [(plan, simulate(profile, plan, bandwidth)) for plan in every_plan(profile)]
        least = min(peak for _, (peak, *_rest) in scored)
        for budget in (least, least + 2, least + 5):
            best = min(r + s for _, (p, r, s, _h) in scored if p <= budget)
            found = plan_offload(profile, budget, bandwidth=bandwidth, slots=max(1, budget))
            choices = [(layer.action, layer.option) for layer in found.layers]
            peak, rerun, stall, host = simulate(profile, choices, bandwidth)
            assert found.minimum_budget_bytes == least
            assert (found.predicted_peak_bytes, found.host_bytes) == (peak, host) and peak <= budget
            assert found.predicted_recompute_seconds == pytest.approx(rerun)
            assert found.predicted_stall_seconds == pytest.approx(stall)
            assert rerun + stall == pytest.approx(best), (profile, budget, choices)
            compared += 1
            offloading += bool(found.offloaded)
            moving += bool(found.inputs_offloaded)
    assert compared == 450 and offloading > 30 and moving > 30


def test_a_host_budget_caps_what_is_offloaded():
    rng = random.Random(8)
    profile = random_profile(rng, 6)
    fast = plan_offload(profile, 10**6, bandwidth="1GB/s")
    least = plan_offload(profile, 10**6, bandwidth="1GB/s", host_budget=0).minimum_budget_bytes
    free = plan_offload(profile, least, bandwidth=1e9)
    capped = plan_offload(profile, least + 4, bandwidth=1e9, host_budget=0)
    assert fast.offloaded == ()  # nothing to gain at a loose budget
    assert capped.host_bytes == 0 and capped.offloaded == ()
    assert free.predicted_peak_bytes <= least


def test_two_hundred_layers_plan_and_the_table_names_what_moves():
    rng = random.Random(2)
    profile = random_profile(rng, 200)
    least = plan_offload(profile, 10**9, bandwidth=4.0, host_budget=400).minimum_budget_bytes
    plan = plan_offload(profile, least + 50, bandwidth=4.0, host_budget=400)
    assert plan.predicted_peak_bytes <= least + 50 and plan.host_bytes <= 400
    text = str(plan)
    assert "hidden" in text and "| 199 | layer199 | keep |" in text
    if plan.offloaded:
        assert "| offload |" in text


def test_errors_name_the_field():
    profile = random_profile(random.Random(1), 3)
    least = plan_offload(profile, 10**6, bandwidth=1.0).minimum_budget_bytes
    with pytest.raises(_core.InputError, match="memory_budget.*least peak"):
        plan_offload(profile, least - 1, bandwidth=1.0)
    with pytest.raises(ValueError, match="offload_bandwidth"):
        plan_offload(profile, least, bandwidth="fast")
    with pytest.raises(ValueError, match="backward_seconds"):
        plan_offload(profile, least, bandwidth=1.0, backward_seconds=[1.0])


def test_bandwidths_parse_and_measure():
    assert parse_bandwidth("25GB/s") == 25e9
    assert parse_bandwidth("1 KiB/s") == 1024
    assert parse_bandwidth(3) == 3.0
    for bad in ("25GB", 0, -1, True):
        with pytest.raises(ValueError, match="offload_bandwidth"):
            parse_bandwidth(bad)
    rate = measure_bandwidth("cpu", nbytes=1 << 20)
    assert rate > 1e6 and measure_bandwidth("cpu") == rate  # timed once per process
    assert isinstance(
        plan_offload(random_profile(random.Random(0), 2), 100, bandwidth=rate), OffloadPlan
    )
