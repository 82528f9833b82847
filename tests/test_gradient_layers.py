"""Gradient norms across layers (render/gradient_layers.py), the numbers the TraceView's gradient plot draws: read
from real traces recorded with backward=True (tests/models/backward_models.py), checked against the gradients torch
itself computes, and the vanishing drop of a ``detach()`` that cuts one layer's residual found at that layer."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.notebook.view import TraceView
from nbtrace.render.gradient_layers import as_rows, layer_gradients
from tests.models.backward_models import BUG_LAYER, LAYERS, ROOT, build, train_step


def traced(folder, bug=None, seed=0, **kwargs):
    model = build(seed=seed, bug=bug, **kwargs.pop("switches", {}))
    kwargs.setdefault("measure_rounding", False)
    with nbtrace.trace(model, folder, backward=True, **kwargs) as rec:
        train_step(model, seed=seed, bug=bug)
    return rec.trace


def torch_norms(bug=None, seed=0):
    """‖gradient at each layer's output‖ and ‖at its input‖, from torch itself (tensor hooks, no nbtrace)."""
    model = build(seed=seed, bug=bug)
    arrived, sent = {}, {}

    def keep(i):
        def forward_hook(_module, args, out):
            args[0].register_hook(lambda g: sent.__setitem__(i, g.norm().item()))
            out.register_hook(lambda g: arrived.__setitem__(i, g.norm().item()))
        return forward_hook

    for i, layer in enumerate(model.layers):
        layer.register_forward_hook(keep(i))
    train_step(model, seed=seed, bug=bug)
    return arrived, sent


@pytest.mark.parametrize("seed", [0, 1])
def test_the_norms_are_torch_s_own(tmp_path, seed):
    layers = layer_gradients(traced(tmp_path, seed=seed, do_prune_layers=False))
    arrived, sent = torch_norms(seed=seed)
    assert [g.layer for g in layers] == list(range(LAYERS))
    for g in layers:
        assert g.arrived == pytest.approx(arrived[g.layer], rel=1e-3)
        # what a layer sends to its input is what the layer below received at its output (the only path between)
        assert g.sent == pytest.approx(sent[g.layer], rel=1e-3)
        assert g.parameters is not None and g.parameters > 0 and g.input_rms is not None


@pytest.mark.parametrize("seed", [0, 1])
def test_a_detached_residual_shows_the_vanishing_drop_at_its_layer(tmp_path, seed):
    good = {g.layer: g for g in layer_gradients(traced(tmp_path / "good", seed=seed, do_prune_layers=False))}
    bad = {g.layer: g for g in layer_gradients(traced(tmp_path / "bad", "detach_residual", seed=seed,
                                                      do_prune_layers=False))}
    # above the cut the backward is the same, bit for bit of the printed stats
    for layer in range(BUG_LAYER + 1, LAYERS):
        assert bad[layer].arrived == good[layer].arrived and bad[layer].sent == good[layer].sent
    # the gradient reaching the cut layer is the same; what it sends on is a fraction of what it got ...
    assert bad[BUG_LAYER].arrived == good[BUG_LAYER].arrived
    gains = {layer: g.gain for layer, g in bad.items()}
    assert gains[BUG_LAYER] < 0.5 * min(gains[k] for k in gains if k != BUG_LAYER)
    assert gains[BUG_LAYER] < 0.5 * good[BUG_LAYER].gain
    # ... and every layer below it gets that much less
    for layer in range(BUG_LAYER):
        assert bad[layer].arrived < 0.5 * good[layer].arrived


@pytest.mark.parametrize("seed", [0, 1])
def test_a_layer_pruned_from_the_files_keeps_its_norms(tmp_path, seed):
    """The default prunes the middle layer from the files; the backward file keeps its gradients' norms."""
    layers = layer_gradients(traced(tmp_path, "detach_residual", seed=seed))
    arrived, sent = torch_norms("detach_residual", seed=seed)
    assert [(g.layer, g.x, g.node is None) for g in layers] == [(0, 0, False), (1, 1, True), (2, 2, False)]
    hidden = layers[BUG_LAYER]
    assert hidden.arrived == pytest.approx(arrived[BUG_LAYER], rel=1e-5)
    assert hidden.sent == pytest.approx(sent[BUG_LAYER], rel=1e-5)
    assert hidden.gain < 0.5 * min(g.gain for g in layers if g is not hidden)  # the cut, seen in a pruned layer
    assert hidden.parameters > 0 and hidden.input_rms is None  # its forward is not in the files


