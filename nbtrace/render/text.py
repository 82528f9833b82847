"""A trace as a readable text tree for the terminal (``nbtrace demo``, ``nbtrace show``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.node import Node
from ..core.trace import Trace
from .shards import cell, divergence_line, is_ranked, one_rank_hint, reassembly_line
from .vocabulary import STATUS_MARKS, describe_tensor, format_number, gap_label

if TYPE_CHECKING:  # pragma: no cover
    from ..diff.comparison import Comparison
    from ..diff.divergence import FirstDivergence
    from ..diff.metrics import TensorDiff


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


def format_comparison_table(comparison: Comparison, rows: int = 30) -> str:
    """A compact table of a's calls for ``nbtrace diff``: status, a's call, b's call, basis, score.

    At most ``rows`` rows, starting a few calls before the first divergence.
    """
    report = comparison.node_report()
    nodes = comparison.a.nodes()
    start = 0
    first = comparison.first_divergence
    if first is not None:
        start = max(0, first.node.index - 5)
    shown = list(range(start, min(len(nodes), start + max(rows, 1))))
    ranked = is_ranked(comparison)
    table = [("", "a (reference)", "b", "basis", "score", "reassembled" if ranked else "")]
    for i in shown:
        node, row = nodes[i], report[i]
        gap = node.gap_before()
        if gap is not None:
            table.append(("", "  " * node.depth + f"… {gap_label(gap.prefix, gap.first, gap.last)}", "", "", "", ""))
        match = comparison.match_of(node)
        basis = layouts = ""
        if match is not None:
            bases = sorted({d.basis for d in match.diffs if d.basis})
            basis = ",".join(bases)
            if ranked:
                layouts = "; ".join(f"{d.arg} {cell(d)}" for d in match.diffs if cell(d))
        name = "  " * node.depth + node.label
        if node.call_index:
            name += f" #{node.call_index + 1}"
        b_name = row["b_path"] or ""
        if b_name and "." in b_name:
            b_name = b_name.split(".", 1)[1]
        mark = STATUS_MARKS.get(row["status"], row["status"])
        table.append((mark, name, b_name, basis, format_number(row["score"]), layouts))
    widths = [max(len(r[k]) for r in table) for k in range(6)]
    widths[1] = min(widths[1], 60)
    widths[2] = min(widths[2], 50)
    lines = []
    for r in table:
        cells = [
            r[0].ljust(widths[0]),
            _clip(r[1], widths[1]).ljust(widths[1]),
            _clip(r[2], widths[2]).ljust(widths[2]),
            r[3].ljust(widths[3]),
            r[4].ljust(widths[4]),
            r[5],
        ]
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
    return "\n".join(lines)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else "…" + text[-(width - 1):]


def format_difference(div: FirstDivergence | TensorDiff) -> str:
    """``[tensors] max_abs=… max_rel=… cosine=…`` or the stat differences, with the basis."""
    parts = []
    for name in ("max_abs", "max_rel", "cosine"):
        value = getattr(div, name)
        if value is not None:
            parts.append(f"{name}={value:.6f}" if name == "cosine" else f"{name}={format_number(value)}")
    for name, value in div.stat_diffs.items():
        parts.append(f"Δ{name}={format_number(value)}")
    basis = div.basis or "no data"
    return f"[{basis}] " + " ".join(parts)


def describe_divergence(div: FirstDivergence) -> str:
    """The first divergence in a few lines: where, why, and the numbers."""
    b = f" (b: {div.b_path})" if div.b_path and div.b_path != div.module_path else ""
    head = f"first divergence: {div.module_path}{b}{'' if div.exact else ' (approximate)'}"
    text = head + "\n  " + div.reason + "\n  " + format_difference(div)
    ranks = divergence_line(div)
    if ranks:
        text += "\n  " + ranks
    if div.earlier:
        shown = "; ".join(f"{path} {io}s {arg} ({format_number(excess)})" for path, io, arg, excess in div.earlier)
        text += f"\n  note: smaller differences, within tolerance but beyond rounding, show earlier: {shown}"
    return text


def comparison_summary(comparison: Comparison, divergence: FirstDivergence | None = None) -> str:
    """A few lines for a terminal: the verdict, the first divergence (``divergence`` instead, if given), what is
    unmatched."""
    a, b = comparison.a, comparison.b
    lines = [
        f"a: {a.model_name} ({len(a)} calls)  b: {b.model_name} ({len(b)} calls)",
        f"aligned {len(comparison.matches)} calls ({comparison.alignment.method}); {comparison.compared} tensor "
        f"pairs compared; unmatched: {len(comparison.unmatched_a)} in a, {len(comparison.unmatched_b)} in b",
    ]
    serious = [w for w in comparison.weights if w.serious]
    if serious:
        lines.append(f"weights that differ ({len(serious)}):")
        lines.extend(f"  {w}" for w in serious[:8])
        if len(serious) > 8:
            lines.append(f"  … {len(serious) - 8} more (Comparison.weights)")
    lines += [line for line in (reassembly_line(comparison), one_rank_hint(a, "a"), one_rank_hint(b, "b")) if line]
    lines.extend(f"note: {note}" for note in comparison.notes)
    if comparison.first_divergence is not None:
        lines.append(describe_divergence(divergence or comparison.first_divergence))
    elif comparison.agree and getattr(comparison, "method", "tolerance") != "tolerance":
        lines.append(f"agree: no call adds a difference beyond {_resolution(comparison)} rounding")
    elif comparison.agree:
        lines.append("agree: every compared tensor is within tolerance")
    elif comparison.compared == 0:
        lines.append("unresolved: nothing could be compared (no aligned tensors with data on both sides)")
    else:
        lines.append(f"unresolved: only {comparison.coverage:.0%} of a's calls were aligned; no verdict")
    return "\n".join(lines)


def _resolution(comparison: Comparison) -> str:
    """The dtype whose rounding bounds a noise-aware agreement (the coarsest compared)."""
    from ..diff.noise import dtype_name

    units = [m.difference.unit for m in comparison.matches if getattr(m, "difference", None) is not None]
    return dtype_name(max(units)) if units and max(units) > 0 else "float"
