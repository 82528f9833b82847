"""A saved notebook read where no kernel runs: ``TraceView(c)`` executed by nbclient, exported by nbconvert.

Without the widget state (``--ClearMetadataPreprocessor.enabled=True``) the page shows the comparison's
static HTML: both sides, the verdict, its reason and evidence, the tree. With the state (what ``--execute``
stores) nbconvert shows the widget, which needs a renderer from a CDN: offline its place is empty, as
docs/widget.md says.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter
from traitlets.config import Config

from nbtrace.render.verdict import verdict_words
from nbtrace.render.vocabulary import format_units

REPO = Path(__file__).resolve().parents[1]
CELLS = [
    f"import sys\nsys.path.insert(0, {str(REPO)!r})  # the kernel imports the test models of this checkout\n"
    "import nbtrace\nfrom pathlib import Path\nfrom tests.models.contract import porter_comparison\n"
    "c = porter_comparison(Path('porter'))\nprint(repr(c))",
    "nbtrace.TraceView(c)",
]


def visible_text(page: str) -> str:
    """What a browser without scripts shows: no script or style elements, tags dropped, entities decoded."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S | re.I)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", page)))


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("offline")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(folder)}}).execute()
    from tests.models.contract import porter_comparison

    return nb, porter_comparison(folder / "again")


def _numbers_masked(text: str) -> str:
    return re.sub(r"\d+(\.\d+)?(e[+-]?\d+)?", "#", text)


def export(nb, clear_state: bool) -> str:
    config = Config()
    config.ClearMetadataPreprocessor.enabled = clear_state
    body, _ = HTMLExporter(config=config).from_notebook_node(nb)
    return body


def test_without_widget_state_the_page_shows_the_verdict_and_its_evidence(executed):
    nb, again = executed
    assert "widgets" in nb.metadata  # nbclient stored the widget state, as `nbconvert --execute` does
    shown = visible_text(export(nb, clear_state=True))
    words = verdict_words(again).divergence
    assert "✗ diverge" in shown and "b: TinyLlamaPort" in shown
    assert words.headline.split(" (b:")[0] in shown
    # the same sentence; its measured numbers are the notebook kernel's own run (its threads may differ)
    assert _numbers_masked(words.reason) in _numbers_masked(shown)
    assert words.evidence[0].line.split(" differ by ")[0] in shown  # the porter's folders hold their twins:
    born = again.match_of(again.first_divergence.node).difference
    assert "own float64 precision, measured" in shown and format_units(born.own) in shown  # proof, the born call's own
    assert "own (u)" in shown and "o_proj" in shown  # the tree with its difference column


def test_with_widget_state_the_widget_needs_its_renderer(executed):
    nb, _ = executed
    page = export(nb, clear_state=False)
    assert 'type="application/vnd.jupyter.widget-view+json"' in page
    assert "✗ diverge" not in visible_text(page)  # offline, nothing draws the widget: the docs say how to export
