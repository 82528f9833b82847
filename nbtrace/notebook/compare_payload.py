"""A comparison's part of the TraceView payload and of a call's details: both sides, the verdict and the
evidence in words (``render/verdict.py``), the tree's difference column and each call's tensors beside b's
(``render/call_words.py``). The ES module shows these as they are: it computes and words nothing itself.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..core.node import Node
from ..render.call_words import call_words, difference_column
from ..render.operations_frame import operations_rows
from ..render.operations_words import OPERATION_HEADINGS, diff_summary
from ..render.shards import call_note
from ..render.verdict import verdict_words
from ..render.vocabulary import DIFFERENCE_MEANINGS, UNIT_MEANING
from .detail import tensor_detail


def comparison_payload(comparison: Any, row_nodes: list[Node | None], divergence: Any = None) -> dict[str, Any]:
    """The payload's ``compare`` entry: names and sources of both sides, the verdict in words (of
    ``divergence`` instead, for the step of a run where it diverges), and the difference column as
    ``[row, text, level, inherited level or -1, tooltip]`` for the rows that have one."""
    a, b = comparison.a, comparison.b
    column = difference_column(comparison)
    out: dict[str, Any] = {
        "a_model": a.model_name,
        "b_model": b.model_name,
        "b_calls": len(b),
        "b_kind": b.kind,
        "b_source": str(b.source) if b.source is not None else "",
        "verdict": verdict_words(comparison, divergence).to_dict(),
        "difference": None,
    }
    if column is not None and any(cell is not None for cell in column.cells):
        cells = []
        for row, node in enumerate(row_nodes):
            cell = column.cells[node.index] if node is not None else None
            if cell is not None:
                inherited = cell.inherited_level if cell.inherited_level is not None else -1
                cells.append([row, cell.text, cell.level, inherited, cell.tooltip])
        meaning = DIFFERENCE_MEANINGS["own" if column.kind == "units" else "relative"]
        out["difference"] = {
            "kind": column.kind,
            "header": column.header,
            "meaning": f"{meaning} ({UNIT_MEANING})" if column.kind == "units" else meaning,
            "cells": cells,
        }
    return out


def comparison_detail(comparison: Any, node: Node, entry: dict[str, Any], divergence: Any = None) -> dict[str, Any]:
    """What the detail pane shows about ``node`` in ``comparison``: its status and situation, b's
    counterpart, its difference (own vs inherited) and evidence, its tensors beside b's; for the first
    divergence (``divergence`` instead of the comparison's own, for a run's step), the verdict's reason,
    numbers and evidence and the tensors where it was seen."""
    words = call_words(comparison, node, entry)
    detail: dict[str, Any] = {
        "status": words.status,
        "status_word": words.status_word,
        "situation": words.situation,
        "b_path": words.b_path,
        "difference": None,
        "tensors": {f"{t.io} {t.arg}": asdict(t) for t in words.tensors},
    }
    if words.difference is not None:
        detail["difference"] = dict(asdict(words.difference), line=words.difference.line,
                                    evidence=[e.line for e in words.difference.evidence])
    match_of = getattr(comparison, "match_of", None)
    match = match_of(node) if callable(match_of) else None
    if match is not None:
        for key, b_tensor in _b_tensors(match).items():
            if key in detail["tensors"]:
                detail["tensors"][key]["b_detail"] = b_tensor
        note = call_note(match.diffs)  # how a tensor-parallel side's tensors were reassembled
        if note:
            detail["reassembled"] = note
    first = divergence if divergence is not None else getattr(comparison, "first_divergence", None)
    if words.status == "first" and first is not None and hasattr(first, "reason"):
        said = verdict_words(comparison, divergence).divergence
        if said is not None and said.module_path == node.module_path:
            detail["divergence"] = dict(asdict(said), evidence=[e.line for e in said.evidence])
            difference = detail["difference"]
            if difference is not None and difference["evidence"] == detail["divergence"]["evidence"]:
                difference["evidence"] = []  # the blamed call's evidence is the verdict's: shown once, with it
            detail["divergence"]["observed"] = _observed(comparison, first, node) if hasattr(first, "diffs") else None
            detail["divergence"]["operations"] = operations_payload(getattr(first, "operation", None))
    return detail


MAX_OPERATIONS = 200  # per side, of those the call's output depends on


def operations_payload(diff: Any) -> dict[str, Any] | None:
    """The narrowed call's operations for the detail pane: the summary line, the headings, and per side the
    operations its output depends on (status, source line); None when the call was not narrowed."""
    if diff is None:
        return None
    rows = [r for r in operations_rows(diff) if r["reaches_output"]]
    keep = [r for side in ("reference", "port") for r in [x for x in rows if x["side"] == side][:MAX_OPERATIONS]]
    return {
        "summary": diff_summary(diff),
        "headings": OPERATION_HEADINGS,
        "rows": [{key: row[key] for key in ("side", "index", "operation", "module", "file", "line", "code",
                                            "status", "status_words")} for row in keep],
        "left_out": len(rows) - len(keep),
    }


def _b_tensors(match: Any) -> dict[str, dict[str, Any]]:
    """b's tensor of each pair, as the pane shows a tensor (stats, printed values), by a's ``io arg``."""
    found: dict[str, dict[str, Any]] = {}
    places = {(io, arg): tensor for io, arg, tensor in match.b.tensors()}
    for d in match.diffs:
        tensor = places.get((d.io, d.b_arg))
        if tensor is not None:
            found[f"{d.io} {d.arg}"] = tensor_detail(d.io, d.b_arg, tensor)
    return found


def _observed(comparison: Any, first: Any, node: Node) -> dict[str, Any] | None:
    """The tensors where the first divergence was seen (another call than the one blamed), a's beside b's."""
    match = next((m for m in comparison.matches if m.diffs is first.diffs), None)
    if match is None or match.a is node:
        return None
    entry = {"status": "diverged", "b_path": match.b.module_path}
    return {"path": match.a.module_path, "b_path": match.b.module_path,
            "tensors": [asdict(t) for t in call_words(comparison, match.a, entry).tensors]}
