"""The rows a tree view shows: every call in call order, and a marker where layer pruning removed blocks."""

from __future__ import annotations

from ..core.node import Node
from ..core.trace import Trace

#: A marker row: ``(depth, prefix, first, last)`` for layers ``prefix.first`` … ``prefix.last`` pruned.
GapRow = tuple[int, str, int, int]


def rows_in_order(trace: Trace) -> list[Node | GapRow]:
    """Every call in call order, with a ``(depth, prefix, first, last)`` marker where layers were pruned."""
    order: list[Node | GapRow] = []
    stack: list[Node | GapRow] = [trace.root]
    while stack:
        item = stack.pop()
        order.append(item)
        if isinstance(item, tuple):
            continue
        gaps = {gap.position: gap for gap in item.pruned_layers()}
        pending: list[Node | GapRow] = []
        for position, child in enumerate(item.children):
            gap = gaps.get(position)
            if gap is not None:
                pending.append((item.depth + 1, gap.prefix, gap.first, gap.last))
            pending.append(child)
        stack.extend(reversed(pending))
    return order
