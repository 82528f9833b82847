"""A step-by-step comparison as static HTML (``StepsComparison._repr_html_``): no script, readable without styles."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from .compare_html import comparison_html
from .html_style import MUTED, RULE, TABLE, badge
from .steps_text import format_count, format_tokens, step_where, steps_summary
from .vocabulary import BADGE_COLOURS, STATUS_WORDS

if TYPE_CHECKING:  # pragma: no cover
    from ..diff.steps.steps import StepsComparison

_CELL = "padding:1px 8px 1px 0;text-align:left;white-space:pre;vertical-align:top"
MAX_STEPS = 200


def steps_html(comparison: StepsComparison, max_steps: int = MAX_STEPS) -> str:
    """The summary, a table of the steps (status colours of the vocabulary), and the first diverging step's tree."""
    summary = f'<pre style="margin:0 0 4px 0;white-space:pre-wrap">{escape(steps_summary(comparison))}</pre>'
    head = "".join(
        f'<th style="{_CELL};{RULE}">{name}</th>'
        for name in ("step", "input", "cache", "token a", "token b", "verdict", "first divergence in the step")
    )
    rows = []
    for step in comparison.steps[:max_steps]:
        word = STATUS_WORDS.get(step.status, step.status)
        verdict = badge(word, step.status) if step.status in BADGE_COLOURS else word
        where = step_where(step)
        cells = (
            str(step.step),
            format_count(step.input_length[0]),
            format_count(step.past_length[0]),
            format_tokens(step.tokens[0]),
            format_tokens(step.tokens[1]) + (" ≠" if step.tokens_differ else ""),
        )
        rows.append(
            "<tr>"
            + "".join(f'<td style="{_CELL}">{escape(cell)}</td>' for cell in cells)
            + f'<td style="{_CELL}">{verdict}</td>'
            + f'<td style="{_CELL}"><code>{escape(where)}</code></td></tr>'
        )
    more = len(comparison.steps) - max_steps
    note = f'<div style="{MUTED}">… {more} more steps (to_dataframe() has them all)</div>' if more > 0 else ""
    table = (
        f'<table style="{TABLE}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>{note}"
    )
    detail = ""
    first = comparison.first_divergence
    if first is not None:
        detail = (
            f"<div style=\"margin-top:6px\"><b>step {first.step}</b>:</div>"
            + comparison_html(comparison.comparison(first.step), max_rows=120)
        )
    return f'<div class="nbtrace-steps" style="font-size:12px">{summary}{table}{detail}</div>'
