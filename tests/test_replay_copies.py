"""Replay's speed-ups keep its answers: a module copied once per comparison and shared by the calls inside it
computes what a fresh copy per call computes, a weight changed between two comparisons is seen by the next one,
the module-by-module copy computes what ``copy.deepcopy`` made and shares no state with the live module, and a
call's pairs measured in one pass give ``diff_stats``' numbers."""

from __future__ import annotations

import copy
import types
import math
from itertools import chain

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.demo import build_demo
from nbtrace.diff.measure.noise import diff_stats
from nbtrace.diff.replay import copies as copies_module
from nbtrace.diff.replay.copies import Copies
from nbtrace.capture.twin.copies import copy_in
from nbtrace.diff.measure.pair_sums import PairSums, Rows
from tests.models.precision import one_thread  # noqa: F401

LAYERS = 3
UP = f"DemoLM.layers.{LAYERS - 1}.mlp.up_proj"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    model, inputs = build_demo(num_layers=LAYERS)
    folder = tmp_path_factory.mktemp("demo")
    # without the float64 twin: the live port is then replayed call by call (what these tests are about)
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder, use_repr=False, do_prune_layers=False,
                                        measure_rounding=False):
        model(**inputs)
    return folder


def _numbers(c) -> list[tuple]:
    return [(m.a.module_path, m.difference.own if m.difference else None, m.difference.score if m.difference else None)
            for m in c.matches]


def test_a_weight_changed_between_two_comparisons_is_seen_by_the_second(reference):
    port, _ = build_demo(num_layers=LAYERS)
    assert nbtrace.compare(reference, port).verdict == "agree"
    with torch.no_grad():
        port.get_submodule(UP.split(".", 1)[1]).weight.mul_(1.01)  # a float64 copy kept from the first: blind
    c = nbtrace.compare(reference, port)
    assert c.method == "replay" and c.first_divergence is not None and c.first_divergence.module_path == UP


def test_shared_copies_compute_what_a_fresh_copy_per_call_computes(reference, monkeypatch):
    port, _ = build_demo(num_layers=LAYERS)
    with torch.no_grad():
        port.get_submodule(UP.split(".", 1)[1]).weight.mul_(1.01)
    made = []
    original = Copies.of

    def counted(self, module):
        before = self.made
        copied = original(self, module)
        made.append(self.made - before)
        return copied

    monkeypatch.setattr(copies_module.Copies, "of", counted)
    shared = nbtrace.compare(reference, port)
    assert sum(made) < len(made) / 2  # a layer block's copy serves the calls inside it
    monkeypatch.setattr(copies_module.Copies, "of", lambda self, module: copy_in(module, self.dtype))
    fresh = nbtrace.compare(reference, port)
    assert _numbers(shared) == _numbers(fresh)
    assert shared.first_divergence.module_path == fresh.first_divergence.module_path == UP


def test_copies_hold_one_copy_at_a_time_and_serve_its_submodules():
    model, _ = build_demo(num_layers=2)
    copies = Copies(torch.float64)
    layer = copies.of(model.layers[0])
    assert copies.of(model.layers[0].mlp.up_proj) is layer.mlp.up_proj and copies.made == 1
    other = copies.of(model.layers[1].mlp)
    assert copies.made == 2 and other.up_proj.weight.dtype == torch.float64
    assert copies.of(model.layers[0].mlp) is not layer.mlp and copies.made == 3  # the first copy was dropped
    copies.clear()
    assert copies.of(model.layers[1].mlp) is not other


