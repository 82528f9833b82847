"""Every view of one comparison shows the same verdict and the same evidence: the text summary, ``nbtrace diff``,
the static HTML, the table, the widget's payload and detail pane — on the porter's comparison of issue 9
(transformers' Llama against a port whose layer 2 scales attention scores by 0.35 instead of 1/sqrt(8), fp32,
full tensors), judged noise-aware (own vs inherited, the tests' evidence) and by a per-element tolerance.
"""

from __future__ import annotations

import html
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.models.contract import porter_comparison, with_suspects
from tests.models.ports import BUGS

from nbtrace.notebook.view import TraceView
from nbtrace.render.verdict import verdict_words

ROOT = Path(__file__).resolve().parents[1]


def text_of(markup: str) -> str:
    """The HTML as a reader sees it: tags dropped, entities decoded, whitespace collapsed."""
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", markup)))


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.fixture(scope="module")
def porter(tmp_path_factory):
    folder = tmp_path_factory.mktemp("porter")
    return folder, porter_comparison(folder)


@pytest.fixture(scope="module")
def tolerance(porter):
    """The same traces judged by a per-element tolerance: no own vs inherited difference."""
    folder, _ = porter
    return porter_comparison(folder / "tolerance", rtol=1e-5)


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """The porter's comparison with calls close to a flag, as the verdict lists them where it has any."""
    folder = tmp_path_factory.mktemp("filled")
    return with_suspects(porter_comparison(folder), [("LlamaForCausalLM.model.layers.1.self_attn", 0.4)])


def test_the_porter_is_found_where_the_bug_is(porter, tolerance):
    _, c = porter
    assert c.method == "twin" and tolerance.method == "tolerance"
    for found in (c, tolerance):
        assert found.verdict == "diverge" and found.first_divergence.module_path == BUGS["rounded_scale"]


def _every_view(c, cli_stdout: str | None = None) -> dict[str, str]:
    view = TraceView(c)
    payload = view.rows
    first_row = payload["first_divergence"]
    detail = view.detail(first_row)["comparison"]
    banner = payload["compare"]["verdict"]
    frame = c.to_dataframe()
    views = {
        "summary": flat(c.summary()),
        "html": text_of(c._repr_html_()),
        "widget fallback": text_of(view._repr_mimebundle_()[0]["text/html"]),
        "widget banner": flat(" ".join([banner["headline"], *[e["line"] for e in banner["divergence"]["evidence"]]])),
        "widget detail": flat(" ".join([detail["divergence"]["reason"], *detail["divergence"]["evidence"]])),
        "table": flat(" ".join([frame.attrs["headline"], *frame["evidence"].dropna()])),
    }
    if cli_stdout is not None:
        views["nbtrace diff"] = flat(cli_stdout)
    return views


def _same_everywhere(c, cli_stdout: str | None = None) -> list[str]:
    words = verdict_words(c)
    divergence = words.divergence
    evidence = [e.line for e in divergence.evidence]
    views = _every_view(c, cli_stdout)
    for name, shown in views.items():
        assert divergence.headline.replace("first divergence: ", "") in shown or divergence.module_path in shown, name
        for line in evidence:
            assert flat(line) in shown or flat(line.split(" (score")[0]) in shown, (name, line)
    for name in ("summary", "html", "widget fallback", "widget detail", "nbtrace diff"):
        if name in views:
            assert flat(divergence.reason) in views[name], name
    return evidence


