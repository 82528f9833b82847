"""plot_divergence: the difference across calls and layers, where it is born marked (the plan as data, then the
drawn objects; Agg backend); and plot_stats(a, compare=b), whose companion line no longer hides a port's bug."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from tests.models.contract import porter_comparison  # noqa: E402
from tests.models.ports import BUGS  # noqa: E402

import nbtrace  # noqa: E402
from nbtrace.render.divergence_data import divergence_table, plan_divergence  # noqa: E402
from nbtrace.render.plot_data import plan_plot  # noqa: E402
from nbtrace.render.vocabulary import PALETTE  # noqa: E402


@pytest.fixture(scope="module")
def porter(tmp_path_factory):
    folder = tmp_path_factory.mktemp("porter")
    return folder, porter_comparison(folder)


@pytest.fixture(scope="module")
def tolerance(tmp_path_factory):
    """The porter judged by a per-element tolerance (``rtol`` given): relative differences, no own vs inherited."""
    return porter_comparison(tmp_path_factory.mktemp("tolerance"), rtol=1e-5)


@pytest.fixture
def ax():
    return Figure(figsize=(10, 4)).add_subplot()


def test_the_table_holds_each_compared_call_and_where_it_is_born(tolerance):
    c = tolerance
    table = divergence_table(c)
    assert list(table.x) == list(range(len(table)))
    born = table[table.born]
    assert born.module_path.tolist() == [BUGS["rounded_scale"]]
    o_proj = table[table.module_path.str.endswith("self_attn.o_proj")].set_index("layer")["score"]
    assert o_proj[2] > 100 * o_proj[1]  # the bug's o_proj stands out from the others
    assert table["own"].isna().all()  # the verdict measured no own difference: none is made up
    assert set(table.layer.dropna()) == {0, 1, 2}


def test_the_plan_marks_the_birth_with_the_evidence(tolerance):
    c = tolerance
    plan = plan_divergence(c)
    assert plan.kind == "relative" and [s.label for s in plan.series] == ["largest relative difference"]
    x, _, words = plan.born
    assert words == "first divergence: model.layers.2.self_attn (score 10.6×)"
    assert plan.tolerance == [(1e-05, "tolerance 1.00e-05")]
    assert [layer for layer, _, _ in plan.layers] == [0, 1, 2] and plan.ticks[0][1] == "layer 0"
    colours = {colour for _, _, colour, _ in plan.points}
    assert PALETTE["diverged"][0] in colours and PALETTE["match"][0] in colours
    assert any(zero for *_, zero in plan.points)  # exact zeros are told apart, not drawn as data


def test_the_drawing_follows_the_plan(tolerance, ax):
    c = tolerance
    returned = nbtrace.plot_divergence(c, ax=ax, linewidth=2.5)
    assert returned is ax and ax.get_yscale() == "log"
    main = ax.get_lines()[0]
    assert main.get_label() == "largest relative difference" and main.get_linewidth() == 2.5  # kwargs reach it
    notes = [t.get_text() for t in ax.texts]
    assert notes == ["first divergence: model.layers.2.self_attn (score 10.6×)"]
    born_x = plan_divergence(c).born[0]
    assert any(list(line.get_xdata()) == [born_x, born_x] for line in ax.get_lines())  # the vertical mark
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "tolerance 1.00e-05" in labels and "0 (drawn at the bottom)" in labels
    assert "LlamaForCausalLM vs TinyLlamaPort" in ax.get_title()


def test_own_and_inherited_are_drawn_where_measured(porter, ax):
    _, c = porter
    table = divergence_table(c)
    assert table[table.born].module_path.tolist() == [BUGS["rounded_scale"]]
    assert table["own"].notna().any()
    plan = plan_divergence(c)
    own_label = "own (u), where more than inherited"  # below it, own is cancellation noise (issue 20)
    assert plan.kind == "units" and [s.label for s in plan.series] == [own_label, "inherited (u)"]
    assert plan.tolerance == [] and "unit roundoff" in plan.ylabel
    nbtrace.plot_divergence(c, ax=ax)
    assert [line.get_label() for line in ax.get_lines()[:2]] == [own_label, "inherited (u)"]
    own = plan.series[0].y[plan.born[0]]
    assert own == pytest.approx(next(m for m in c.matches if m.a is c.first_divergence.node).difference.own)


def test_a_run_is_drawn_at_its_diverging_step(tmp_path, ax):
    from tests.models.generation import Bug, build_reference, make_port, make_prompt, trace_generate

    original, prompt = build_reference(), make_prompt()
    trace_generate(original, prompt, 3, tmp_path / "a")
    trace_generate(make_port(original, Bug.MASK), prompt, 3, tmp_path / "b")
    runs = nbtrace.compare(tmp_path / "a", tmp_path / "b")
    step = runs.first_divergence.step
    nbtrace.plot_divergence(runs, ax=ax)
    assert f"(step {step})" in ax.get_title()
    assert ax.texts and runs.first_divergence.module_path.split(".", 1)[1] in ax.texts[0].get_text()
    with pytest.raises(ValueError, match="has no steps"):
        plan_divergence(runs.comparison(0), step=2)


def test_plot_stats_with_compare_shows_the_difference_the_overlay_hides(porter, ax):
    folder, _ = porter
    a, b = folder / "a", folder / "b"
    plan = plan_plot(a, compare=b)
    line = plan.difference
    by_layer = dict(zip(line.x, line.y))
    # the verdict measured rounding, it used no tolerance: none is drawn; layer 2's output differs most
    assert line.tolerance is None and line.zero == [True, True, False] and by_layer[2] > by_layer[1]
    nbtrace.plot_stats(a, compare=b, ax=ax)
    twin = [other for other in ax.figure.axes if other is not ax]
    assert len(twin) == 1 and twin[0].get_yscale() == "log"
    assert list(twin[0].get_lines()[0].get_ydata()) == line.y
    assert "plot_divergence" in ax.get_xlabel()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "largest relative difference of b (right axis)" in labels


def test_plot_stats_without_compare_draws_no_companion(porter, ax):
    folder, _ = porter
    assert plan_plot(folder / "a").difference is None
    nbtrace.plot_stats(folder / "a", ax=ax)
    assert ax.figure.axes == [ax]


def test_the_public_name_is_lazy():
    from nbtrace.render.divergence_plot import plot_divergence

    assert nbtrace.plot_divergence is plot_divergence and "plot_divergence" in nbtrace.__all__
