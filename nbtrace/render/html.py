"""Static HTML of a trace: what ``Trace._repr_html_`` shows where no kernel runs.

nbconvert output, GitHub and VS Code render it as is, so it needs no script and
stays readable when styles are stripped: the tree is drawn with box characters
in a ``<pre>``-like column, and colours only add emphasis. Comparisons reuse
``tree_html(trace, status=...)`` to colour each call by its status.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

from ..core.dtypes import short_dtype
from ..core.node import Node
from ..core.trace import Trace
from .html_style import CELL as _CELL
from .html_style import MUTED as _MUTED
from .html_style import NUM as _NUM
from .html_style import RULE, badge, bar, muted, tint
from .tree_rows import rows_in_order
from .vocabulary import PALETTE, STATUS_MEANINGS, STATUS_WORDS, format_number, gap_label, short_shape

if TYPE_CHECKING:  # pragma: no cover
    from .call_words import DifferenceColumn

MAX_ROWS = 300


def _prefixes(order: list) -> list[str]:
    """The box-drawing prefix (``│  ├─ ``) of each row, from the rows' depths."""
    depths = [item[0] if isinstance(item, tuple) else item.depth for item in order]
    prefixes: list[str] = []
    # last[i]: is row i the last among its siblings? A sibling follows at the same depth before any shallower row.
    last = [True] * len(order)
    next_at: dict[int, int] = {}
    for row in range(len(order) - 1, -1, -1):
        d = depths[row]
        follower = next_at.get(d)
        last[row] = follower is None
        next_at[d] = row
        for deeper in [k for k in next_at if k > d]:
            del next_at[deeper]
    open_levels: list[bool] = []  # per depth: does the ancestor at that depth have later siblings?
    for row, d in enumerate(depths):
        if d == 0:
            prefixes.append("")
            open_levels = [False]
            continue
        del open_levels[d:]
        guides = "".join("│  " if open_levels[k] else "   " for k in range(1, d))
        prefixes.append(guides + ("└─ " if last[row] else "├─ "))
        open_levels.append(not last[row])
    return prefixes


