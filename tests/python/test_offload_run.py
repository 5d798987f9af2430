"""auto_checkpoint(..., offload=...) running offload plans in eager PyTorch, on the CPU: the "host"
copy is another host tensor, so what the device holds is what SavedTensorMeter counts. Every
run is compared bit for bit with plain training; the measured peak must stay within the
prediction and the prediction within the budget."""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
from torch import nn

import remat
import remat.torch as rt
from remat.eager import plan_offload
from remat.eager.run import offload as offload_run
from zoo.meter import BlockMeter

FAST = "1TB/s"  # copies that cost nothing: the planner offloads wherever it can


class Block(nn.Module):
    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.down(torch.nn.functional.gelu(self.up(self.norm(x)))))


class Net(nn.Module):
    def __init__(self, blocks: int = 6, width: int = 32) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block(width) for _ in range(blocks))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class HFStyleLayer(nn.Module):
    """A decoder layer as Hugging Face writes them: a mask and rotary tables as keyword
    arguments, a tuple out."""

    def __init__(self, width: int = 32) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.mlp = Block(width)

    def forward(self, hidden, attention_mask=None, position_embeddings=None):
        cos, sin = position_embeddings
        q, k, v = self.qkv(hidden).chunk(3, dim=-1)
        q, k = q * cos + q.roll(1, -1) * sin, k * cos + k.roll(1, -1) * sin
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5 + attention_mask
        attended = torch.softmax(scores, dim=-1) @ v
        hidden = hidden + self.out(attended)
        return (self.mlp(hidden),)


class HFStyleModel(nn.Module):
    def __init__(self, layers: int = 5, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, width)
        self.layers = nn.ModuleList(HFStyleLayer(width) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, 50, bias=False)
        self.lm_head.weight = self.embed.weight  # tied

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(ids)
        seq = ids.shape[1]
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        angles = torch.arange(seq)[:, None] * torch.ones(hidden.shape[-1]) / 10
        rotary = (angles.cos(), angles.sin())
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=rotary)[0]
        return self.lm_head(self.norm(hidden))


def _train(model, batch, loss_fn, steps=3, meter=False):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads, peaks = [], [], []
    torch.manual_seed(0)
    for step in range(steps):
        optimizer.zero_grad(set_to_none=True)
        if meter and step > 0:  # the first step measures
            with BlockMeter(model, model.layers) as m:  # the budget's bytes: the blocks'
                loss = loss_fn(model(batch))
                loss.backward()
            peaks.append(m.peak_bytes)
        else:
            loss = loss_fn(model(batch))
            loss.backward()
        losses.append(loss.detach().clone())
        grads.append([p.grad.clone() for p in model.parameters()])
        optimizer.step()
    return losses, grads, peaks, {k: v.clone() for k, v in model.state_dict().items()}


def _check_exact(got, want):
    for x, y in zip(got[0], want[0]):
        assert torch.equal(x, y)
    for gx, gy in zip(got[1], want[1]):
        assert all(torch.equal(a, b) for a, b in zip(gx, gy))
    assert all(torch.equal(got[3][k], want[3][k]) for k in want[3])


CASES = {
    "mlp": (lambda: Net(), lambda: torch.randn(16, 32), lambda out: out.sum()),
    "hf_style": (
        lambda: HFStyleModel(),
        lambda: torch.randint(0, 50, (2, 12)),
        lambda out: out.logsumexp(-1).sum(),
    ),
}


