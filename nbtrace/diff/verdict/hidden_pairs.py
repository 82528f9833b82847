"""Counterparts where pruning thinned the two houses' files differently: a's leaves paired with b's by their twins.

With ``do_prune_layers=True`` one house's stage list is thinned (transformers' ``stages.1``, ``stages.2`` gone from
its files) while the other's stages, named and not numbered, are held whole (timm's ``layer2``, ``layer3``), or
thinned by other numbers (timm's ``layer3.1…4`` against the port's whole ``stages.2``). The files cannot pair those
calls, but both float64 twins kept every call they ran, with the shapes of its tensors and the order the calls
ran in. Between two consecutive leaves the files do pair, a's leaves the files did not pair (set aside, or pruned
from a's own files) pair with b's: in order, on what they are (the element counts of their float inputs and of
what they hand on: one house holds a map as ``(B, H, W, C)``, another as ``(B, H·W, C)``; the sizes of their own
weights), never on values; a leaf left over then pairs with the one leftover of
b of exactly its kind, where it is the only one (a shortcut run before the main branch on one side, after it on
the other); one side's last leaf left pairs with the call that holds all the other side's leaves left there, where
they start and end alike (``nn.MultiheadAttention``, a leaf, against a port's attention and its projections).
Calls that hand on an input unchanged (an Identity) are left out on both sides. A call of a that holds leaves
paired so (a conv+norm+activation wrapper in a pruned block) pairs with the one call of b that holds their
counterparts and no other leaf's and starts and ends alike (``_holders``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...core.node import Node
from ...core.ranks import call_key
from ...core.twin import Twin
from ..align.twin_leaves import Kind, in_order as _in_order, sizes, twin_leaves as _leaves

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison

def hidden_counterparts(comparison: Comparison, twin_b: Twin) -> dict[str, str]:
    """a's twin call name -> b's, for a's leaves the alignment left without a counterpart where either side's files
    were pruned (see the module docstring): between two consecutive leaves the files pair, a's leaves that ran
    there (its twin's order) pair with b's that ran there."""
    known = getattr(comparison, "_hidden_pairs", None)  # the same for every walk of one comparison
    if known is not None and known[0] is twin_b:
        return known[1]
    found = _counterparts(comparison, twin_b)
    comparison._hidden_pairs = (twin_b, found)
    return found


def _counterparts(comparison: Comparison, twin_b: Twin) -> dict[str, str]:
    twin_a, alignment = comparison.a.twin, comparison.alignment
    if twin_a is None or not (twin_a.events or twin_b.events) or not alignment.pairs or not (
            twin_a.events or alignment.pruned_a or alignment.only_a):
        return {}  # nothing of a's left without a counterpart, nothing pruned from a's files
    leaves_a = _leaves(comparison.a, twin_a, comparison.a.sidecar.get("parameters"))
    leaves_b = _leaves(comparison.b, twin_b, comparison.b.sidecar.get("parameters"))
    where_b = {key: j for j, (key, _) in enumerate(leaves_b)}
    anchors = []
    for match in comparison.matches:
        if not match.a.children:
            j = where_b.get(call_key(match.b.module_path, match.b.call_index))
            if j is not None:
                anchors.append(j)
    paired_b = set(anchors)
    by_a = {call_key(m.a.module_path, m.a.call_index): where_b.get(call_key(m.b.module_path, m.b.call_index))
            for m in comparison.matches if not m.a.children}
    found: dict[str, str] = {}
    last_j, run = -1, []
    for key, kind in leaves_a + [("", None)]:
        j = by_a.get(key) if key else len(leaves_b)
        if j is None:
            if key not in by_a:  # a leaf of a the files did not pair
                run.append((key, kind))
            continue
        if run and j > last_j:
            theirs = [leaves_b[k] for k in range(last_j + 1, j) if k not in paired_b]
            found.update(_segment(run, theirs))
            found.update(_fused(run, theirs, found, (twin_a, twin_b)))
        run, last_j = [], max(last_j, j)
    found.update(_holders(comparison, found, leaves_a, [key for key, _ in leaves_b], by_a, (twin_a, twin_b)))
    return found


def _holders(comparison: Comparison, found: dict[str, str], leaves_a: list[tuple[str, Kind]], leaves_b: list[str],
             by_a: dict[str, int | None], twins: tuple[Twin, Twin]) -> dict[str, str]:
    """a's calls the files left unpaired that hold leaves (a pruned block, a conv+norm+activation wrapper in it)
    with the one call of b holding the counterparts of all of them and of no other leaf of a that starts from and
    hands on tensors of the same element counts (where two such nest, neither): jax-resnet's ``ConvBlock_0`` (a
    conv, a norm and its activation in its own code) and transformers' ``ResNetConvLayer`` (its activation a
    module), so a difference born in the code around the leaves is named at the call that runs it, not above."""
    partner = {key: found.get(key) or (leaves_b[j] if (j := by_a.get(key)) is not None else None)
               for key, _ in leaves_a}
    owner = {theirs: key for key, theirs in partner.items() if theirs}
    matched = ({call_key(m.a.module_path, m.a.call_index) for m in comparison.matches},
               {call_key(m.b.module_path, m.b.call_index) for m in comparison.matches})
    parents_a, parents_b = _tree_of(comparison.a, twins[0]), _tree_of(comparison.b, twins[1])
    under_a, under_b = _under(parents_a, [key for key, _ in leaves_a]), _under(parents_b, leaves_b)
    holders: dict[str, str] = {}
    for call, mine in under_a.items():
        if call in matched[0] or call in found or not all(partner.get(key) for key in mine):
            continue
        wanted, ends = {partner[key] for key in mine}, _sizes(twins[0].calls.get(call, {}))
        fits, walker = [], parents_b.get(partner[mine[0]])
        while walker is not None and ends != (None,):
            theirs = under_b.get(walker, [])
            if any(owner.get(leaf) not in (None, *mine) for leaf in theirs):
                break  # it holds another call's counterparts: so does every call above it
            if wanted <= set(theirs) and walker not in matched[1] and _sizes(twins[1].calls.get(walker, {})) == ends:
                fits.append(walker)
            walker = parents_b.get(walker)
        if len(fits) == 1:  # two that fit alike (a block and the Sequential inside it): neither is known to be it
            holders[call] = fits[0]
    return holders


def _tree_of(trace: Any, twin: Twin) -> dict[str, str]:
    """Each call's parent: by the twin's order where it kept one (a pruned trace), else the trace's tree."""
    if twin.events:
        return _parents(twin)
    return {call_key(n.module_path, n.call_index): call_key(n.parent.module_path, n.parent.call_index)
            for n in trace.nodes() if n.parent is not None}


