"""``nbtrace diff`` reads in a terminal: every line fits its width, no score is negative, and a parent
row does not show its child's difference as "inherited"."""

from __future__ import annotations

import pytest

from nbtrace.cli import main as cli_main
from nbtrace.render.vocabulary import format_score
from tests.models.ports import trace_original, trace_port


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    trace_original(root / "original", use_repr=False, prune=False, measure_rounding=True)
    # layer 2's attention scale; both measure their rounding, so the verdict can name the module from the files
    trace_port(root / "port", ["rounded_scale"], use_repr=False, prune=False, measure_rounding=True)
    return root / "original", root / "port"


def _diff(folders, capsys, monkeypatch, columns: str | None) -> list[str]:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)  # not a terminal under pytest: the fallback, 100
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert cli_main(["diff", str(folders[0]), str(folders[1])]) == 1
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("columns, width", [(None, 100), ("100", 100), ("72", 72)])
def test_every_line_fits_the_terminal(folders, capsys, monkeypatch, columns, width):
    lines = _diff(folders, capsys, monkeypatch, columns)
    widest = max(lines, key=len)
    assert len(widest) <= width, widest
    assert len(widest) >= width - 10  # the long sentences were wrapped at the width, not somewhere narrower
    assert any(line.startswith(">>>") and "self_attn" in line for line in lines)  # the table is still there


def test_the_parent_row_does_not_show_its_childs_difference_as_inherited(folders, capsys, monkeypatch):
    rows = {line.split()[1]: line.split() for line in _diff(folders, capsys, monkeypatch, None)
            if line[:4] in ("DIFF", ">>> ", "ok  ")}
    # the born call: its own difference (seen at its output, where rounding was measured), nothing handed in
    own = rows["self_attn"][-4:]
    assert own[1] == own[3] == "u" and float(own[0]) > 100 and own[2] == "0"
    # its inputs agree: nothing inherited, what its child made is part of its own (not "0 u  921 u")
    assert rows["layers.2"][-2:] == ["0", "u"] and rows["layers.2"][-4] != "0"
    after = rows["o_proj"][-4:]
    assert after[0] == "0" and float(after[2]) > 100  # a call after it: inherited, truly


def test_no_score_is_negative(folders, capsys, monkeypatch):
    assert format_score(-0.022) == "0×" and format_score(95.4) == "95.4×" and format_score(None) == "-"
    assert not [line for line in _diff(folders, capsys, monkeypatch, None) if "score -" in line]
