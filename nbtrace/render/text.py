"""A trace as a readable text tree for the terminal (``nbtrace demo``, ``nbtrace show``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.node import Node
from ..core.trace import Trace
from .call_words import difference_column
from .shards import cell, is_ranked, one_rank_hint, reassembly_line
from .verdict import divergence_words, format_difference, verdict_words
from .vocabulary import STATUS_MARKS, describe_tensor, format_units, gap_label

if TYPE_CHECKING:  # pragma: no cover
    from ..diff.comparison import Comparison
    from ..diff.verdict.divergence import FirstDivergence

__all__ = ["comparison_summary", "describe_divergence", "format_comparison_table", "format_difference", "format_tree"]


def node_summary(node: Node) -> str:
    """What a node shows after its name: output shape, dtype, stats, and any flags."""
    outputs = node.output_tensors()
    parts = [describe_tensor(outputs[0])] if outputs else []
    if len(outputs) > 1:
        parts.append(f"(+{len(outputs) - 1} more outputs)")
    if node.nonfinite:
        parts.append("!! NaN/inf")
    if node.error is not None:
        parts.append(f"!! {node.error.get('type', 'error')}: {node.error.get('message', '')}")
    return "  ".join(parts)


def format_tree(trace: Trace, max_depth: int | None = None, contains: str | None = None) -> str:
    """The call tree as indented text, one call per line.

    ``max_depth`` limits how deep it goes (the root is depth 0); ``contains``
    keeps calls whose path contains the text, and their ancestors.
    """
    keep: set[int] | None = None
    if contains:
        keep = set()
        for node in trace.nodes():
            if contains in node.module_path:
                walker: Node | None = node
                while walker is not None and id(walker) not in keep:
                    keep.add(id(walker))
                    walker = walker.parent
    lines: list[str] = []
    _render(trace.root, "", True, True, max_depth, keep, lines)
    return "\n".join(lines)


def _render(
    node: Node, prefix: str, last: bool, is_root: bool, max_depth: int | None, keep: set[int] | None, lines: list[str]
) -> None:
    summary = node_summary(node)
    if is_root:
        lines.append(f"{node.module_path}  {summary}".rstrip())
        child_prefix = ""
    else:
        lines.append(f"{prefix}{'└─ ' if last else '├─ '}{node.label}  {summary}".rstrip())
        child_prefix = prefix + ("   " if last else "│  ")
    if max_depth is not None and node.depth >= max_depth:
        if node.children:
            lines.append(f"{child_prefix}└─ … {len(node.children)} calls below")
        return
    gaps = {gap.position: gap for gap in node.pruned_layers()}
    items: list[Node | str] = []
    for position, child in enumerate(node.children):
        if position in gaps and keep is None:
            gap = gaps[position]
            items.append(f"… {gap_label(gap.prefix, gap.first, gap.last)}")
        if keep is None or id(child) in keep:
            items.append(child)
    for i, item in enumerate(items):
        is_last = i == len(items) - 1
        if isinstance(item, str):
            lines.append(f"{child_prefix}{'└─ ' if is_last else '├─ '}{item}")
        else:
            _render(item, child_prefix, is_last, False, max_depth, keep, lines)


def format_comparison_table(comparison: Comparison, rows: int = 30, width: int | None = None) -> str:
    """A compact table of a's calls for ``nbtrace diff``: status, a's call, b's call, basis, difference.

    The difference is the call's own and inherited difference where the verdict measured them
    (``Match.difference``), else the largest relative difference on its own tensors (the column
    of every tree view: ``call_words.difference_column``). At most ``rows`` rows, starting a few
    calls before the first divergence. A call with children whose "inherited" difference one of its
    own calls made shows no own/inherited split ("-"): that call's row shows where it was made. ``width``: no line is longer (names are shortened
    first, then lines cut with "…").
    """
    report = comparison.node_report()
    nodes = comparison.a.nodes()
    column = difference_column(comparison)
    units = column is not None and column.kind == "units"
    start = 0
    first = comparison.first_divergence
    if first is not None:
        start = max(0, first.node.index - 5)
    shown = list(range(start, min(len(nodes), start + max(rows, 1))))
    ranked = is_ranked(comparison)
    header = ["", "a (reference)", "b", "basis", column.header if column else "score"]
    header += ["inherited (u)"] if units else []
    table = [header + ["reassembled" if ranked else ""]]
    blank = [""] * len(header)
    for i in shown:
        node, row = nodes[i], report[i]
        gap = node.gap_before()
        if gap is not None:
            table.append(["", "  " * node.depth + f"… {gap_label(gap.prefix, gap.first, gap.last)}", *blank[2:], ""])
        match = comparison.match_of(node)
        basis = layouts = ""
        if match is not None:
            basis = ",".join(sorted({d.basis for d in match.diffs if d.basis}))
            if ranked:
                # tensors whose ranks differ first: a line cut to the terminal's width keeps the rank it names
                wrong_first = sorted(match.diffs, key=lambda d: not getattr(d, "wrong_ranks", None))
                layouts = "; ".join(f"{d.arg} {cell(d)}" for d in wrong_first if cell(d))
        name = "  " * node.depth + node.label
        if node.call_index:
            name += f" #{node.call_index + 1}"
        b_name = row["b_path"] or ""
        if b_name and "." in b_name:
            b_name = b_name.split(".", 1)[1]
        mark = STATUS_MARKS.get(row["status"], row["status"])
        found = column.cells[i] if column is not None else None
        split = not (units and match is not None and _made_inside(comparison, node, match))
        difference = [found.text if found and split else "-"]
        if units:
            difference.append(format_units(match.difference.inherited) if found and match and split else "-")
        table.append([mark, name, b_name, basis, *difference, layouts])
    count = len(table[0])
    widths = [max(len(r[k]) for r in table) for k in range(count)]
    widths[1] = min(widths[1], 60)
    widths[2] = min(widths[2], 50)
    if width is not None:  # shorten the two names (to 12 at least) before anything is cut
        excess = sum(widths) + 2 * (count - 1) - width
        for k in (2, 1):
            cut = max(0, min(excess, widths[k] - 12))
            widths[k] -= cut
            excess -= cut
    lines = []
    for r in table:
        cells = [r[0].ljust(widths[0]), _clip(r[1], widths[1]).ljust(widths[1]), _clip(r[2], widths[2]).ljust(widths[2])]
        cells += [r[k].ljust(widths[k]) for k in range(3, count - 1)] + [r[-1]]
        lines.append("  ".join(cells).rstrip())
    if start > 0:
        lines.insert(1, f"… {start} calls before")
    after = len(nodes) - (start + len(shown))
    if after > 0:
        lines.append(f"… {after} more calls (--rows N shows more)")
    if comparison.unmatched_b:
        names = ", ".join(n.module_path.split(".", 1)[-1] for n in comparison.unmatched_b[:5])
        more = "…" if len(comparison.unmatched_b) > 5 else ""
        lines.append(f"only in b ({len(comparison.unmatched_b)}): {names}{more}")
    return "\n".join(lines) if width is None else cut_lines("\n".join(lines), width)


def _made_inside(comparison: Comparison, node: Node, match: Any) -> bool:
    """True when a call with children "inherited" a difference that one of its own calls made (one of
    them adds at least half of it): the parent's split would show the child's difference as if handed in."""
    inherited = match.difference.inherited if match.difference is not None else None
    if not node.children or not inherited or comparison.first_divergence and comparison.first_divergence.node is node:
        return False
    stack = list(node.children)
    while stack:
        inner = stack.pop()
        stack.extend(inner.children)
        found = comparison.match_of(inner)
        own = found.difference.own if found is not None and found.difference is not None else None
        if own is not None and own >= inherited / 2:
            return True
    return False


def cut_lines(text: str, width: int) -> str:
    """Every line of ``text`` at most ``width`` characters, a longer one cut with "…" (table rows)."""
    return "\n".join(line if len(line) <= width else line[: width - 1] + "…" for line in text.splitlines())


def wrap_lines(text: str, width: int) -> str:
    """Every line of ``text`` wrapped to ``width`` characters, continuation lines indented two more (prose)."""
    import textwrap

    wrapped = []
    for line in text.splitlines():
        indent = " " * (len(line) - len(line.lstrip(" ")))
        wrapped.extend(textwrap.wrap(line, width, subsequent_indent=indent + "  ", break_on_hyphens=False,
                                     break_long_words=True) or [""])
    return "\n".join(wrapped)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]


def describe_divergence(div: FirstDivergence) -> str:
    """The first divergence in a few lines: where, why, the numbers and the evidence (``str(first)``)."""
    return "\n".join(divergence_words(div).lines)


def comparison_summary(comparison: Comparison, divergence: FirstDivergence | None = None) -> str:
    """A few lines for a terminal: the facts, the notes, then the verdict (``divergence`` instead of the
    comparison's own first divergence, if given) with its evidence (``verdict.py``: the words every view shows)."""
    a, b = comparison.a, comparison.b
    words = verdict_words(comparison, divergence)
    lines = [
        f"a: {a.model_name} ({len(a)} calls)  b: {b.model_name} ({len(b)} calls)",
        f"aligned {len(comparison.matches)} calls ({comparison.alignment.method}); {comparison.compared} tensor "
        f"pairs compared; unmatched: {len(comparison.unmatched_a)} in a, {len(comparison.unmatched_b)} in b",
    ]
    if words.weights:
        lines.append(f"weights that differ ({len(words.weights)}):")
        lines.extend(f"  {w}" for w in words.weights[:8])
        if len(words.weights) > 8:
            lines.append(f"  … {len(words.weights) - 8} more (Comparison.weights)")
    lines += [line for line in (reassembly_line(comparison), one_rank_hint(a, "a"), one_rank_hint(b, "b")) if line]
    lines.extend(f"note: {note}" for note in words.notes)
    lines.extend(words.lines)
    return "\n".join(lines)

