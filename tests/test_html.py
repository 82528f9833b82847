"""The static HTML of a trace (Trace._repr_html_ and tree_html): readable without a kernel or styles."""

from __future__ import annotations

import html
import re
import subprocess
import sys

import pytest
import torch
from tests.models.core_models import FailingLayer, seeded
from tests.models.widget_models import NanNet, demo_trace, record, synthetic_trace

import nbtrace
from nbtrace.render.html import trace_html, tree_html
from nbtrace.render.html_style import tint
from nbtrace.render.vocabulary import BADGE_COLOURS


def visible_text(markup: str) -> list[str]:
    """Each table row as the text a reader sees, cells joined by ' | '."""
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", markup, flags=re.S)
    cells = [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>", r, flags=re.S)] for r in rows]
    return [" | ".join(c for c in row if c) for row in cells]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_trace(tmp_path_factory.mktemp("demo"))


def test_repr_html_is_a_readable_tree(demo):
    markup = demo._repr_html_()
    assert "<script" not in markup
    assert "Trace of DemoLM" in markup and "31 module calls" in markup and "FULL" in markup
    text = visible_text(markup)
    assert text[1] == "DemoLM | 30 calls"
    assert "│  │  ├─ q_proj | 1×16×64 float32 | -0.005 | 0.570" in text
    assert "├─ … layers 1–2 pruned" in text
    assert text[-1].startswith("└─ lm_head | 1×16×256 float32")


def test_nan_and_error_are_called_out(tmp_path):
    nan = record(seeded(NanNet), -torch.ones(2, 6) * 5, folder=tmp_path / "nan")
    markup = trace_html(nan)
    assert "first NaN/inf: NanNet.encoder.log" in html.unescape(markup)
    assert any(row.startswith("│  └─ log") and "NaN/inf" in row for row in visible_text(markup))
    failed = record(seeded(FailingLayer), torch.ones(2, 4), folder=tmp_path / "err")
    text = html.unescape(trace_html(failed))
    assert "raised in FailingLayer" in text and "layer two exploded" in text


def test_names_are_escaped():
    tree = {"module_path": "M<script>", "children": [{"module_path": "M<script>.a&b", "outputs": None}]}
    markup = trace_html(nbtrace.Trace.from_tree(tree))
    assert "<script>" not in markup and "&lt;script&gt;" in markup


def test_big_traces_are_cut_and_say_so():
    big = synthetic_trace(layers=40)
    markup = trace_html(big)
    text = visible_text(markup)
    assert len(text) == 1 + 300 + 1
    assert text[-1].startswith(f"… {len(big) + 0 - 300:,} more rows not shown")
    shallow = visible_text(tree_html(big, max_depth=1))
    assert all("experts" not in row for row in shallow) and "deeper than depth 1" in shallow[-1]


def test_status_colours_for_comparisons(demo):
    status = ["match"] * len(demo)
    first = demo["DemoLM.layers.3.mlp.up_proj"].index
    status[first] = "first"
    status[first + 1] = "diverged"
    markup = tree_html(demo, status=status)
    row = [r for r in visible_text(markup) if "up_proj" in r][-1]
    assert "◀ first divergence" in row
    first_row = [tr for tr in markup.split("<tr") if "layers.3.mlp.up_proj\"" in tr][-1]
    assert f"background:{BADGE_COLOURS['first']}" in first_row  # the badge
    assert tint("first") in first_row and tint("diverged") in markup and tint("match") in markup
    with pytest.raises(ValueError, match="status has 2 entries but the trace has 31 calls"):
        tree_html(demo, status=["match", "match"])


def test_html_needs_no_notebook_packages(tmp_path):
    """`import nbtrace` and the rich display work with torch alone (no ipywidgets, anywidget, IPython)."""
    script = f"""
import sys
for name in ("anywidget", "ipywidgets", "IPython", "traitlets", "pandas", "matplotlib"):
    sys.modules[name] = None
import torch, nbtrace
from nbtrace.demo import build_demo
model, inputs = build_demo(num_layers=2)
with nbtrace.trace(model, debug_path={str(tmp_path)!r}) as rec:
    model(**inputs)
print("OK", "embed_tokens" in rec.trace._repr_html_())
try:
    nbtrace.TraceView
except ImportError as exc:
    print("IMPORT", exc.name)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "OK True" in done.stdout and "IMPORT anywidget" in done.stdout
