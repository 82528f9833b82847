"""A comparison says up front what limits it, and 'agree' is never said when little could be aligned."""

from __future__ import annotations

from torch import nn

import nbtrace
from nbtrace.demo import build_demo


def _trace(model, folder, inputs, **options):
    with nbtrace.trace(model, debug_path=folder, **options) as rec:
        model(**inputs)
    return rec.trace


def test_pruned_and_printed_traces_are_named_up_front(tmp_path):
    model, inputs = build_demo(num_layers=4)
    a = _trace(model, tmp_path / "a", inputs)
    b = _trace(model, tmp_path / "b", inputs)
    c = nbtrace.compare(a, b)
    assert c.verdict == "agree" and c.coverage == 1.0 and c.decided_by == "float64 twins"
    assert any("do_prune_layers=True" in note and "float64 twins hold every call" in note for note in c.notes)
    assert not any("use_repr=False" in note for note in c.notes)  # the twins decided: printing limits nothing
    assert "note: a and b were traced with do_prune_layers=True" in c.summary()
    printed = nbtrace.compare(_trace(model, tmp_path / "e", inputs, measure_rounding=False),
                              _trace(model, tmp_path / "f", inputs, measure_rounding=False))
    assert any("use_repr=False" in note for note in printed.notes)  # without the twins, printing limits it
    assert any("can only be blamed on its parent" in note for note in printed.notes)
    exact = nbtrace.compare(
        _trace(model, tmp_path / "c", inputs, use_repr=False, do_prune_layers=False),
        _trace(model, tmp_path / "d", inputs, use_repr=False, do_prune_layers=False),
    )
    assert exact.notes == [] and exact.verdict == "agree"


def test_little_alignment_never_agrees_and_narrows_as_far_as_the_aligned_calls_allow(tmp_path):
    """Two different models: the few calls that align decide only on plain evidence (the embedding's inputs agree,
    its float64 outputs and its weights differ), never "agree", and the notes say how little aligned."""
    model, inputs = build_demo(num_layers=2)
    a = _trace(model, tmp_path / "a", inputs, do_prune_layers=False)
    other = nn.Sequential(nn.Embedding(256, 64), nn.Linear(64, 7))
    b = _trace(other, tmp_path / "b", {"input": inputs["input_ids"]}, do_prune_layers=False)
    c = nbtrace.compare(a, b)
    assert c.coverage < 0.5 and not c.agree
    assert c.first_divergence.module_path == "DemoLM.embed_tokens"
    assert any("aligned" in note for note in c.notes)


def test_a_rename_that_aligns_less_than_none_is_flagged(tmp_path):
    model, inputs = build_demo(num_layers=2)
    a = _trace(model, tmp_path / "a", inputs, do_prune_layers=False)
    b = _trace(model, tmp_path / "b", inputs, do_prune_layers=False)
    c = nbtrace.compare(a, b, rename={r"layers": "blocks"})
    assert any("rename aligned" in note for note in c.notes)
