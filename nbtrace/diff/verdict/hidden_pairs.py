"""Counterparts where pruning thinned the two houses' files differently: a's leaves paired with b's by their twins.

With ``do_prune_layers=True`` one house's stage list is thinned (transformers' ``stages.1``, ``stages.2`` gone from
its files) while the other's stages, named and not numbered, are held whole (timm's ``layer2``, ``layer3``), or
thinned by other numbers (timm's ``layer3.1…4`` against the port's whole ``stages.2``). The files cannot pair those
calls, but both float64 twins kept every call they ran, with the shapes of its tensors and the order the calls
ran in. Between two consecutive leaves the files do pair, a's leaves the files did not pair (set aside, or pruned
from a's own files) pair with b's: in order, on what they are (the shapes of their float inputs and of what they
hand on, the sizes of their own weights), never on values; a leaf left over then pairs with the one leftover of
b of exactly its kind, where it is the only one (a shortcut run before the main branch on one side, after it on
the other). Calls that hand on an input unchanged (an Identity) are left out on both sides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.node import Node
from ...core.ranks import call_key
from ...core.twin import Twin
from ..align.call_features import own_weights

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison

Kind = tuple[Any, ...]


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
        run, last_j = [], max(last_j, j)
    return found


def _segment(mine: list[tuple[str, Kind]], theirs: list[tuple[str, Kind]]) -> dict[str, str]:
    """One stretch between two paired leaves: in order, then each leftover with the one leftover of its kind."""
    if not mine or not theirs:
        return {}
    found = _in_order([k for _, k in mine], [k for _, k in theirs])
    left_a = [i for i in range(len(mine)) if i not in found]
    left_b = [j for j in range(len(theirs)) if j not in set(found.values())]
    for i in left_a:
        same = [j for j in left_b if theirs[j][1] == mine[i][1]]
        if len(same) == 1 and sum(1 for k in left_a if mine[k][1] == mine[i][1]) == 1:
            found[i] = same[0]
    return {mine[i][0]: theirs[j][0] for i, j in found.items()}


def _leaves(trace: Any, twin: Twin, params: Any) -> list[tuple[str, Kind]]:
    """The trace's leaf calls as its twin ran them (those pruning left out of the files among them), in order, with
    their kind; those whose output is one of their inputs unchanged (an Identity) left out."""
    if twin.events:
        keys: list[str] = []
        opened: list[list[Any]] = []
        for event in twin.events:
            if event[0] == "(":
                if opened:
                    opened[-1][1] = True  # its parent holds a call
                opened.append([event[1:], False])
            elif opened:
                key, has_children = opened.pop()
                if not has_children:
                    keys.append(key)
    else:
        keys = [call_key(n.module_path, n.call_index) for n in trace.nodes() if not n.children]
    found = []
    for key in keys:
        prints = twin.calls.get(key, {})
        ins = [p for place, p in prints.items() if not place.startswith("out")]
        outs = [p for place, p in prints.items() if place.startswith("out")]
        if not outs or any(p.sums == outs[0].sums for p in ins):
            continue  # nothing handed on, or an input handed on unchanged
        weights = own_weights(Node(key.split("@", 1)[0]), params)
        found.append((key, (tuple(sorted(tuple(p.shape) for p in ins)), tuple(outs[0].shape), weights)))
    return found


def _in_order(mine: list[Kind], theirs: list[Kind]) -> dict[int, int]:
    """The longest run of equal kinds in order on both sides (a longest common subsequence): i -> j."""
    n, m = len(mine), len(theirs)
    if n * m > 4_000_000:
        return {}
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = table[i], table[i + 1]
        for j in range(m - 1, -1, -1):
            row[j] = below[j + 1] + 1 if mine[i] == theirs[j] else max(below[j], row[j + 1])
    found: dict[int, int] = {}
    i = j = 0
    while i < n and j < m:
        if mine[i] == theirs[j] and table[i][j] == table[i + 1][j + 1] + 1:
            found[i] = j
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return found
