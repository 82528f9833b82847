"""nbtrace.save_html: one self-contained file that carries exactly what TraceView shows, and nothing that loads.

The page itself is driven in a browser by tests/browser/test_html_file.py; here the file is read as text.
"""

from __future__ import annotations

import base64
import gzip
import json
import re
import subprocess
import sys

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.cli import main
from nbtrace.notebook import html_file
from nbtrace.notebook.shown import Shown
from tests.models.widget_models import FakeComparison, demo_trace, record

HOSTILE = "</script><img src=x onerror=alert(1)>"


def blocks(document: str) -> dict[str, str]:
    """The page's data blocks by id, as JSON text; a step's chunks of details inflated and joined as one list."""
    found: dict[str, str] = {}
    chunks: dict[str, list] = {}
    for kind, name, text in re.findall(r'<script type="application/(json|octet-stream)" id="([^"]+)">(.*?)</script>',
                                       document, flags=re.S):
        if kind == "json":
            found[name] = text
        else:
            chunks.setdefault(name.rsplit("-", 1)[0], []).extend(json.loads(gzip.decompress(base64.b64decode(text))))
    return dict(found, **{name: json.dumps(rows) for name, rows in chunks.items()})


class Hostile(nn.Module):
    """A module whose child is named like markup (``add_module`` takes any name without a dot)."""

    def __init__(self) -> None:
        super().__init__()
        self.add_module(HOSTILE, nn.Linear(4, 4))

    def forward(self, x, note=None):  # ``note``: a value the trace prints, as untrusted as a name
        return getattr(self, HOSTILE)(x)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_trace(tmp_path_factory.mktemp("demo"))


def test_the_file_holds_what_the_view_shows_and_loads_nothing(demo, tmp_path):
    written = nbtrace.save_html(demo, tmp_path / "demo.html", values=True)
    document = written.read_text(encoding="utf-8")
    shown = Shown(demo, None, None)
    data = blocks(document)
    payload = json.loads(data["nbt-payload-0"])
    assert payload == json.loads(json.dumps(dict(shown.rows, source=payload["source"])))
    # the sender's folders stay home: the source is named by its folder and file only
    assert payload["source"] == f"{demo.source.parent.name}/{demo.source.name}"
    assert str(demo.source.parent) not in document
    details = json.loads(data["nbt-details-0"])
    assert len(details) == len(shown.row_nodes) and details[3] == json.loads(json.dumps(shown.detail(3)))
    view = json.loads(data["nbt-view"])
    assert view["step"] == 0 and view["steps"] == "" and view["selected_row"] == -1
    # one inline script and one inline style, allowed by hash; nothing else may load
    policy = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', document).group(1)
    assert policy.startswith("default-src 'none'; script-src 'sha256-") and "unsafe" not in policy
    assert not re.search(r"\b(src|href)\s*=", document.split("<script type=\"module\">")[0])
    assert "<link" not in document and "@import" not in document and "url(" not in document
    assert document.count('<script type="module">') == 1


