"""plot_stats: the numbers (stats_table) on their own, then the drawn objects; Agg backend, never plt.show()."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.collections import LineCollection, PolyCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import nbtrace  # noqa: E402
from nbtrace.demo import build_demo  # noqa: E402
from nbtrace.render.plot_data import plan_plot, pruned_ranges, stats_table, unrecorded_blocks  # noqa: E402


def _trace(folder, model, inputs, prune=False):
    with nbtrace.trace(model, debug_path=folder, do_prune_layers=prune) as rec:
        model(**inputs)
    return rec.trace


class Exploding(torch.nn.Module):
    """Each block adds a large-weight transform to the residual: the activations grow ~3x per layer."""

    def __init__(self, layers: int = 10, size: int = 16) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(size, size), torch.nn.GELU()) for _ in range(layers)
        )
        for block in self.layers:
            torch.nn.init.normal_(block[0].weight, std=1.0)

    def forward(self, x):
        for block in self.layers:
            x = x + block(x)
        return x


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    base = tmp_path_factory.mktemp("plots")
    model, inputs = build_demo(num_layers=6)
    full = _trace(base / "full", model, inputs)
    pruned = _trace(base / "pruned", model, inputs, prune=True)
    torch.manual_seed(0)
    boom = Exploding().eval()
    exploding = _trace(base / "boom", boom, {"x": torch.randn(2, 5, 16)})
    other, inputs2 = build_demo(num_layers=6, seed=1)
    second = _trace(base / "second", other, inputs2)
    return {"full": full, "pruned": pruned, "exploding": exploding, "second": second}


@pytest.fixture
def ax():
    figure = Figure()
    return figure.add_subplot()


# -- the numbers ----------------------------------------------------------------------
def test_stats_table_reads_each_block_output_where_it_was_recorded(traces):
    trace = traces["full"]
    table = stats_table(trace)
    assert table["x"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert table["series"].unique().tolist() == ["layers"]
    assert table["module_path"].tolist() == [f"DemoLM.layers.{i}" for i in range(6)]
    # a block's output is the next block's input (the last one's: the final norm's input)
    assert table["recorded_at"].tolist() == [f"DemoLM.layers.{i}" for i in range(1, 6)] + ["DemoLM.norm"]
    nxt = trace["DemoLM.layers.3"].input_tensors()[0]
    row = table[table.module_path == "DemoLM.layers.2"].iloc[0]
    assert (row["mean"], row["std"], row["min"], row["max"]) == (nxt.mean, nxt.std, nxt.min, nxt.max)
    assert row["absmax"] == max(abs(nxt.min), abs(nxt.max))
    assert table["mean"].dtype == "float64" and str(table["layer"].dtype) == "Int64"


def test_stats_table_of_a_pruned_trace_holds_block_outputs_only(traces):
    # Layer 0's output went into layer 1, which pruning removed: the trace does not hold it,
    # so the table has no point for layer 0 (no other tensor stands in for it).
    table = stats_table(traces["pruned"])
    assert table["x"].tolist() == [5.0]
    assert table["recorded_at"].tolist() == ["DemoLM.norm"]
    full = stats_table(traces["full"])
    assert table.iloc[0]["mean"] == full[full.module_path == "DemoLM.layers.5"].iloc[0]["mean"]
    assert pruned_ranges(traces["pruned"]) == [("layers", 1, 4)]
    assert unrecorded_blocks(traces["pruned"]) == [("layers", 0)]
    assert pruned_ranges(traces["full"]) == [] and unrecorded_blocks(traces["full"]) == []


def test_stats_table_for_a_module_pattern(traces):
    table = stats_table(traces["full"], where=r"mlp\.down_proj$")
    assert table["series"].unique().tolist() == ["layers.N.mlp.down_proj"]
    assert table["x"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    down = traces["full"]["DemoLM.layers.4.mlp.down_proj"].output_tensors()[0]
    assert table.iloc[4]["mean"] == down.mean
    inputs = stats_table(traces["full"], where=r"mlp\.down_proj$", io="input")
    assert inputs.iloc[4]["mean"] == traces["full"]["DemoLM.layers.4.mlp.down_proj"].input_tensors()[0].mean


def test_stats_table_without_layers_uses_call_order(traces, tmp_path):
    table = stats_table(traces["full"], where=r"embed_tokens|lm_head")
    assert table["series"].tolist() == ["embed_tokens", "lm_head"]
    assert table["layer"].isna().all()
    from tests.models.core_models import CalledTwice, seeded

    model = seeded(CalledTwice)
    with nbtrace.trace(model, debug_path=tmp_path) as rec:
        model(torch.randn(2, 4))
    twice = stats_table(rec.trace, where=r"\.act$")
    assert twice["x"].tolist() == [0.0, 1.0]
    assert twice["label"].tolist() == ["act", "act #2"]
    assert twice["call_index"].tolist() == [0, 1]
    ax = nbtrace.plot_stats(rec.trace, where=r"\.act$", ax=Figure().add_subplot())
    assert ax.get_xlabel() == "call (in call order)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["act", "act #2"]


def test_stats_table_rejects_bad_input(traces):
    with pytest.raises(ValueError, match="regular expression"):
        stats_table(traces["full"], where="(")
    with pytest.raises(ValueError, match="io"):
        stats_table(traces["full"], io="sideways")


# -- the drawing ----------------------------------------------------------------------
def test_mean_with_std_band(traces, ax):
    returned = nbtrace.plot_stats(traces["full"], ax=ax)
    assert returned is ax
    table = stats_table(traces["full"])
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert len(lines) == 1
    assert lines[0].get_label() == "DemoLM mean ± std"
    assert list(lines[0].get_xdata()) == table["x"].tolist()
    assert list(lines[0].get_ydata()) == pytest.approx(table["mean"].tolist())
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1
    top = bands[0].get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx((table["mean"] + table["std"]).max())
    assert "DemoLM" in ax.get_title() and "mean ± std" in ax.get_title()
    assert ax.get_xlabel() == "layer"
    assert ax.get_yscale() == "linear"  # means near zero must not trigger a log scale


def test_minmax_and_other_stats(traces, ax):
    nbtrace.plot_stats(traces["full"], ax=ax, minmax=True)
    labels = [line.get_label() for line in ax.get_lines()]
    assert "DemoLM min" in labels and "DemoLM max" in labels
    figure = Figure()
    other = nbtrace.plot_stats(traces["full"], ax=figure.add_subplot(), stat="std")
    assert [line.get_label() for line in other.get_lines()] == ["DemoLM std"]
    assert not [c for c in other.collections if isinstance(c, PolyCollection)]
    with pytest.raises(ValueError, match="stat must be"):
        nbtrace.plot_stats(traces["full"], ax=ax, stat="median")


def test_pruned_layers_are_shaded_not_drawn_as_data(traces, ax):
    nbtrace.plot_stats(traces["pruned"], ax=ax)
    texts = [t.get_text() for t in ax.texts]
    assert any("layers 1–4" in t and "pruned" in t for t in texts)
    assert any("layer 0" in t and "not" in t and "recorded" in t for t in texts)
    data = [line for line in ax.get_lines() if line.get_label() == "DemoLM mean ± std"]
    assert len(data) == 1 and list(data[0].get_xdata()) == [5.0]  # only what the trace holds


def _demo_as_nbtrace_demo_writes_it(folder):
    model, inputs = build_demo()  # `nbtrace demo`: 4 layers, pruned (layers 1-2 left out), printed values
    return _trace(folder, model, inputs, prune=True)


def _words(text) -> str:
    return " ".join(text.get_text().split())


def test_the_demo_pruned_plot_draws_block_outputs_only(tmp_path):
    """Layer 3's output (recorded as the final norm's input) is the one point; layers 0-2 hold no data."""
    trace = _demo_as_nbtrace_demo_writes_it(tmp_path)
    ax = nbtrace.plot_stats(trace, ax=Figure().add_subplot())
    data_lines = [line for line in ax.get_lines() if line.get_transform() == ax.transData]
    xs = {float(x) for line in data_lines for x in line.get_xdata()}
    xs |= {float(x) for c in ax.collections if isinstance(c, PolyCollection) for x in c.get_paths()[0].vertices[:, 0]}
    bars = [c for c in ax.collections if isinstance(c, LineCollection)]
    xs |= {float(x) for c in bars for segment in c.get_segments() for x in segment[:, 0]}
    assert xs == {3.0}  # points, band, error bar: nothing drawn where the trace holds no block output
    handed_on = trace["DemoLM.norm"].input_tensors()[0]
    point = next(line for line in data_lines if line.get_label() == "DemoLM mean ± std")
    assert list(point.get_ydata()) == [handed_on.mean]
    bar = next(c for c in ax.collections if isinstance(c, LineCollection)).get_segments()[0]
    assert sorted(bar[:, 1]) == pytest.approx([handed_on.mean - handed_on.std, handed_on.mean + handed_on.std])
    texts = [_words(t) for t in ax.texts]
    assert "layers 1–2 pruned" in texts and "layer 0: output not recorded" in texts
    assert "do_prune_layers=False" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["DemoLM mean ± std"]


def test_plan_of_a_pruned_demo_says_what_was_pruned_and_whose(tmp_path, traces):
    pruned = _demo_as_nbtrace_demo_writes_it(tmp_path)
    plan = plan_plot(pruned)
    assert [(line.x, line.y) for line in plan.lines] == [([3.0], [pruned["DemoLM.norm"].input_tensors()[0].mean])]
    assert plan.pruned == [("layers 1–2 pruned", 1, 2)] and plan.unrecorded == [("layer 0: output not recorded", 0)]
    assert plan.lines[0].runs == [(0, 1)] and plan.scale == "linear"
    overlay = plan_plot(traces["full"], compare=traces["pruned"])  # only b is pruned: the words say so
    assert overlay.pruned == [("layers 1–4 pruned in DemoLM (b)", 1, 4)]
    assert overlay.unrecorded == [("layer 0: output not recorded in DemoLM (b)", 0)]
    assert [line.dashed for line in overlay.lines] == [False, True]
    assert plan_plot(traces["full"]).pruned == [] and "pruned" not in plan_plot(traces["full"]).xlabel


def test_compare_overlays_a_second_trace_with_a_legend(traces, ax):
    nbtrace.plot_stats(traces["full"], ax=ax, compare=traces["second"], label="original", compare_label="port")
    legend = ax.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == [
        "original mean ± std", "port mean ± std", "largest relative difference of b (right axis)"]
    colours = {line.get_color() for line in ax.get_lines()}
    assert len(colours) == 2
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 2


def test_same_model_names_are_told_apart(traces, ax):
    nbtrace.plot_stats(traces["full"], ax=ax, compare=traces["second"])
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == ["DemoLM (a) mean ± std", "DemoLM (b) mean ± std"]


def test_exploding_activations_get_a_log_scale(traces, ax):
    nbtrace.plot_stats(traces["exploding"], ax=ax)
    assert ax.get_yscale() == "symlog"  # mean ± std crosses zero
    figure = Figure()
    std_ax = nbtrace.plot_stats(traces["exploding"], ax=figure.add_subplot(), stat="std")
    assert std_ax.get_yscale() == "log"
    table = stats_table(traces["exploding"])
    assert table["std"].iloc[-1] / table["std"].iloc[0] > 1e3
    forced = nbtrace.plot_stats(traces["exploding"], ax=Figure().add_subplot(), log=False)
    assert forced.get_yscale() == "linear"


def test_default_axes_is_the_current_one_and_nothing_is_shown(traces, monkeypatch):
    monkeypatch.setattr(plt, "show", lambda *a, **k: pytest.fail("plot_stats called plt.show()"))
    before = dict(matplotlib.rcParams)
    plt.figure()
    try:
        ax = nbtrace.plot_stats(traces["full"].source)  # a path works too
        assert ax is plt.gca()
    finally:
        plt.close("all")
    after = dict(matplotlib.rcParams)
    assert {k: v for k, v in after.items() if before.get(k) != v} == {}


def test_renders_to_png(traces, tmp_path):
    figure = Figure(figsize=(6, 4))
    nbtrace.plot_stats(traces["full"], ax=figure.add_subplot(), compare=traces["pruned"], minmax=True)
    figure.savefig(tmp_path / "overlay.png")
    assert (tmp_path / "overlay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_stats_says_so(tmp_path, ax):
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4))
    with nbtrace.trace(model, debug_path=tmp_path) as rec:
        model(torch.tensor([[1, 2]]))
    nbtrace.plot_stats(rec.trace, ax=ax)
    assert any("no statistics" in t.get_text() for t in ax.texts)
    assert not math.isnan(ax.get_xlim()[0])


def test_several_series_get_their_own_colours_and_a_readable_title(traces, ax):
    nbtrace.plot_stats(traces["full"], ax=ax, where=r"(q|k|v)_proj$", stat="std")
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert [line.get_label().split(": ")[1] for line in lines] == [
        "layers.N.self_attn.q_proj std", "layers.N.self_attn.k_proj std", "layers.N.self_attn.v_proj std"]
    assert len({line.get_color() for line in lines}) == 3
    assert ax.get_title() == "DemoLM: std of calls matching (q|k|v)_proj$ (outputs)"
    long = nbtrace.plot_stats(traces["full"], ax=Figure().add_subplot(), where=r"layers\.\d+\.self_attn\.(q|k|v)_proj$")
    assert long.get_title().startswith("DemoLM:\nmean ± std of calls matching")  # two lines, not clipped
