"""A weight the fingerprints show changed is named at its own module, where nothing else decides.

Two folders of printed values or pruned layers without their float64 twins compare their tensors by a per-element
tolerance (``divergence.py``), which a correct kernel's rounding can exceed: such a finding leaves the comparison
"unresolved", and the call it points at may hold the changed weight only somewhere inside (an attention whose
``o_proj`` was converted wrongly). A weight that differs beyond what another dtype's rounding explains is evidence no
correct kernel produces, and it belongs to one module: the first call (in the reference's order) of a module whose
own weights differ is named there, never at an ancestor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.node import Node
from .divergence import FirstDivergence
from .weights import weight_evidence

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison


def first_weighted(comparison: Comparison) -> Node | None:
    """The first of a's aligned calls whose own module holds a weight the fingerprints show changed."""
    serious = {w.module_path for w in comparison.weights if w.serious}
    if not serious:
        return None
    return next((node for node in comparison.a.nodes() if node.module_path.split(" ", 1)[0] in serious
                 and comparison.match_of(node) is not None), None)


def weighted_divergence(comparison: Comparison, found: FirstDivergence, categorical: bool) -> FirstDivergence | None:
    """What a per-element tolerance's ``found`` names: the first call whose own weights differ, unless ``found`` is
    evidence no correct kernel produces (``categorical``: another shape, NaN/inf) and comes earlier; ``found`` itself
    where it is categorical or holds a changed weight of pruned blocks; None (unresolved) otherwise."""
    node = first_weighted(comparison)
    if node is None:
        return found if categorical or found.weights else None
    if categorical and _order(comparison, found.node) < _order(comparison, node) and not _holds(found.node, node):
        return found
    match = comparison.match_of(node)
    diffs = match.diffs if match is not None else []
    shown = [d for d in diffs if d.io == "output"] or diffs
    worst = max(shown, key=lambda d: d.score if d.score is not None else -1.0, default=None)
    path = node.module_path.split(" ", 1)[0]
    held = [w for w in comparison.weights if w.serious and w.module_path == path]
    result = FirstDivergence.blaming(
        comparison, node, observed_path=node.module_path, io=worst.io if worst else "output",
        arg=worst.arg if worst else "", b_arg=worst.b_arg if worst else "", basis=worst.basis if worst else None,
        max_abs=worst.max_abs if worst else None, max_rel=worst.max_rel if worst else None,
        cosine=worst.cosine if worst else None, stat_diffs=dict(worst.stat_diffs) if worst else {}, diffs=diffs,
        reason="its own weights differ: " + "; ".join(f"{w.name}: {w.detail}" for w in held))
    result.weights = held
    result.evidence = [weight_evidence(w) for w in held]
    result.confidence = "certain"
    return result


def _order(comparison: Comparison, node: Node) -> int:
    return next((i for i, n in enumerate(comparison.a.nodes()) if n is node), -1)


def _holds(outer: Node, inner: Node) -> bool:
    return any(n is outer for n in inner.ancestors())