def _under(parents: dict[str, str], leaves: list[str]) -> dict[str, list[str]]:
    """Each call that holds some of ``leaves``: those leaves, in order."""
    found: dict[str, list[str]] = {}
    for leaf in leaves:
        walker = parents.get(leaf)
        while walker is not None:
            found.setdefault(walker, []).append(leaf)
            walker = parents.get(walker)
    return found


def _sizes(prints: dict[str, Any]) -> tuple[Any, ...]:
    """The element counts of a call's first input and first output (one house holds ``[N, H, W, C]``, the other
    ``[N, C, H, W]``)."""
    ends = _ends(prints)
    return ends if ends == (None,) else tuple(math.prod(shape) for shape in ends)


def _segment(mine: list[tuple[str, Kind]], theirs: list[tuple[str, Kind]]) -> dict[str, str]:
    """One stretch between two paired leaves: in order, then each leftover with the one leftover of its kind."""
    if not mine or not theirs:
        return {}
    mine, theirs = [(key, sizes(k)) for key, k in mine], [(key, sizes(k)) for key, k in theirs]
    found = _in_order([k for _, k in mine], [k for _, k in theirs])
    left_a = [i for i in range(len(mine)) if i not in found]
    left_b = [j for j in range(len(theirs)) if j not in set(found.values())]
    for i in left_a:
        same = [j for j in left_b if theirs[j][1] == mine[i][1]]
        if len(same) == 1 and sum(1 for k in left_a if mine[k][1] == mine[i][1]) == 1:
            found[i] = same[0]
    return {mine[i][0]: theirs[j][0] for i, j in found.items()}


def _fused(mine: list[tuple[str, Kind]], theirs: list[tuple[str, Kind]], found: dict[str, str],
           twins: tuple[Twin, Twin]) -> dict[str, str]:
    """One stretch's last leftovers: one side's only leaf left, the other side's leaves left all the leaves of one
    call (``nn.MultiheadAttention``, one call, against a port's attention calling its four projections): that call
    and the leaf, where they start from and hand on tensors of the same shapes."""
    left = ([key for key, _ in mine if key not in found], [key for key, _ in theirs if key not in found.values()])
    for side in (0, 1):
        if len(left[side]) != 1 or not left[1 - side]:
            continue
        parents = _parents(twins[1 - side])
        holder = {parents.get(key) for key in left[1 - side]}
        taken = set(found) if side == 1 else set(found.values())
        if len(holder) != 1 or None in holder or any(parents.get(key) in holder for key in taken):
            continue
        whole = holder.pop()
        if _ends(twins[side].calls.get(left[side][0], {})) == _ends(twins[1 - side].calls.get(whole, {})) != (None,):
            return {left[0][0]: whole} if side == 0 else {whole: left[1][0]}
    return {}


def _parents(twin: Twin) -> dict[str, str]:
    """Each call's parent, by the order the twin saw calls start and end."""
    found: dict[str, str] = {}
    stack: list[str] = []
    for event in twin.events:
        if event[0] == "(":
            if stack:
                found[event[1:]] = stack[-1]
            stack.append(event[1:])
        elif stack:
            stack.pop()
    return found


def _ends(prints: dict[str, Any]) -> tuple[Any, ...]:
    """The shape of a call's first input and of its first output (None where its twin kept none)."""
    ins = [tuple(p.shape) for place, p in prints.items() if not place.startswith("out")]
    outs = [tuple(p.shape) for place, p in prints.items() if place.startswith("out")]
    return (ins[0], outs[0]) if ins and outs else (None,)