def tree_html(
    trace: Trace,
    status: Sequence[str | None] | None = None,
    max_rows: int = MAX_ROWS,
    max_depth: int | None = None,
    difference: DifferenceColumn | None = None,
) -> str:
    """A static table of the call tree: name, ×N, output shape and dtype, mean, std, flags.

    ``status`` (one entry per node of ``trace.nodes()``: "match", "diverged", "first",
    "only_a", "no_data" or None) tints each call as a comparison does; ``difference`` (a
    comparison's ``call_words.difference_column``) adds its column. At most ``max_rows``
    rows (call order) and ``max_depth`` levels are shown; the rest is counted.
    """
    nodes = trace.nodes()
    if status is not None and len(status) != len(nodes):
        raise ValueError(f"status has {len(status)} entries but the trace has {len(nodes)} calls")
    totals = Counter(node.module_path for node in nodes)
    order = [
        item
        for item in rows_in_order(trace)
        if max_depth is None or (item[0] if isinstance(item, tuple) else item.depth) <= max_depth
    ]
    prefixes = _prefixes(order)
    columns = 6 if difference is not None else 5
    inside = [0] * len(nodes)  # calls in each node's subtree
    for node in reversed(nodes):
        if node.parent is not None:
            inside[node.parent.index] += inside[node.index] + 1
    shown = order[:max_rows]
    rows: list[str] = []
    for item, prefix in zip(shown, prefixes):
        if isinstance(item, tuple):
            _, layer_prefix, first, last = item
            text = escape(f"{prefix}… {gap_label(layer_prefix, first, last)}")
            rows.append(f'<tr><td style="{_CELL};{_MUTED};font-style:italic" colspan="{columns}">{text}</td></tr>')
            continue
        state = status[item.index] if status else None
        cell = difference.cells[item.index] if difference is not None else None
        rows.append(_node_row(item, prefix, totals[item.module_path], inside[item.index], state,
                              _difference_cell(cell, state) if difference is not None else None))
    hidden = len(order) - len(shown)
    deeper = len(nodes) - sum(1 for item in order if not isinstance(item, tuple))
    notes = []
    if hidden > 0:
        notes.append(f"… {hidden:,} more rows not shown")
    if deeper > 0:
        notes.append(f"{deeper:,} calls deeper than depth {max_depth} not shown")
    if notes:
        hint = "; ".join(notes) + " (nbtrace.TraceView shows them all)"
        rows.append(f'<tr><td style="{_CELL};{_MUTED}" colspan="{columns}">{escape(hint)}</td></tr>')
    names = [("module", _CELL), ("output", _CELL), ("mean", _NUM), ("std", _NUM)]
    names += [(difference.header, _CELL)] if difference is not None else []
    head = "".join(f'<th style="{style};{RULE}">{escape(name)}</th>' for name, style in [*names, ("", _CELL)])
    return (
        '<table class="nbtrace-tree" style="border-collapse:collapse;font-family:monospace;font-size:12px;'
        f'line-height:1.35"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _difference_cell(cell, state: str | None) -> str:
    if cell is None:
        return f'<td style="{_CELL}">{muted("-")}</td>'
    colour = state if state in PALETTE else "only_a"
    return (f'<td style="{_CELL}" title="{escape(cell.tooltip, quote=True)}">{escape(cell.text)} '
            f"{bar(cell.level, colour, cell.inherited_level)}</td>")


def _node_row(node: Node, prefix: str, calls: int, inside: int, state: str | None, difference: str | None) -> str:
    outputs = node.output_tensors()
    name = f"<b>{escape(node.label)}</b>" if node.parent is None else escape(node.label)
    if calls > 1:
        name += " " + muted(f"×{calls} (call {node.call_index + 1})")
    output = mean = std = ""
    if outputs:
        first = outputs[0]
        output = escape(f"{short_shape(first.shape)} {short_dtype(first.dtype)}")
        if len(outputs) > 1:
            output += escape(f" +{len(outputs) - 1}")
        mean, std = format_number(first.mean), format_number(first.std)
        if first.mean is None:
            mean = std = ""
    elif node.children:
        output = muted(f"{inside:,} calls")
    flags: list[str] = []
    if node.nonfinite:
        flags.append(badge("NaN/inf", "bad"))
    if node.error is not None:
        message = f"{node.error.get('type', 'error')}: {node.error.get('message', '')}"
        flags.append(badge("error", "bad") + f" {escape(message[:200])}")
    style = _CELL
    if state in STATUS_WORDS:
        words = STATUS_WORDS[state]
        style += ";" + tint(state)
        if state == "first":
            style += ";font-weight:bold"
            flags.insert(0, badge(f"◀ {words}", state, STATUS_MEANINGS[state]))
        elif state == "unresolved":
            flags.insert(0, badge(f"? {words}", state, STATUS_MEANINGS[state]))
        elif state != "match":
            flags.insert(0, muted(escape(words)) if state in ("only_a", "no_data") else escape(words))
    title = escape(node.module_path, quote=True)
    return (
        f'<tr title="{title}"><td style="{style}">{escape(prefix)}{name}</td>'
        f'<td style="{_CELL}">{output}</td><td style="{_NUM}">{mean}</td><td style="{_NUM}">{std}</td>'
        f'{difference or ""}<td style="{_CELL}">{" ".join(flags)}</td></tr>'
    )


def legend_html(with_difference: str | None = None) -> str:
    """What the tints of a comparison's tree mean (and its difference column), in one line."""
    parts = [f'<span style="{tint(name)};padding:0 6px">{escape(STATUS_WORDS[name])}</span> '
             f"{escape(STATUS_MEANINGS[name])}" for name in STATUS_WORDS]
    if with_difference:
        parts.append(escape(with_difference))
    return f'<div style="margin:2px 0;{_MUTED}">{" · ".join(parts)}</div>'


def trace_html(trace: Trace, max_rows: int = MAX_ROWS) -> str:
    """A header (model, number of calls, FULL/SUMMARY, file) and the static tree of ``trace``."""
    facts = [f"{len(trace):,} module calls", trace.kind.upper()]
    bad = trace.first_nonfinite()
    if bad is not None:
        facts.append(badge(f"first NaN/inf: {bad.module_path}", "bad"))
    errors = trace.errors()
    if errors:
        facts.append(badge(f"raised in {errors[-1].module_path}", "bad"))
    source = f'<div style="{_MUTED}">{escape(str(trace.source))}</div>' if trace.source else ""
    header = f"<div><b>Trace of {escape(trace.model_name)}</b> · {' · '.join(facts)}</div>{source}"
    return f'<div class="nbtrace-static" style="font-size:12px">{header}{tree_html(trace, max_rows=max_rows)}</div>'
