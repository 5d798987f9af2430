"""remat's fast path for predicting torch.compile plans: its min-cut (a C++ maximum flow in
place of networkx's) and its forward/backward split (node lists in place of torch's graph
copies) must give exactly what torch's own steps give, on every candidate plan of every model,
and a disagreement must never pass silently (the guard plans again with torch's steps)."""

from __future__ import annotations

import math
import random
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
nx = pytest.importorskip("networkx")

import torch._functorch.config as functorch_config  # noqa: E402

from conftest import ROOT  # noqa: E402

sys.path.insert(0, str(ROOT / "examples"))
import models  # noqa: E402
import remat.torch as rt  # noqa: E402
from remat.compiled import measured_peak, partition  # noqa: E402
from remat.compiled.min_cut import minimum_cut  # noqa: E402
from remat.compiled.split import JointSplit  # noqa: E402

MODELS = {
    "gpt_dropout": lambda: models.make_gpt(
        depth=2, width=32, heads=2, seq=16, batch=2, dropout=0.1
    ),
    "resnet": lambda: models.make_resnet(per_stage=1, batch=2, size=16),
    "mixer": lambda: models.make_mixer(depth=2, width=32, patch=4, size=16, batch=4),
    "llama": lambda: models.make_llama(depth=2, width=32, heads=2, seq=16, batch=2, vocab=64),
}


@pytest.fixture(autouse=True)
def _no_survey_left_behind():
    """tradeoff() remembers its survey for the process (remat.compiled.survey)."""
    yield
    from remat.compiled import survey

    survey.forget()


@pytest.fixture
def checked_partitions(monkeypatch):
    """Every Partitioner runs remat's and torch's steps side by side and raises on a
    difference; yields the partitioners made."""
    made = []
    original = partition.Partitioner.__init__

    def checking(self, joint_graph, node_info, *, fast=True, check=False):
        original(self, joint_graph, node_info, fast=fast, check=True)
        made.append(self)

    monkeypatch.setattr(partition.Partitioner, "__init__", checking)
    yield made
    torch._dynamo.reset()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_candidate_plan_is_predicted_as_torch_predicts_it(name, checked_partitions):
    torch.manual_seed(0)
    model, _, x = MODELS[name]()
    rt.tradeoff(model, x, backend="aot_eager", measure=0, loss=models.loss, verbose=False)
    assert checked_partitions
    fast = sum(p.fast_splits for p in checked_partitions)
    assert fast >= 2, "the fast split ran on the candidates (else nothing was compared)"


def test_a_hugging_face_decoder_is_predicted_as_torch_predicts_it(checked_partitions):
    """Masks, rotary embeddings, SDPA and a cross-entropy loss, as transformers writes them."""
    sys.path.insert(0, str(ROOT / "tests" / "python"))
    pytest.importorskip("transformers")
    from zoo.models import ZOO

    zoo = ZOO["llama"]
    torch.manual_seed(0)
    model = zoo.build("sdpa")
    args, kwargs = zoo.batch()
    rt.tradeoff(
        model, *args, backend="aot_eager", measure=0, loss=zoo.loss, verbose=False, **kwargs
    )
    assert sum(p.fast_splits for p in checked_partitions) >= 2


def _random_graph(rng, n):
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for _ in range(rng.randint(0, 3 * n)):
        u, v = rng.randrange(n), rng.randrange(n)
        if u != v:
            g.add_edge(u, v, capacity=rng.choice([math.inf, 0, 1, 2, 3, 5.0, 7, 10**6]))
    return g


def test_the_min_cut_partition_is_networkx_s_on_random_graphs():
    from networkx.algorithms.flow.maxflow import minimum_cut as networkx_cut

    rng = random.Random(7)
    compared = 0
    for _ in range(1500):
        g = _random_graph(rng, rng.randint(2, 10))
        sink = len(g) - 1
        try:
            want = networkx_cut(g, 0, sink)
        except nx.NetworkXUnbounded:
            with pytest.raises(nx.NetworkXUnbounded):
                minimum_cut(g, 0, sink)
            continue
        got = minimum_cut(g, 0, sink)
        assert got[0] == want[0] and got[1] == want[1], (list(g.edges(data=True)), got, want)
        compared += 1
    assert compared > 500


def test_capacities_the_flow_cannot_take_exactly_go_to_networkx():
    g = nx.DiGraph()
    g.add_edge("s", "a", capacity=1.5)  # not an integer
    g.add_edge("a", "t", capacity=2**60)  # past 2^53
    assert minimum_cut(g, "s", "t") == nx.minimum_cut(g, "s", "t")


def test_a_wrong_fast_prediction_is_caught_and_planned_again_with_torch(monkeypatch):
    """If the fast split ever disagreed with torch's, the compile must not follow it: the guard
    compares the chosen plan with torch's own partition, warns, and plans again without it."""
    torch.manual_seed(0)
    model, _, x = MODELS["mixer"]()
    original = JointSplit.split

    def wrong(self, saved_values):
        found = original(self, saved_values)
        if found is None:
            return None
        forward, backward = found
        return forward.__class__(forward.inputs, [], forward.outputs), backward  # no forward

    torch._dynamo.reset()
    with (
        functorch_config.patch(enable_autograd_cache=False),
        rt.use(memory_budget=1 << 40) as solver,
    ):
        compiled = torch.compile(lambda i: models.loss(model(i)), backend="aot_eager")
        monkeypatch.setattr(JointSplit, "split", wrong)
        with pytest.warns(UserWarning, match="differs from torch's own partition"):
            compiled(x).backward()
        model.zero_grad(set_to_none=True)
        measured = measured_peak(lambda: compiled(x).backward())
    torch._dynamo.reset()
    assert len(solver.choices) == 1
    chosen = solver.choices[0].chosen
    assert measured <= chosen.peak.peak  # the prediction made with torch's steps holds


def test_the_fast_path_is_several_times_faster_than_torch_s_steps():
    """Every candidate plan of a model predicted (a survey), remat's steps against torch's."""
    torch.manual_seed(0)
    model, _, x = models.make_llama(depth=2, width=64, heads=4, seq=32, batch=4, vocab=128)
    seconds = {}
    for mode in (False, True):
        made = []
        original = partition.Partitioner.__init__

        def recording(self, joint_graph, node_info, *, fast=True, check=False, mode=mode):
            original(self, joint_graph, node_info, fast=mode, check=False)
            made.append(self)

        partition.Partitioner.__init__ = recording
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                rt.tradeoff(
                    model, x, backend="aot_eager", measure=0, loss=models.loss, verbose=False
                )
        finally:
            partition.Partitioner.__init__ = original
            torch._dynamo.reset()
        seconds[mode] = sum(sum(p.seconds.values()) for p in made)
    # A ratio, not seconds: the suite runs on loaded machines (bench/compile_budget.py reports
    # the seconds per graph).
    assert seconds[True] < seconds[False] / 3, seconds