def test_every_view_shows_the_same_verdict_and_evidence(porter):
    folder, c = porter
    # the folders hold their float64 twins, so `nbtrace diff` of them reads them from the files and says what the
    # in-process comparison says
    cli = subprocess.run([sys.executable, "-m", "nbtrace", "diff", str(folder / "a"), str(folder / "b")],
                         capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert cli.returncode == 1, cli.stdout + cli.stderr
    evidence = _same_everywhere(c, cli.stdout)
    assert evidence[0].startswith("twin: ") and "k = 2 allows" in evidence[0]
    assert c.decided_by == "float64 twins"


def test_a_tolerance_s_verdict_reads_the_same_everywhere(porter, tolerance):
    folder, _ = porter
    cli = subprocess.run([sys.executable, "-m", "nbtrace", "diff", "--rtol", "1e-5", str(folder / "tolerance" / "a"),
                          str(folder / "tolerance" / "b")],
                         capture_output=True, text=True, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert cli.returncode == 1, cli.stderr
    evidence = _same_everywhere(tolerance, cli.stdout)
    assert evidence == [e.line for e in verdict_words(tolerance).divergence.evidence]
    assert len(evidence) == 1 and "beyond the tolerance 1e-05 for float32" in evidence[0]


def test_the_whole_contract_reads_the_same_everywhere(filled):
    c = filled
    words = verdict_words(c)
    evidence = [e.line for e in words.divergence.evidence]
    assert {line.split(":")[0] for line in evidence} == {"twin"}  # the twins' rule, its numbers and k
    assert words.divergence.confidence == "certain"
    for name, shown in _every_view(c).items():
        for line in evidence:
            assert flat(line) in shown or flat(line.split(" (score")[0]) in shown, (name, line)
    assert "close to a flag: LlamaForCausalLM.model.layers.1.self_attn (0.400×)" in c.summary()
    assert "close to a flag: LlamaForCausalLM.model.layers.1.self_attn (0.400×)" in text_of(c._repr_html_())
    assert TraceView(c).rows["compare"]["verdict"]["suspects"] == ["LlamaForCausalLM.model.layers.1.self_attn (0.400×)"]


def _o_proj_rows(c) -> list:
    return [m for m in c.matches if m.a.module_path.endswith("self_attn.o_proj")]


def test_own_and_inherited_show_where_the_verdict_measured_them(filled):
    c = filled
    from nbtrace.render.text import format_comparison_table
    from nbtrace.render.vocabulary import format_units

    layer2 = next(m for m in _o_proj_rows(c) if ".layers.2." in m.a.module_path)
    own, inherited = format_units(layer2.difference.own), format_units(layer2.difference.inherited)
    table = format_comparison_table(c, rows=60)
    assert "own (u)" in table.splitlines()[0] and "inherited (u)" in table.splitlines()[0]
    line = next(line for line in table.splitlines() if "blocks.2.attn.out.linear" in line)
    assert own in line and inherited in line
    markup = c._repr_html_()
    assert "own (u)" in markup and own in markup
    view = TraceView(c)
    cells = {view._row_nodes[row].module_path: text for row, text, *_ in view.rows["compare"]["difference"]["cells"]}
    assert view.rows["compare"]["difference"]["kind"] == "units" and cells[layer2.a.module_path] == own
    detail = view.detail(view._row_of_node[id(layer2.a)])["comparison"]
    assert detail["difference"]["own"] == own and detail["difference"]["inherited"] == inherited
    frame = c.to_dataframe()
    assert {"own", "inherited", "out", "unit", "call_score"} <= set(frame.columns)
    row = frame[(frame.module_path == layer2.a.module_path) & (frame.io == "output")].iloc[0]
    assert row["own"] == pytest.approx(layer2.difference.own) and row["inherited"] == pytest.approx(layer2.difference.inherited)


def test_without_own_and_inherited_no_column_pretends_to_have_them(tolerance):
    c = tolerance
    frame = c.to_dataframe()
    assert not {"own", "inherited", "out", "unit", "call_score"} & set(frame.columns)
    view = TraceView(c)
    assert view.rows["compare"]["difference"]["kind"] == "relative"
    assert "own (u)" not in c._repr_html_() and "own (u)" not in c.summary()
    detail = view.detail(view.rows["first_divergence"])["comparison"]
    assert detail["difference"] is None


def test_four_o_proj_rows_read_apart_in_every_tree(tolerance):
    """The issue's o_proj rows, ~1500× apart, looked alike: each tree now shows its own number."""
    c = tolerance
    from nbtrace.render.text import format_comparison_table
    from nbtrace.render.vocabulary import format_number

    scores = {m.a.module_path: format_number(m.score) for m in _o_proj_rows(c)}
    layer1, layer2 = (next(p for p in scores if f".layers.{k}." in p) for k in (1, 2))
    assert scores[layer1] != scores[layer2]
    view = TraceView(c)
    cells = {view._row_nodes[row].module_path: (text, level) for row, text, level, *_ in view.rows["compare"]["difference"]["cells"]}
    assert cells[layer2][0] == scores[layer2] and cells[layer1][0] == scores[layer1]
    assert cells[layer2][1] > cells[layer1][1] + 20  # the bar tells them apart too (log scale, 0–100)
    table = format_comparison_table(c, rows=60)
    assert scores[layer2] in table and scores[layer1] in table
    markup = c._repr_html_()
    assert scores[layer2] in markup and scores[layer1] in markup


def test_o_proj_rows_read_apart_by_what_they_inherit(porter):
    """Noise-aware, layer 2's o_proj adds nothing of its own (the bug is the attention's code before it): its row
    reads apart from layer 1's by the difference it was handed, in every tree."""
    _, c = porter
    from nbtrace.render.text import format_comparison_table
    from nbtrace.render.vocabulary import format_units

    rows = {m.a.module_path: m.difference for m in _o_proj_rows(c)}
    layer1, layer2 = (next(p for p in rows if f".layers.{k}." in p) for k in (1, 2))
    assert rows[layer2].inherited > 100 * max(rows[layer1].inherited, 1.0)
    view = TraceView(c)
    cells = {view._row_nodes[row].module_path: (level, inherited, tooltip)
             for row, _, level, inherited, tooltip in view.rows["compare"]["difference"]["cells"]}
    assert cells[layer2][1] > cells[layer1][1] + 20  # the inherited bar tells them apart
    assert f"inherited {format_units(rows[layer2].inherited)}" in cells[layer2][2]
    table = format_comparison_table(c, rows=60)
    line = next(line for line in table.splitlines() if "blocks.2.attn.out.linear" in line)
    assert format_units(rows[layer2].inherited) in line
    assert format_units(rows[layer2].inherited) in c._repr_html_()


def test_the_table_puts_the_difference_first(porter, tolerance):
    for c, test in ((porter[1], "twin: "), (tolerance, "tolerance: ")):
        first = c.first_divergence
        frame = c.to_dataframe(order="difference")
        top = frame.iloc[0]
        assert (top.module_path, top.io, top.arg) == (first.observed_path, first.io, first.arg)
        assert top.evidence.startswith(test)
        differing = frame.ok.fillna(True).astype(bool)
        assert not differing.iloc[: int((~differing).sum())].any()  # every differing row before any other
        assert len(frame) == len(c.to_dataframe())
    with pytest.raises(ValueError, match="order must be one of calls, difference"):
        c.to_dataframe(order="size")
