"""A trace as a readable text tree for the terminal (``nbtrace demo``, ``nbtrace show``)."""

from __future__ import annotations

import math

from .trace import Node, TensorValue, Trace


def format_number(value: float | None) -> str:
    """A compact number: ``1.23e-03``, ``0.512``, ``nan``; ``-`` when missing."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    size = abs(value)
    if 100 <= size < 1e4:
        return f"{value:.0f}"
    if 1 <= size < 100:
        return f"{value:#.3g}".rstrip(".")  # keeps trailing zeros: 1.00, 12.0
    if 1e-3 <= size < 1:
        return f"{value:.3f}"
    return f"{value:.2e}"


def describe_tensor(tensor: TensorValue) -> str:
    """``[1, 16, 64] float32 mean=0.012 std=1.01``"""
    text = f"{list(tensor.shape)} {tensor.dtype.replace('torch.', '')}"
    if tensor.mean is not None:
        text += f" mean={format_number(tensor.mean)} std={format_number(tensor.std)}"
    return text


def relative_name(node: Node) -> str:
    """The node's path without its parent's path: ``layers.0`` under ``DemoLM``."""
    if node.parent is None:
        return node.module_path
    parent = node.parent.module_path
    if node.module_path.startswith(parent + "."):
        return node.module_path[len(parent) + 1 :]
    root = node.module_path.split(".", 1)
    return root[1] if len(root) == 2 else node.module_path


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
        lines.append(f"{prefix}{'└─ ' if last else '├─ '}{relative_name(node)}  {summary}".rstrip())
        child_prefix = prefix + ("   " if last else "│  ")
    if max_depth is not None and node.depth >= max_depth:
        if node.children:
            lines.append(f"{child_prefix}└─ … {len(node.children)} calls below")
        return
    gaps = {position: (prefix_, first, last_) for position, prefix_, first, last_ in node.pruned_layers()}
    items: list[Node | str] = []
    for position, child in enumerate(node.children):
        if position in gaps and keep is None:
            layer_prefix, first, last_layer = gaps[position]
            name = layer_prefix.rsplit(".", 1)[-1]
            items.append(f"… {name} {first}–{last_layer} pruned")
        if keep is None or id(child) in keep:
            items.append(child)
    for i, item in enumerate(items):
        is_last = i == len(items) - 1
        if isinstance(item, str):
            lines.append(f"{child_prefix}{'└─ ' if is_last else '├─ '}{item}")
        else:
            _render(item, child_prefix, is_last, False, max_depth, keep, lines)


_MARKS = {"match": "ok", "diverged": "DIFF", "first": ">>>", "only_a": "only a", "no_data": "-"}


def format_comparison_table(comparison, rows: int = 30) -> str:
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
    table = [("", "a (reference)", "b", "basis", "score")]
    for i in shown:
        node, row = nodes[i], report[i]
        parent = node.parent
        if parent is not None:
            position = next(k for k, child in enumerate(parent.children) if child is node)
            for gap_at, layer_prefix, low, high in parent.pruned_layers():
                if gap_at == position:
                    span = f"{low}" if low == high else f"{low}–{high}"
                    name = layer_prefix.rsplit(".", 1)[-1]
                    table.append(("", "  " * node.depth + f"… {name} {span} pruned", "", "", ""))
        match = comparison.match_of(node)
        basis = ""
        if match is not None:
            bases = sorted({d.basis for d in match.diffs if d.basis})
            basis = ",".join(bases)
        name = "  " * node.depth + (relative_name(node) if node.parent is not None else node.module_path)
        if node.call_index:
            name += f" #{node.call_index + 1}"
        b_name = row["b_path"] or ""
        if b_name and "." in b_name:
            b_name = b_name.split(".", 1)[1]
        table.append((_MARKS.get(row["status"], row["status"]), name, b_name, basis, format_number(row["score"])))
    widths = [max(len(r[k]) for r in table) for k in range(5)]
    widths[1] = min(widths[1], 60)
    widths[2] = min(widths[2], 50)
    lines = []
    for r in table:
        cells = [
            r[0].ljust(widths[0]),
            _clip(r[1], widths[1]).ljust(widths[1]),
            _clip(r[2], widths[2]).ljust(widths[2]),
            r[3].ljust(widths[3]),
            r[4],
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
