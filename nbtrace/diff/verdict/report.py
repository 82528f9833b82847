"""The status of every call of the reference in a comparison (what the tree views colour)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison

#: A call's status in a comparison; render/vocabulary.py gives each its words and colour. "unresolved": the call
#: where the verdict stopped undecided (``Comparison.unresolved``), and the calls that hold it.
STATUSES = ("match", "diverged", "first", "only_a", "no_data", "unresolved")


def node_report(comparison: Comparison) -> list[dict[str, Any]]:
    """One dict per call of ``a``: ``module_path``, ``status``, ``b_path``, ``score``."""
    nodes = comparison.a.nodes()
    rows: list[dict[str, Any]] = []
    for node in nodes:
        match = comparison.match_of(node)
        if match is None:
            nothing = id(node) in comparison._pruned_a or id(node) in comparison._idle_a  # pruned, or an Identity
            status = "no_data" if nothing else "only_a"
            rows.append({"module_path": node.module_path, "status": status, "b_path": None, "score": None})
            continue
        verdict = match.verdict()
        status = "diverged" if verdict is False else "match" if verdict else "no_data"
        rows.append(
            {"module_path": node.module_path, "status": status, "b_path": match.b.module_path, "score": match.score}
        )
    position = {id(node): i for i, node in enumerate(nodes)}
    for i in range(len(nodes) - 1, -1, -1):  # a call with a diverged call inside is diverged too
        node = nodes[i]
        if rows[i]["status"] == "diverged" and node.parent is not None:
            up = rows[position[id(node.parent)]]
            if up["status"] in ("match", "no_data"):
                up["status"] = "diverged"
    first = comparison.first_divergence
    if first is not None:
        rows[position[id(first.node)]]["status"] = "first"
    open_ = getattr(comparison, "unresolved", None)
    node = next((n for n in nodes if n.module_path == open_[0]), None) if open_ is not None and first is None else None
    if node is not None:  # the call where the verdict stopped, and every call holding it, look undecided
        for held in (node, *node.ancestors()):
            if rows[position[id(held)]]["status"] in ("match", "no_data", "diverged", "only_a") or held is node:
                rows[position[id(held)]]["status"] = "unresolved"
    return rows
