"""A plot says what it shows: a line labelled with a module draws that module's tensor (or says where it was
read), and a comparison's companion line draws only what the comparison measured."""

from __future__ import annotations

import matplotlib
import pytest
import torch

import nbtrace

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A 2-layer GPT-2 trace and each attention's own output (``attn(...)[0]``, taken by a torch hook)."""
    from tests.models.zoo_transformers import _gpt2

    torch.manual_seed(0)
    model, inputs = _gpt2()
    model.eval()
    args, kwargs = inputs()
    outputs: dict[int, torch.Tensor] = {}
    hooks = [
        # the first call: the recorded forward (the float64 twin's runs, on a copy that keeps the model's hooks,
        # come after it)
        block.attn.register_forward_hook(lambda m, a, out, i=i: outputs.setdefault(i, out[0].detach()))
        for i, block in enumerate(model.transformer.h)
    ]
    with nbtrace.trace(model, debug_path=tmp_path_factory.mktemp("gpt2"), do_prune_layers=False) as rec:
        with torch.no_grad():
            model(*args, **kwargs)
    for hook in hooks:
        hook.remove()
    return rec.trace, [outputs[i] for i in sorted(outputs)]


def test_a_line_labelled_attn_draws_the_attentions_own_output(gpt2):
    import matplotlib.pyplot as plt

    trace, outputs = gpt2
    fig, ax = plt.subplots()
    nbtrace.plot_stats(trace, ax=ax, where=r"\.attn$")
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [0.0, 1.0]
    assert line.get_ydata() == pytest.approx([float(o.mean()) for o in outputs], rel=1e-3)
    (band,) = ax.collections  # mean ± std: the band's top edge is mean + std
    top = band.get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx(max(float(o.mean() + o.std()) for o in outputs), rel=1e-2)
    # the residual stream (ln_2's input, what the plot showed before) is far from it: the test can fail
    residual = [trace[f"GPT2LMHeadModel.transformer.h.{i}.ln_2"].input_tensors()[0].std for i in range(2)]
    assert all(r > 3 * float(o.std()) for r, o in zip(residual, outputs))
    # and it says where the output was read: the format keeps no outputs for calls with children
    assert "read at its last call, resid_dropout" in ax.get_title()
    plt.close(fig)


def test_a_layer_block_is_still_read_at_the_next_blocks_input(gpt2):
    from nbtrace.render.plot_data import stats_table

    trace, _ = gpt2
    table = stats_table(trace, where=r"h\.\d+$")
    assert table["recorded_at"].tolist()[:1] == ["GPT2LMHeadModel.transformer.h.1"]


@pytest.fixture(scope="module")
def port_scale(tmp_path_factory):
    """transformers' Llama and a port whose layer 2 scales attention wrongly, full tensors, rounding measured."""
    from tests.models.ports import trace_original, trace_port

    root = tmp_path_factory.mktemp("ports")
    return (trace_original(root / "a", use_repr=False, prune=False, measure_rounding=True),
            trace_port(root / "b", ["rounded_scale"], use_repr=False, prune=False, measure_rounding=True))


def test_a_comparisons_companion_line_says_what_it_draws_and_covers_nothing(port_scale):
    import matplotlib.pyplot as plt

    a, b = port_scale
    fig, ax = plt.subplots()
    nbtrace.plot_stats(a, ax=ax, compare=b)
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "exactly 0 (drawn at the bottom)" in labels  # a hollow marker at the bottom is not a 0.4 % difference
    assert nbtrace.compare(a, b).method != "tolerance"
    texts = [t.get_text() for axes in fig.axes for t in axes.texts]
    assert not [t for t in texts if "tolerance" in t]  # the verdict used none: no tolerance line
    legend = ax.get_legend().get_window_extent()
    assert not legend.overlaps(ax.get_window_extent())  # outside the plotting area: it covers no data
    plt.close(fig)


def test_plot_divergence_draws_own_only_where_it_is_more_than_inherited(port_scale):
    import matplotlib.pyplot as plt
    import numpy as np

    from nbtrace.render.divergence_data import divergence_table, plan_divergence

    c = nbtrace.compare(*port_scale)
    table = divergence_table(c)
    plan = plan_divergence(c)
    own = np.array(plan.series[0].y, dtype=float)
    passing_on = ((table["inherited"] > 0) & (table["own"] <= table["inherited"])).to_numpy()
    assert passing_on.sum() >= 5 and np.isnan(own[passing_on]).all()  # downstream calls: no zig-zag of "own"
    born = table.index[table["born"]][0]
    assert own[born] == pytest.approx(table["own"][born])  # the born call's own difference is drawn
    assert all(np.isfinite(y) for _, y, _, _ in plan.points)  # every call keeps its status marker

    fig, ax = plt.subplots(figsize=(10, 4))
    nbtrace.plot_divergence(c, ax=ax)
    fig.canvas.draw()
    (label,) = [t for t in ax.texts if t.get_text().startswith("first divergence")]
    box = label.get_window_extent()
    drawn = np.vstack([ax.transData.transform(line.get_xydata()) for line in ax.get_lines() if len(line.get_xdata())
                       and line.get_linestyle() != "None" and len(line.get_xydata()) > 2])
    inside = (drawn[:, 0] >= box.x0) & (drawn[:, 0] <= box.x1) & (drawn[:, 1] >= box.y0) & (drawn[:, 1] <= box.y1)
    assert not inside.any()  # the label sits above the data, not across the inherited line
    plt.close(fig)
