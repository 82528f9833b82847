"""A Comparison as static HTML (``Comparison._repr_html_``, TraceView's offline fallback): no script,
readable without styles and in light and dark themes (``html_style.py``).

Every sentence comes from ``verdict.py`` and ``call_words.py``, the words the text summary and the
widget show too.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from .call_words import call_words, difference_column
from .html import legend_html, tree_html
from .html_style import CELL, MUTED, RULE, TABLE, badge, muted
from .operations_html import operations_html
from .shards import one_rank_hint, reassembly_line
from .verdict import VerdictWords, verdict_words
from .vocabulary import (
    DECIDED_BY_LABEL,
    END_TO_END_LABEL,
    DIFFERENCE_MEANINGS,
    NUMERICS_LABEL,
    STATUS_WORDS,
    SUSPECTS_WORDS,
    UNIT_MEANING,
    VERDICT_COLOURS,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..diff.comparison import Comparison


def comparison_html(comparison: Comparison, max_rows: int = 300, divergence: Any = None) -> str:
    """Both sides, the notes, the verdict with its evidence and tensors (a beside b), and a's call tree
    with each call's status and difference."""
    a, b = comparison.a, comparison.b
    words = verdict_words(comparison, divergence)
    head = (
        f"<div><b>a: {escape(a.model_name)}</b> ({len(a):,} calls, {a.kind.upper()}) vs "
        f"<b>b: {escape(b.model_name)}</b> ({len(b):,} calls, {b.kind.upper()}) · "
        f"{len(comparison.matches):,} calls aligned by {escape(comparison.alignment.method)} · "
        f"{comparison.compared:,} tensor pairs compared · unmatched: "
        f"{len(comparison.unmatched_a):,} in a, {len(comparison.unmatched_b):,} in b</div>"
    )
    facts = (reassembly_line(comparison), one_rank_hint(a, "a"), one_rank_hint(b, "b"))
    head += "".join(f'<div style="{MUTED}">{escape(line)}</div>' for line in facts if line)
    head += "".join(f"<div>{badge('note', 'diverged')} {escape(note)}</div>" for note in words.notes)
    if words.decided_by:
        head += f"<div>{DECIDED_BY_LABEL}: {escape(words.decided_by)}</div>"
    head += "".join(f"<div>{NUMERICS_LABEL}: <code>{escape(line)}</code></div>" for line in words.numerics)
    if words.weights:
        listed = "".join(f"<li><code>{escape(w)}</code></li>" for w in words.weights[:8])
        more = f"<li>… {len(words.weights) - 8} more (Comparison.weights)</li>" if len(words.weights) > 8 else ""
        head += f"<div>weights that differ ({len(words.weights)}):<ul style=\"margin:0\">{listed}{more}</ul></div>"
    column = difference_column(comparison)
    meaning = DIFFERENCE_MEANINGS["own" if column is not None and column.kind == "units" else "relative"]
    key = f"{column.header}: {meaning}" + (f" ({UNIT_MEANING})" if column and column.kind == "units" else "")
    tree = tree_html(comparison.a, status=[row["status"] for row in comparison.node_report()], max_rows=max_rows,
                     difference=column)
    return (
        f'<div class="nbtrace-comparison" style="font-size:12px">{head}{_verdict_html(comparison, words)}'
        f"{legend_html(key if column is not None else None)}{tree}</div>"
    )


def _verdict_html(comparison: Comparison, words: VerdictWords) -> str:
    end = f"<div>{END_TO_END_LABEL}: {escape(words.end_to_end)}</div>" if words.end_to_end else ""
    return _module_verdict_html(comparison, words).replace("</div>", "</div>" + end, 1)


def _module_verdict_html(comparison: Comparison, words: VerdictWords) -> str:
    title = badge(f"{words.mark} {words.word}", VERDICT_COLOURS.get(words.verdict, "diverged"))
    div = words.divergence
    if div is None:
        headline = words.headline.split(": ", 1)[-1]
        extra = "".join(f"<div>{SUSPECTS_WORDS}: {escape(s)}</div>" for s in words.suspects)
        return f'<div style="margin:4px 0">{title} {escape(headline)}{extra}</div>'
    where = f"{STATUS_WORDS['first']}: <code>{escape(div.module_path)}</code>"
    where += f" (b: <code>{escape(div.b_path)}</code>)" if div.b_path else " (no counterpart in b)"
    where += "" if div.exact else " — approximate"
    if div.step:
        where += f" · step {div.step}"
    lines = [f"<div>{title} {where}</div>", f"<div>{escape(div.reason)}</div>"]
    lines.append(operations_html(getattr(comparison.first_divergence, "operation", None)))
    if div.numbers:
        lines.append(f"<div>seen at <code>{escape(div.seen_at or '')}</code>: <code>{escape(div.numbers)}</code></div>")
    if div.evidence:
        confidence = f" ({escape(div.confidence)})" if div.confidence else ""
        items = "".join(f"<li><b>{escape(e.line)}</b></li>" for e in div.evidence)
        lines.append(f'<div>evidence{confidence}:<ul style="margin:0">{items}</ul></div>')
    if div.ranks:
        lines.append(f"<div><b>{escape(div.ranks)}</b></div>")
    if div.weights:
        lines.append("<div>weights of this module that differ: "
                     + "; ".join(f"<code>{escape(w)}</code>" for w in div.weights) + "</div>")
    lines.extend(f'<div style="{MUTED}">note: {escape(hint)}</div>' for hint in div.hints)
    lines.extend(f"<div>{SUSPECTS_WORDS}: {escape(s)}</div>" for s in words.suspects)
    lines.append(_observed_tensors(comparison))
    box = "margin:4px 0;padding:4px 6px;border:1px solid rgba(128,128,128,0.7);border-radius:3px"
    return f'<div style="{box}">{"".join(lines)}</div>'


def _observed_tensors(comparison: Comparison) -> str:
    """The tensors of the call where the difference was seen, a's and b's side by side."""
    first = comparison.first_divergence
    if first is None or not hasattr(first, "observed_path"):
        return ""
    match = next((m for m in comparison.matches if m.diffs is first.diffs), None)
    if match is None:
        return ""
    entry = {"status": "diverged", "b_path": match.b.module_path}
    tensors = call_words(comparison, match.a, entry).tensors
    ranked = any(t.reassembled for t in tensors)
    names = ("io", "a arg", "b arg", "shape", "basis", "a mean / std", "b mean / std", "difference", "tolerance", "",
             *(("reassembled",) if ranked else ()))
    head = "".join(f'<th style="{CELL};{RULE}">{name}</th>' for name in names)
    rows = []
    for t in tensors:
        verdict = badge(t.verdict, "first") if t.ok is False else muted(escape(t.verdict))
        cells = (t.io, t.arg, t.b_arg, f"{t.shape} {t.dtype}", t.basis, f"{t.a.get('mean', '')} / {t.a.get('std', '')}",
                 f"{t.b.get('mean', '')} / {t.b.get('std', '')}", t.numbers, t.tolerance)
        rows.append("<tr>" + "".join(f'<td style="{CELL}">{escape(c)}</td>' for c in cells)
                    + f'<td style="{CELL}">{verdict}</td>'
                    + (f'<td style="{CELL}">{escape(t.reassembled)}</td>' if ranked else "") + "</tr>")
    return (f"<div>tensors of <code>{escape(first.observed_path)}</code> (a beside b):</div>"
            f'<table style="{TABLE}"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")