class _Stateful(nn.Module):
    """A module with what a deep copy must not share: a cache its forward fills, a tensor attribute, an integer
    buffer, a method bound to itself, tied weights."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.tied = nn.Linear(4, 4)
        self.tied.weight = self.inner.weight
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.scale = torch.tensor(0.5)
        self.cache: dict[str, torch.Tensor] = {}
        self.counter = types.SimpleNamespace(calls=0, seen=[])  # an object of another class holding state
        self.act = self.halve

    def halve(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale.to(x.dtype) * self.inner.weight[0, 0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cache["last"] = x
        self.counter.calls += 1
        self.counter.seen.append(x.dtype)
        self.steps += 1
        return self.act(self.tied(self.inner(x)))


def test_the_module_copy_computes_what_a_deep_copy_computes_and_shares_no_state():
    torch.manual_seed(0)
    live = _Stateful()
    before = {name: t.clone() for name, t in chain(live.state_dict().items(), [("scale", live.scale)])}
    x = torch.randn(3, 4, dtype=torch.float64)
    deep = copy.deepcopy(live).double()
    copied = copy_in(live, torch.float64)
    assert copied.tied.weight is copied.inner.weight and copied.inner.weight.dtype == torch.float64
    assert copied.act.__self__ is copied and copied.steps.dtype == torch.int64
    with torch.no_grad():
        assert torch.equal(copied(x), deep(x))
    assert live.cache == {} and int(live.steps) == 0 and int(copied.steps) == 1
    assert live.counter.calls == 0 and live.counter.seen == [] and copied.counter.calls == 1
    assert live.inner.weight.dtype == torch.float32 and copied.scale is not live.scale
    after = {name: t for name, t in chain(live.state_dict().items(), [("scale", live.scale)])}
    assert all(torch.equal(before[name], after[name]) and before[name].dtype == after[name].dtype for name in before)


def test_pair_sums_give_diff_stats_numbers_also_with_padding_and_non_finite_values():
    torch.manual_seed(1)
    ref = torch.randn(2, 5, 8)
    port = ref + 1e-3 * torch.randn(2, 5, 8)
    wide = ref.double() + 1e-4 * torch.randn(2, 5, 8, dtype=torch.float64)
    port[0, 1, 2], wide[1, 3, 4], ref[0, 0, 0] = math.nan, math.inf, -math.inf
    valid = torch.ones(2, 5, dtype=torch.bool)
    valid[1, 4] = False
    tensors = [ref, port, wide, wide.to(port.dtype)]
    pairs = [(0, 1), (0, 2), (2, 1), (2, 3)]
    for rows in (None, valid):
        sums = PairSums(tensors, pairs, Rows(rows))
        for k, (i, j) in enumerate(pairs):
            got, want = sums.stats(k, 2.0**-24), diff_stats(tensors[i], tensors[j], rows, 2.0**-24)
            assert got.n == want.n and got.u == want.u
            assert [got.rel, got.rms, got.norm] == pytest.approx([want.rel, want.rms, want.norm], rel=1e-12)
        x, y = ref.double().reshape(-1, 8), port.double().reshape(-1, 8)
        if rows is not None:
            x, y = ref.double()[rows], port.double()[rows]
        finite = torch.isfinite(x) & torch.isfinite(y)
        x, y = x[finite], y[finite]
        delta = float((x - y).abs().max())
        want = (delta, delta / float(x.abs().max()), float(x @ y) / float(x.norm() * y.norm()))
        assert sums.numbers(0) == pytest.approx(want, rel=1e-12)
    same = PairSums([ref, ref.clone()], [(0, 1)])
    assert same.stats(0, 0.0).rel == 0.0 and same.numbers(0)[:2] == (0.0, 0.0)


def test_the_garbage_collector_is_left_as_it_was_also_when_replay_raises(reference, monkeypatch):
    import gc

    from nbtrace.diff.replay import replay as replay_module

    port, _ = build_demo(num_layers=LAYERS)
    seen = []

    def failing(self, match):
        seen.append(gc.get_freeze_count())  # older objects are frozen while replay runs
        raise RuntimeError("inside replay")

    monkeypatch.setattr(replay_module.Replayer, "replay", failing)
    rng = torch.random.get_rng_state()
    with pytest.raises(RuntimeError, match="inside replay"):
        nbtrace.compare(reference, port)
    assert seen and seen[0] > 0
    assert gc.get_freeze_count() == 0 and gc.isenabled() and torch.equal(torch.random.get_rng_state(), rng)
