"""A weight the fingerprints show changed is named at its own module, where nothing else decides.

Two folders of printed values or pruned layers without their float64 twins compare their tensors by a per-element
tolerance (``divergence.py``), which a correct kernel's rounding can exceed: such a finding leaves the comparison
"unresolved", and the call it points at may hold the changed weight only somewhere inside (an attention whose
``o_proj`` was converted wrongly). A weight that differs beyond what another dtype's rounding explains is evidence no
correct kernel produces, and it belongs to one module: the first module (in the model's order, as its fingerprints
are listed) whose own weights differ is named there, never at an ancestor. A module that pruning left out of the
files (a layer block in between) is named all the same, the tree marking the traced call that holds it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.dtypes import is_float
from ...core.node import Node
from ..measure.noise import DiffStats, unit_roundoff
from .divergence import FirstDivergence
from .findings import Finding
from .weights import WeightFinding, weight_evidence

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison
    from .files_verdict import FileVerdict


def first_weighted(comparison: Comparison) -> tuple[str, Node | None, list[WeightFinding]] | None:
    """The first module whose own weights the fingerprints show changed: its path, a's first aligned call of it
    (None where pruning left it out of the files) and its findings."""
    serious: dict[str, list[WeightFinding]] = {}
    for w in comparison.weights:
        if w.serious:
            serious.setdefault(w.module_path, []).append(w)
    if not serious:
        return None
    calls: dict[str, Node] = {}
    for node in comparison.a.nodes():
        path = node.module_path.split(" ", 1)[0]
        if path in serious and path not in calls and comparison.match_of(node) is not None:
            calls[path] = node
    order = list(comparison.a.sidecar.get("parameters", {}))
    path = min(serious, key=lambda p: order.index(p) if p in order else len(order))
    return path, calls.get(path), serious[path]


def weighted_divergence(comparison: Comparison, found: FirstDivergence, categorical: bool) -> FirstDivergence | None:
    """What a per-element tolerance's ``found`` names: the first module whose own weights differ, unless ``found`` is
    evidence no correct kernel produces (``categorical``: another shape, NaN/inf) and comes earlier (or the module is
    out of the files); ``found`` itself where it is categorical; None (unresolved) otherwise."""
    first = first_weighted(comparison)
    if first is None:
        return found if categorical or found.weights else None
    path, node, held = first
    if categorical and (node is None or _order(comparison, found.node) < _order(comparison, node)
                        and not _holds(found.node, node)):
        return found
    holder = node if node is not None else _holder(comparison, path)
    if holder is None:
        return found if categorical or found.weights else None
    match = comparison.match_of(holder) if node is not None else None
    diffs = match.diffs if match is not None else []
    shown = [d for d in diffs if d.io == "output"] or diffs
    worst = max(shown, key=lambda d: d.score if d.score is not None else -1.0, default=None)
    result = FirstDivergence.blaming(
        comparison, holder, observed_path=holder.module_path, io=worst.io if worst else "output",
        arg=worst.arg if worst else "", b_arg=worst.b_arg if worst else "", basis=worst.basis if worst else None,
        max_abs=worst.max_abs if worst else None, max_rel=worst.max_rel if worst else None,
        cosine=worst.cosine if worst else None, stat_diffs=dict(worst.stat_diffs) if worst else {}, diffs=diffs,
        reason="its own weights differ: " + "; ".join(f"{w.name}: {w.detail}" for w in held))
    if node is None:  # a module pruning left out of the files: named itself, the tree marks the call holding it
        result.module_path, result.b_path, result.call_index = path, held[0].b_path, 0
        result.reason += (f"; pruning left {path} out of the files: its fingerprints name it, and the tree marks "
                          f"{holder.module_path}, which holds it")
    result.weights = held
    result.evidence = [weight_evidence(w) for w in held]
    result.confidence = "certain"
    return result


def _holder(comparison: Comparison, path: str) -> Node | None:
    """The innermost aligned call of a whose module holds ``path``."""
    found = None
    for node in comparison.a.nodes():
        own = node.module_path.split(" ", 1)[0]
        if path.startswith(own + ".") and comparison.match_of(node) is not None:
            if found is None or len(own) > len(found.module_path.split(" ", 1)[0]):
                found = node
    return found


def _order(comparison: Comparison, node: Node) -> int:
    return next((i for i, n in enumerate(comparison.a.nodes()) if n is node), -1)


def _holds(outer: Node, inner: Node) -> bool:
    return any(n is outer for n in inner.ancestors())


def files_weighted(judge: FileVerdict) -> Finding | None:
    """For the verdict from full tensors: the first leaf (in a's call order) whose own weights the fingerprints show
    changed and whose outputs no comparison judged (a fused ``qkv`` against three projections has no counterpart, its
    output none), as a finding of the ``weights`` test; None where there is none. A leaf whose outputs were judged
    carries its weights' evidence in its own finding already."""
    judged = {id(f.node) for f in judge.findings}
    for producer in judge.flow_a.producers:
        node = producer.node
        if producer.kind != "leaf" or id(node) in judged or not producer.outputs:
            continue
        held = judge.weights.get(node.module_path.split(" ", 1)[0], [])
        if held:
            slot = producer.outputs[0]
            u = unit_roundoff(slot.tensor.dtype) if is_float(slot.tensor.dtype) else 0.0
            finding = Finding(node, judge.stats(slot) or DiffStats(n=0, rel=0.0, u=u), 0.0, producer=producer,
                              slot=slot)
            finding.evidence.extend(weight_evidence(w) for w in held)
            return finding
    return None