def test_the_view_carries_the_plot_each_point_with_its_row(tmp_path):
    trace = traced(tmp_path)
    layers = layer_gradients(trace)
    view = TraceView(trace)
    plot = json.loads(view.gradients)
    kinds = {(s["panel"], s["kind"]): s for s in plot["series"]}
    assert set(kinds) == {("backward", "arrived"), ("backward", "sent"), ("backward", "parameters"),
                          ("forward", "input_rms")}
    assert [p[0] for p in kinds["backward", "sent"]["points"]] == [0, 1, 2]
    assert [p[0] for p in kinds["forward", "input_rms"]["points"]] == [0, 2]  # a pruned layer has no forward here
    for s in plot["series"]:
        for x, y, row, path, tip in s["points"]:
            assert y > 0 and math.isfinite(y) and path.split(".", 1)[1] in tip
            if x == BUG_LAYER:
                assert row == -1 and "pruned from the files" in tip
            else:
                assert view._row_nodes[row].module_path == path
    assert as_rows(layers)[1]["path"] == f"{ROOT}.layers.1"


def test_a_model_without_layers_plots_its_leaf_calls_with_parameters(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    with nbtrace.trace(model, tmp_path, backward=True, measure_rounding=False) as rec:
        model(torch.randn(3, 8)).square().mean().backward()
    layers = layer_gradients(rec.trace)
    assert [(g.node.module_path, g.x, g.layer) for g in layers] == [("Sequential.0", 0, None), ("Sequential.2", 1, None)]
    assert layers[1].parameters == pytest.approx(math.hypot(model[2].weight.grad.norm().item(),
                                                            model[2].bias.grad.norm().item()), rel=1e-3)


def test_no_backward_no_plot(tmp_path):
    model = build(seed=0)
    with nbtrace.trace(model, tmp_path, measure_rounding=False) as rec:
        model(torch.zeros(1, 4, dtype=torch.long))
    assert layer_gradients(rec.trace) == [] and TraceView(rec.trace).gradients == ""


def test_a_comparison_s_plot_marks_the_layer_its_backward_verdict_names(tmp_path):
    """Pruned from the files (the default), the detached layer is still marked where it is: its layer number."""
    reference = traced(tmp_path / "a", measure_rounding=True)
    port = traced(tmp_path / "b", "detach_residual", measure_rounding=True)
    view = TraceView(nbtrace.compare(reference, port))
    plot = json.loads(view.gradients)
    verdict = plot["verdict"]
    assert verdict["state"] == "diverge" and verdict["path"] == f"{ROOT}.layers.{BUG_LAYER}"
    assert verdict["x"] == BUG_LAYER
    assert view._row_nodes[verdict["row"]].module_path == ROOT  # its nearest call the tree shows
    assert {s["side"] for s in plot["series"]} == {"a", "b"}
    same = TraceView(nbtrace.compare(reference, reference))
    assert json.loads(same.gradients)["verdict"]["state"] == "agree"


class _Blow(torch.autograd.Function):
    """The identity, whose backward sends on an infinite gradient (an exploding gradient, at its extreme)."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        return x.clone()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        return grad * math.inf


class _Block(nn.Module):
    def __init__(self, blow: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.blow = blow

    def forward(self, x):
        y = x + self.lin(x)
        return _Blow.apply(y) if self.blow else y


class _Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Block(i == 1) for i in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.mark.parametrize("prune", [True, False])
def test_a_gradient_that_overflows_is_marked_where_it_does(tmp_path, prune):
    torch.manual_seed(0)
    model = _Stack()
    with nbtrace.trace(model, tmp_path, backward=True, measure_rounding=False, do_prune_layers=prune) as rec:
        model(torch.randn(2, 8, requires_grad=True)).pow(2).sum().backward()
    layers = layer_gradients(rec.trace)
    assert [(g.layer, g.nonfinite) for g in layers] == [(0, ("arrived", "sent")), (1, ("sent",)), (2, ())]
    assert layers[1].arrived is not None and layers[1].sent is None and (layers[1].node is None) == prune
    plot = json.loads(TraceView(rec.trace).gradients)
    marked = {(s["kind"], x) for s in plot["series"] for x, *_ in s["nonfinite"]}
    assert marked == {("arrived", 0), ("sent", 0), ("sent", 1)}


def test_an_encoder_and_a_decoder_are_two_stacks_with_a_hole_between(tmp_path):
    from tests.models import encdec

    model = encdec.build(0)
    with nbtrace.trace(model, tmp_path, backward=True, measure_rounding=False, do_prune_layers=False) as rec:
        model(*encdec.inputs(0)).float().pow(2).mean().backward()
    layers = layer_gradients(rec.trace)
    assert [(g.stack.split(".", 1)[1], g.layer, g.x) for g in layers] == [
        ("encoder.layers", 0, 0), ("encoder.layers", 1, 1), ("decoder.layers", 0, 3), ("decoder.layers", 1, 4)]
    stacks = json.loads(TraceView(rec.trace).gradients)["stacks"]
    assert stacks == [[0, 1, "encoder.layers"], [3, 4, "decoder.layers"]]