def test_details_come_in_chunks_of_rows(demo, tmp_path, monkeypatch):
    monkeypatch.setattr(html_file, "DETAIL_CHUNK", 10)
    document = nbtrace.save_html(demo, tmp_path / "demo.html").read_text(encoding="utf-8")
    row_nodes = Shown(demo, None, None).row_nodes
    rows = len(row_nodes)
    assert re.findall(r'id="nbt-details-0-(\d+)"', document) == [str(c) for c in range(-(-rows // 10))]
    details = json.loads(blocks(document)["nbt-details-0"])
    assert [d["path"] for d in details] == [node.module_path if node else "" for node in row_nodes]
    assert json.loads(blocks(document)["nbt-view"])["chunk"] == 10


def test_a_hostile_module_name_cannot_end_its_script(tmp_path):
    trace = record(Hostile(), torch.ones(1, 4), note=HOSTILE, folder=tmp_path / "hostile")
    document = nbtrace.save_html(trace, tmp_path / "hostile.html").read_text(encoding="utf-8")
    assert HOSTILE not in document and "<img" not in document
    payload = json.loads(blocks(document)["nbt-payload-0"])
    assert HOSTILE in payload["strings"]  # still there, as data
    # every <script> the page opens is one it closes itself
    assert len(re.findall("<script type=", document)) == document.count("</script") == 4


def test_printed_values_are_left_out_unless_asked_for(demo, tmp_path):
    assert demo.kind == "full"
    plain = blocks(nbtrace.save_html(demo, tmp_path / "plain.html").read_text(encoding="utf-8"))
    full = blocks(nbtrace.save_html(demo, tmp_path / "full.html", values=True).read_text(encoding="utf-8"))
    assert '"lines"' not in plain["nbt-details-0"] and '"lines"' not in plain["nbt-payload-0"]
    lines = [x for d in json.loads(full["nbt-details-0"]) for x in d.get("tensors", []) if "lines" in x]
    assert lines and all(x["lines"] for x in lines)


def test_a_view_is_saved_as_it_is(demo, tmp_path):
    view = nbtrace.TraceView(demo)
    view.filter = "mlp"
    view.selected = "DemoLM.layers.0.mlp"
    saved = json.loads(blocks(view.save_html(tmp_path / "view.html").read_text(encoding="utf-8"))["nbt-view"])
    assert saved["filter"] == "mlp" and saved["selected"] == "DemoLM.layers.0.mlp"
    assert saved["selected_row"] == view.selected_row >= 0


def test_every_step_is_saved_and_a_view_opens_at_its_own(demo, tmp_path):
    view = nbtrace.TraceView([demo, demo])
    view.step = 1
    view.selected = "DemoLM.norm"
    data = blocks(view.save_html(tmp_path / "steps.html").read_text(encoding="utf-8"))
    saved = json.loads(data["nbt-view"])
    assert saved["step"] == 1 and json.loads(saved["steps"])["n"] == 2 and saved["selected"] == "DemoLM.norm"
    assert {"nbt-payload-0", "nbt-payload-1", "nbt-details-0", "nbt-details-1"} <= set(data)
    assert view.step == 1 and view.selected == "DemoLM.norm" and view.trace is demo  # the view is left as it was
    with pytest.raises(ValueError, match="saved at the step it shows"):
        nbtrace.save_html(view, tmp_path / "again.html", step=0)


def test_a_comparison_carries_its_verdict_and_opens_on_its_first_divergence(demo, tmp_path):
    comparison = FakeComparison(demo, demo, "DemoLM.layers.3.self_attn.o_proj")
    data = blocks(nbtrace.save_html(comparison, tmp_path / "c.html").read_text(encoding="utf-8"))
    payload, view = json.loads(data["nbt-payload-0"]), json.loads(data["nbt-view"])
    assert view["selected"] == "DemoLM.layers.3.self_attn.o_proj"
    assert view["selected_row"] == payload["first_divergence"] >= 0
    assert json.loads(data["nbt-details-0"])[view["selected_row"]]["comparison"]["status"] == "first"


def test_bad_paths_and_sources_are_refused_by_name(demo, tmp_path):
    with pytest.raises(ValueError, match=r"page\.txt.*\.html"):
        nbtrace.save_html(demo, tmp_path / "page.txt")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        nbtrace.save_html(demo, tmp_path / "nowhere" / "page.html")
    with pytest.raises(TypeError, match="save_html needs"):
        nbtrace.save_html(42, tmp_path / "page.html")
    with pytest.raises(ValueError, match="single forward"):
        nbtrace.save_html(demo, tmp_path / "page.html", step=2)
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_the_command_line_writes_a_trace_or_a_comparison(demo, tmp_path, capsys):
    folder = demo.source.parent
    assert main(["html", str(folder), "-o", str(tmp_path / "t.html")]) == 0
    assert main(["html", str(folder), str(folder), "-o", str(tmp_path / "c.html")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert "compare" in json.loads(blocks((tmp_path / "c.html").read_text(encoding="utf-8"))["nbt-payload-0"])
    assert main(["html", str(tmp_path / "missing"), "-o", str(tmp_path / "m.html")]) == 2
    assert main(["html", str(folder), "-o", str(tmp_path / "t.txt")]) == 2
    assert "nbtrace: error: " in capsys.readouterr().err


def test_saving_needs_no_widget_packages(demo, tmp_path):
    code = ("import sys; sys.modules['anywidget'] = sys.modules['ipywidgets'] = None\n"
            "import nbtrace; nbtrace.save_html(sys.argv[1], sys.argv[2])")
    subprocess.run([sys.executable, "-c", code, str(demo.source.parent), str(tmp_path / "t.html")], check=True)
    assert (tmp_path / "t.html").stat().st_size > 10_000
