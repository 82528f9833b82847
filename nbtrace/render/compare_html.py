"""A Comparison as static HTML (``Comparison._repr_html_``): no script, readable without styles."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from .html import tree_html
from .shards import cell, divergence_line, one_rank_hint, reassembly_line
from .text import format_difference
from .vocabulary import BAD as _BAD
from .vocabulary import GOOD as _GOOD
from .vocabulary import MUTED as _MUTED
from .vocabulary import WARN as _WARN
from .vocabulary import format_number

if TYPE_CHECKING:  # pragma: no cover
    from ..diff.comparison import Comparison
    from ..diff.divergence import FirstDivergence

_CELL = "padding:1px 8px 1px 0;text-align:left;white-space:pre;vertical-align:top"


def comparison_html(comparison: Comparison, max_rows: int = 300) -> str:
    """Verdict, first divergence with its numbers, and a's call tree coloured by status."""
    a, b = comparison.a, comparison.b
    head = (
        f"<div><b>{escape(a.model_name)}</b> (a, {len(a):,} calls, {a.kind.upper()}) vs "
        f"<b>{escape(b.model_name)}</b> (b, {len(b):,} calls, {b.kind.upper()}) · "
        f"{len(comparison.matches):,} calls aligned by {escape(comparison.alignment.method)} · "
        f"{comparison.compared:,} tensor pairs compared · unmatched: "
        f"{len(comparison.unmatched_a):,} in a, {len(comparison.unmatched_b):,} in b</div>"
    )
    notes = (reassembly_line(comparison), one_rank_hint(a, "a"), one_rank_hint(b, "b"))
    head += "".join(f'<div style="color:{_MUTED}">{escape(note)}</div>' for note in notes if note)
    first = comparison.first_divergence
    if first is not None:
        verdict = _divergence_html(first)
    elif comparison.agree:
        verdict = (
            f'<div style="color:{_GOOD};font-weight:bold">✓ agree: every compared tensor is within tolerance</div>'
        )
    else:
        verdict = f'<div style="color:{_WARN};font-weight:bold">nothing could be compared</div>'
    statuses = [row["status"] for row in comparison.node_report()]
    return (
        f'<div class="nbtrace-comparison" style="font-size:12px">{head}{verdict}'
        f"{_tree(comparison, statuses, max_rows)}</div>"
    )


def _divergence_html(first: FirstDivergence) -> str:
    b_side = f" (b: <code>{escape(first.b_path)}</code>)" if first.b_path else " (no counterpart in b)"
    approx = "" if first.exact else " — approximate"
    lines = [
        f'<div style="color:{_BAD};font-weight:bold">✗ first divergence: <code>{escape(first.module_path)}</code>'
        f"{approx}</div>",
        f"<div>{b_side.strip()}</div>",
        f"<div>{escape(first.reason)}</div>",
        f"<div><code>{escape(format_difference(first))}</code></div>",
    ]
    ranks = divergence_line(first)
    if ranks:
        lines.append(f"<div><b>{escape(ranks)}</b></div>")
    if first.b_only_between:
        shown = ", ".join(first.b_only_between[:6]) + ("…" if len(first.b_only_between) > 6 else "")
        lines.append(f'<div style="color:{_MUTED}">b also runs, with no counterpart in a: {escape(shown)}</div>')
    if first.earlier:
        shown = "; ".join(f"{p} {io}s {arg} ({format_number(x)})" for p, io, arg, x in first.earlier)
        lines.append(f'<div style="color:{_MUTED}">smaller differences already show at: {escape(shown)}</div>')
    rows = "".join(
        f'<tr><td style="{_CELL}">{escape(d.io)}</td><td style="{_CELL}">{escape(d.arg)}</td>'
        f'<td style="{_CELL}">{escape(d.b_arg)}</td><td style="{_CELL}">{escape(str(list(d.shape)))}</td>'
        f'<td style="{_CELL}">{escape(d.basis or "-")}</td>'
        f'<td style="{_CELL}">{format_number(d.score)}</td>'
        f'<td style="{_CELL};color:{_GOOD if d.ok else _BAD if d.ok is False else _MUTED}">'
        f'{"ok" if d.ok else "differs" if d.ok is False else "-"}</td>'
        + (f'<td style="{_CELL}">{escape(cell(d))}</td>' if ranks else "")
        + "</tr>"
        for d in first.diffs
    )
    head = "".join(
        f'<th style="{_CELL};border-bottom:1px solid {_MUTED}">{name}</th>'
        for name in ("io", "a arg", "b arg", "shape", "basis", "score", "", *(("reassembled",) if ranks else ()))
    )
    table = (
        f'<div>tensors of <code>{escape(first.observed_path)}</code>:</div>'
        f'<table style="border-collapse:collapse;font-family:monospace"><thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table>"
    )
    box = f"margin:4px 0;padding:4px 6px;border:1px solid {_BAD};border-radius:3px"
    return f'<div style="{box}">{"".join(lines)}{table}</div>'


def _tree(comparison: Comparison, statuses: list[str], max_rows: int) -> str:
    return tree_html(comparison.a, status=statuses, max_rows=max_rows)