def _case(name):
    """A fresh model of CASES[name], its plain twin, a batch, the loss and its measurement."""
    build, batch_of, loss_fn = CASES[name]
    torch.manual_seed(3)
    model = build()
    plain = copy.deepcopy(model)
    batch = batch_of()
    measured = rt.measure(copy.deepcopy(model), batch, verbose=False)
    return model, plain, batch, loss_fn, measured


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.6])
def test_offload_plans_train_bit_for_bit_within_the_prediction(name, fraction):
    model, plain, batch, loss_fn, measured = _case(name)
    least, everything = measured.least_activation_budget_bytes, measured.no_checkpoint_bytes
    budget = least + int(fraction * (everything - least))
    want = _train(plain, batch, loss_fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no remat warning
        handle = rt.auto_checkpoint(
            model, activation_budget=budget, offload=True, offload_bandwidth=FAST
        )
        got = _train(model, batch, loss_fn, meter=True)
    _check_exact(got, want)
    plan = handle.plan
    assert max(got[2]) <= plan.predicted_peak_bytes <= budget, (got[2], plan)
    if fraction > 0:  # room for an offloaded layer's bytes beside the next layer's
        assert plan.offloaded, plan
    assert set(plan.offloaded).isdisjoint(first for first, _, _ in plan.regions)


def test_an_offload_plan_is_cheaper_than_re_running_at_the_same_budget():
    torch.manual_seed(3)
    model, batch = Net(), torch.randn(16, 32)
    measured = rt.measure(copy.deepcopy(model), batch, verbose=False)
    budget = (3 * measured.least_activation_budget_bytes + measured.no_checkpoint_bytes) // 4
    kept = rt.auto_checkpoint(copy.deepcopy(model), activation_budget=budget)
    offloading = rt.auto_checkpoint(
        model, activation_budget=budget, offload=True, offload_bandwidth=FAST
    )
    for m in (kept.model, model):
        m(batch).sum().backward()
    assert offloading.plan.offloaded and not kept.plan.offloaded
    assert kept.plan.predicted_recompute_seconds > 0
    assert offloading.plan.predicted_recompute_seconds < kept.plan.predicted_recompute_seconds
    table = str(offloading.plan)
    assert "offloads" in table and " o" in table
    assert pickle.loads(pickle.dumps(offloading.plan)).offloaded == offloading.plan.offloaded


def test_copies_back_start_when_the_gradient_reaches_the_next_block(monkeypatch):
    """Prefetch one block ahead: by the time backward unpacks an offloaded tensor, its copy back
    has started (no copy is made on demand)."""
    model, batch, handle = _offloading_net()
    on_demand, unpacked = [], []
    original = offload_run._Stored.on_device

    def on_device(stored):
        unpacked.append(stored)
        if stored.resident is None and stored.back is None:
            on_demand.append(stored)
        return original(stored)

    monkeypatch.setattr(offload_run._Stored, "on_device", on_device)
    model(batch).sum().backward()
    assert unpacked and not on_demand


def test_a_saved_tensor_changed_in_place_raises_as_autograd_does():
    x = torch.randn(8, 16, requires_grad=True)

    def block() -> torch.Tensor:
        y = torch.sigmoid(x)  # sigmoid saves its output
        z = y * 3
        y.add_(1)  # then changes it: autograd refuses in backward
        return z

    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        block().sum().backward()
    call = offload_run.OffloadedCall("Block", (x,), set(), lambda _: None)
    with call.hooks():
        out = block()
    call.finish(out)
    call.release()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_outputs_a_block_saves_but_does_not_pass_on_keep_it_from_being_offloaded():
    """A block that saves an output the next block does not take (a gate returned beside the
    hidden state) keeps that output on the device when offloaded, so the planner is told not to
    offload it."""

    class Gated(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(16, 16)

        def forward(self, x):
            gate = torch.sigmoid(self.lin(x))  # saved by sigmoid, returned
            return x * gate + x, gate

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(Gated() for _ in range(4))

        def forward(self, x):
            for layer in self.layers:
                x, _ = layer(x)
            return x

    torch.manual_seed(0)
    model, batch = Model(), torch.randn(8, 16)
    plain = copy.deepcopy(model)
    measured = rt.measure(copy.deepcopy(model), batch, verbose=False)
    budget = (measured.least_activation_budget_bytes + measured.no_checkpoint_bytes) // 2
    handle = rt.auto_checkpoint(
        model, activation_budget=budget, offload=True, offload_bandwidth=FAST
    )
    loss_fn = lambda out: out.sum()  # noqa: E731
    want = _train(plain, batch, loss_fn)
    got = _train(model, batch, loss_fn, meter=True)
    _check_exact(got, want)
    layers = handle.plan.profile.layers
    assert not any(layer.offloadable for layer in layers[:-1])  # the last is never offloaded
    assert not handle.plan.offloaded
    assert max(got[2]) <= handle.plan.predicted_peak_bytes <= budget
    unmasked = plan_offload(handle.plan.profile, budget, bandwidth=FAST)
    assert unmasked.offloaded  # the flag, not the budget, is what keeps them


def test_offload_settings_are_checked_where_they_are_given():
    model = Net()
    with pytest.raises(ValueError, match="offload: expected False, 'auto' or True"):
        rt.auto_checkpoint(model, activation_budget="1GiB", offload="yes")
    for bandwidth in ("fast", "0GB/s", float("inf")):
        with pytest.raises(ValueError, match="offload_bandwidth"):
            rt.auto_checkpoint(
                model, activation_budget="1GiB", offload=True, offload_bandwidth=bandwidth
            )
    with pytest.raises(ValueError, match="host_budget"):
        rt.auto_checkpoint(model, activation_budget="1GiB", offload=True, host_budget="lots")
    with pytest.raises(ValueError, match="microbatches_in_flight"):
        rt.auto_checkpoint(model, activation_budget="1GiB", offload=True, microbatches_in_flight=2)
    chain = nn.Sequential(*(Block() for _ in range(3)))
    with pytest.raises(ValueError, match=r"stock nn.Sequential.*blocks=list\(model\)\)"):
        rt.auto_checkpoint(chain, activation_budget="1GiB", offload=True)


def _offloading_net():
    """An MLP under auto_checkpoint at a budget where it offloads, after its first step."""
    torch.manual_seed(3)
    model, batch = Net(), torch.randn(16, 32)
    measured = rt.measure(copy.deepcopy(model), batch, verbose=False)
    budget = (measured.least_activation_budget_bytes + measured.no_checkpoint_bytes) // 3
    handle = rt.auto_checkpoint(
        model, activation_budget=budget, offload=True, offload_bandwidth=FAST
    )
    model(batch).sum().backward()
    assert handle.plan.offloaded
    return model, batch, handle


def test_run_plan_refuses_a_plan_that_offloads():
    # It ran such a plan keeping everything on the device: 221184 bytes against 141312.
    model, batch, handle = _offloading_net()
    handle.remove()
    with pytest.raises(ValueError, match="plan: it offloads"):
        remat.eager.run_plan(list(model.layers), handle.plan, batch)


def test_auto_offloads_only_on_cuda_and_a_host_budget_bounds_the_host_bytes():
    torch.manual_seed(3)
    model, batch = Net(), torch.randn(16, 32)
    measured = rt.measure(copy.deepcopy(model), batch, verbose=False)
    budget = (3 * measured.least_activation_budget_bytes + measured.no_checkpoint_bytes) // 4
    auto = rt.auto_checkpoint(
        copy.deepcopy(model), activation_budget=budget, offload="auto", offload_bandwidth=FAST
    )
    auto.model(batch).sum().backward()
    assert auto.plan.offload is None  # the CPU has no host memory apart from its own
    bounded = rt.auto_checkpoint(
        model, activation_budget=budget, offload=True, offload_bandwidth=FAST, host_budget=30_000
    )
    model(batch).sum().backward()
    saved = {layer.saved_bytes for layer in bounded.plan.profile.layers}
    assert len(saved) == 1 and 30_000 // saved.pop() == 1  # room for one layer's bytes
    assert len(bounded.plan.offloaded) == 1
    assert bounded.plan.offload.host_bytes <= 30_000


@pytest.mark.parametrize("name", list(CASES))
def test_moving_region_inputs_trains_below_the_least_peak_of_keep_and_recompute(name):
    """A region's input (the previous block's output) may go to host memory too: that is what
    goes below full checkpointing's peak, the least keep/recompute reaches."""
    model, plain, batch, loss_fn, measured = _case(name)
    least = measured.least_activation_budget_bytes
    probe = rt.auto_checkpoint(
        copy.deepcopy(model), activation_budget=least, offload=True, offload_bandwidth=FAST
    )
    probe.model(batch)
    lower = probe.plan.minimum_budget_bytes
    assert lower == measured.least_offload_budget_bytes < least
    budget = (lower + least) // 2
    want = _train(plain, batch, loss_fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        handle = rt.auto_checkpoint(
            model, activation_budget=budget, offload=True, offload_bandwidth=FAST
        )
        got = _train(model, batch, loss_fn, meter=True)
    _check_exact(got, want)
    plan = handle.plan
    assert plan.inputs_offloaded and set(plan.inputs_offloaded) <= {r[0] for r in plan.regions}
    assert max(got[2]) <= plan.predicted_peak_bytes <= budget < least, (got[2], plan)
    assert " i" in str(plan)
    with pytest.raises(remat.InputError, match="least peak"):
        rt.auto_checkpoint(
            copy.deepcopy(plain), activation_budget=lower - 1, offload=True, offload_bandwidth=FAST
        ).model(batch)


def test_an_input_the_model_keeps_elsewhere_is_reported_when_moving_it_frees_nothing():
    class KeepsEveryOutput(Net):
        def forward(self, x):
            self.seen = []
            for layer in self.layers:
                x = layer(x)
                self.seen.append(x)  # as output_hidden_states=True does
            return self.head(x)

    torch.manual_seed(3)
    model, batch = KeepsEveryOutput(), torch.randn(16, 32)
    measured = rt.measure(copy.deepcopy(model), batch, verbose=False)
    handle = rt.auto_checkpoint(
        model,
        activation_budget=measured.least_activation_budget_bytes - 1,
        offload=True,
        offload_bandwidth=FAST,
    )
    model(batch).sum().backward()
    assert handle.plan.inputs_offloaded
    with pytest.warns(RuntimeWarning, match="still referenced elsewhere"):
        model(batch).sum().backward()


class KeepsItsHidden(nn.Module):
    """A block that keeps a tensor it saved (as a block caching an attention map would)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(32, 128), nn.Linear(128, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.nn.functional.gelu(self.up(x))
        self.last = hidden  # self.down saves it too
        return x + self.down(hidden)


def test_a_storage_held_elsewhere_keeps_its_version_check_and_is_reported_with_its_size():
    model = Net()
    model.layers = nn.ModuleList(KeepsItsHidden() for _ in range(6))
    batch = torch.randn(16, 32)
    measured = rt.measure(copy.deepcopy(model), batch, verbose=False)
    budget = (measured.least_activation_budget_bytes + measured.no_checkpoint_bytes) // 2
    handle = rt.auto_checkpoint(
        model, activation_budget=budget, offload=True, offload_bandwidth=FAST
    )
    model(batch).sum().backward()
    assert handle.plan.offloaded
    with pytest.warns(RuntimeWarning, match=r"8 KiB it sends to host memory is still referenced"):
        model(batch).sum().backward()
    out = model(batch)
    model.layers[handle.plan.offloaded[0]].last.mul_(0.5)  # after it left the device
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_autocast_weight_casts_stay_and_their_layers_are_not_offloaded():
    class Autocast(Net):
        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                for layer in self.layers:
                    x = layer(x)
            return self.head(x.float())

    torch.manual_seed(0)
    model, batch = Autocast(), torch.randn(16, 32)
    plain = copy.deepcopy(model)
    measured = rt.measure(copy.deepcopy(model), batch, verbose=False)
    budget = (measured.least_activation_budget_bytes + measured.no_checkpoint_bytes) // 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        handle = rt.auto_checkpoint(
            model, activation_budget=budget, offload=True, offload_bandwidth=FAST
        )
        got = _train(model, batch, lambda out: out.sum())
    _check_exact(got, _train(plain, batch, lambda out: out.sum()))
    assert not any(layer.offloadable for layer in handle.plan.profile.layers)
    assert not handle.plan.offloaded


def test_offload_under_a_step_budget_on_the_cpu_is_planned_without_it():
    # Host memory is the memory a CPU step's budget bounds: offload plans came out over their
    # prediction by what they moved on every step, and timing the copy bandwidth (on 64 MiB
    # buffers) in the first step was counted as the head's, which refused the budget.
    torch.manual_seed(0)
    model, x = Net(blocks=4), torch.randn(8, 16, 32)
    probe = copy.deepcopy(model)
    measured = rt.measure(probe, x, optimizer=torch.optim.SGD(probe.parameters(), lr=0.01))
    budget = (measured.least_budget_bytes + measured.no_checkpoint_step_bytes) // 2
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with pytest.warns(RuntimeWarning, match="planned without offloading"):
        handle = rt.auto_checkpoint(model, memory_budget=budget, offload=True, optimizer=optimizer)
        for _ in range(3):
            with rt.StepMemoryMeter(model, optimizer, x) as meter:
                model(x).sum().backward()
                optimizer.step()
                optimizer.zero_grad()
            assert meter.peak_bytes <= budget
    assert not handle.plan.offloaded
