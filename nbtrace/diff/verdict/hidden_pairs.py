"""Counterparts inside layer blocks one side's files pruned: a's calls paired with the calls b's float64 twin kept.

With ``do_prune_layers=True`` one house's stage list is thinned (transformers' ``stages.1``, ``stages.2`` gone from
its files) while the other's stages, not numbered, are all held (timm's ``layer2``, ``layer3``). The alignment sets
a's calls there aside (``align._in_gaps``); b's twin still kept every call it ran, with the shapes of its tensors
and the order the calls ran in. a's leaves set aside pair with b's leaves the files do not hold, as the leaves of
the files pair (``align/leaves.py``): in order, on what they are (the shapes of their float inputs and of what they
hand on, the sizes of their own weights), never on values; a leaf left over then pairs with the one leftover of b
of exactly its kind, where it is the only one (a shortcut run before the main branch on one side, after it on the
other). Calls that hand on an input unchanged (an Identity) are left out on both sides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.dtypes import dtype_kind
from ...core.node import Node
from ...core.ranks import call_key
from ...core.twin import Twin
from ..align.call_features import own_weights

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison

Kind = tuple[Any, ...]


def hidden_counterparts(comparison: Comparison, twin_b: Twin) -> dict[int, str]:
    """id(a's call) -> b's twin call name, for a's leaves set aside as pruned from b (see the module docstring)."""
    set_aside = [n for n in comparison.alignment.pruned_a if not n.children and id(n) not in comparison._idle_a]
    if not set_aside or not twin_b.events:
        return {}
    params_a = comparison.a.sidecar.get("parameters")
    params_b = comparison.b.sidecar.get("parameters")
    mine = [(n, _node_kind(n, params_a)) for n in set_aside]
    theirs = [(key, kind) for key, kind in _hidden_leaves(comparison.b, twin_b, params_b)]
    if not theirs:
        return {}
    found = _in_order([k for _, k in mine], [k for _, k in theirs])
    paired_a, paired_b = set(found), set(found.values())
    left_a = [i for i in range(len(mine)) if i not in paired_a]
    left_b = [j for j in range(len(theirs)) if j not in paired_b]
    for i in left_a:
        same = [j for j in left_b if theirs[j][1] == mine[i][1]]
        rivals = [k for k in left_a if mine[k][1] == mine[i][1]]
        if len(same) == 1 and len(rivals) == 1:
            found[i] = same[0]
    return {id(mine[i][0]): theirs[j][0] for i, j in found.items()}


def _node_kind(node: Node, params: Any) -> Kind:
    ins = tuple(sorted(tuple(t.shape) for io, _, t in node.tensors() if io == "input" and dtype_kind(t.dtype) == "float"))
    outs = [tuple(t.shape) for io, _, t in node.tensors() if io == "output" and dtype_kind(t.dtype) == "float"]
    return ins, outs[0] if outs else None, own_weights(node, params)


def _hidden_leaves(b, twin: Twin, params: Any) -> list[tuple[str, Kind]]:
    """b's calls that its twin ran and its files do not hold, leaves only, in the order they ran, with their kind;
    those whose output is one of their inputs unchanged left out."""
    held = {call_key(n.module_path, n.call_index) for n in b.nodes()}
    leaves: list[str] = []
    opened: list[list[Any]] = []
    for event in twin.events:
        key = event[1:]
        if event[0] == "(":
            if opened:
                opened[-1][1] = True  # its parent holds a call
            opened.append([key, False])
        elif opened:
            key, has_children = opened.pop()
            if not has_children and key not in held:
                leaves.append(key)
    found = []
    for key in leaves:
        prints = twin.calls.get(key, {})
        ins = {place: p for place, p in prints.items() if not place.startswith("out")}
        outs = [p for place, p in prints.items() if place.startswith("out")]
        if not outs or any(p.sums == outs[0].sums for p in ins.values()):
            continue  # nothing handed on, or an input handed on unchanged
        node = Node(key.split("@", 1)[0])
        found.append((key, (tuple(sorted(tuple(p.shape) for p in ins.values())), tuple(outs[0].shape),
                            own_weights(node, params))))
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
