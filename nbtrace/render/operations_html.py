"""The operations of a narrowed call as static HTML: both sides' operations, the diverging one marked, each
with its source line (no script; the words of ``operations_words.py``)."""

from __future__ import annotations

from html import escape
from typing import Any

from .html_style import CELL, RULE, TABLE, badge, muted
from .operations_frame import operations_rows
from .operations_words import OPERATION_LABEL, diff_summary

MAX_ROWS = 200  # per side
_COLUMNS = ("side", "#", "operation", "module", "line", "code", "shape", "status")


def operations_html(diff: Any) -> str:
    """The summary line, then a table of the operations the call's output depends on ("" when not narrowed)."""
    if diff is None:
        return ""
    head = f"<div><b>{escape(diff_summary(diff))}</b></div>"
    rows = [r for r in operations_rows(diff) if r["reaches_output"]]
    shown: list[str] = []
    for side in ("reference", "port"):
        mine = [r for r in rows if r["side"] == side]
        for r in mine[:MAX_ROWS]:
            status = badge(r["status_words"], "first") if r["status"] == "differs" else muted(escape(r["status_words"]))
            cells = (side, str(r["index"]), r["operation"], r["module"] or "·", f"{r['file']}:{r['line']}", r["code"],
                     "×".join(map(str, r["shape"])))
            shown.append("<tr>" + "".join(f'<td style="{CELL}">{escape(c)}</td>' for c in cells)
                         + f'<td style="{CELL}">{status}</td></tr>')
        if len(mine) > MAX_ROWS:
            shown.append(f'<tr><td colspan="{len(_COLUMNS)}">… {len(mine) - MAX_ROWS} more ({side})</td></tr>')
    header = "".join(f'<th style="{CELL};{RULE}">{name}</th>' for name in _COLUMNS)
    table = (f'<details><summary>{OPERATION_LABEL}s ({len(rows)})</summary><table style="{TABLE}">'
             f"<thead><tr>{header}</tr></thead><tbody>{''.join(shown)}</tbody></table></details>")
    return f'<div class="nbtrace-operations">{head}{table}</div>'
