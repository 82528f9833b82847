"""Each trace's leaf calls as its float64 twin ran them, pruned ones among them, and what the two sides' files
set aside where both were pruned by other numbers.

The format's pruning keeps the first and the last of each stack of numbered blocks. Two houses number other things:
torchvision's ``features.0…8`` is the stem, seven stages and the head (its files keep the stem and the head, no
stage), timm's ``blocks.0…6`` the seven stages (its files keep the first stage and the last). Aligned from the
files alone, the stem of one meets the first stage of the other. Both float64 twins ran every call and kept, in
order, the shapes each call started from and handed on; the sizes of each module's own weights are in the
sidecars. The two leaf sequences are aligned on those, by element counts (a longest common subsequence of equal
kinds, never on values), and where one side's files lack a stretch of its leaves (pruned), the other side's leaves that the files
hold in the same stretch (between the counterparts of the leaves around it) are set aside, with the calls that
hold nothing else (so too where one side pruned nothing and the other's pruned stack has no numbered or named
counterpart: torchvision's ``features`` list of a patch embedding, stages and mergings against transformers'
stages): both sides' files are then thinned alike, and the twins still compare what pruning hid
(``verdict/hidden_pairs.py``).
"""

from __future__ import annotations

import math
from typing import Any

from ...core.node import Node
from ...core.ranks import call_key
from ...core.trace import Trace
from ...core.twin import Twin
from .call_features import own_weights

Kind = tuple[Any, ...]


def set_aside_by_twins(a: Trace, b: Trace) -> tuple[list[Node], list[Node]]:
    """a's and b's calls inside what the other side's files pruned (the module docstring); empty without twins."""
    if a.twin is None or b.twin is None or not (a.twin.events or b.twin.events):
        return [], []  # (a side that pruned nothing has no events: its tree holds every call)
    leaves = (twin_leaves(a, a.twin, a.sidecar.get("parameters")), twin_leaves(b, b.twin, b.sidecar.get("parameters")))
    found = in_order([sizes(k) for _, k in leaves[0]], [sizes(k) for _, k in leaves[1]])
    if not found:
        return [], []
    pairs = sorted(found.items())
    held = ({call_key(n.module_path, n.call_index): n for n in a.nodes()},
            {call_key(n.module_path, n.call_index): n for n in b.nodes()})
    return (_inside_gaps([(j, i) for i, j in pairs], leaves[1], leaves[0], held[1], held[0]),
            _inside_gaps(pairs, leaves[0], leaves[1], held[0], held[1]))


def sizes(kind: Kind) -> Kind:
    """A leaf's kind by the element counts of its tensors: one house holds a map as ``(B, H, W, C)``, another as
    ``(B, H·W, C)``."""
    ins, out, weights = kind
    return tuple(sorted(math.prod(shape) for shape in ins)), math.prod(out), weights


def _inside_gaps(pairs: list[tuple[int, int]], mine: list, theirs: list, my_held: dict, their_held: dict
                 ) -> list[Node]:
    """The other side's calls its files hold where my files do not: paired with a leaf of mine they lack, or
    between two such; with the calls holding nothing else."""
    hidden = [key not in my_held for key, _ in mine]
    gone: set[str] = set()
    for (i0, j0), (i1, j1) in zip([(-1, -1), *pairs], [*pairs, (len(mine), len(theirs))]):
        if i1 < len(mine) and hidden[i1]:
            gone.add(theirs[j1][0])
        stretch = range(i0 + 1, i1)
        if (i0 >= 0 and hidden[i0] or i1 < len(mine) and hidden[i1]) and all(hidden[i] for i in stretch) and (
                i0 >= 0 and i1 < len(mine)):
            gone.update(theirs[j][0] for j in range(j0 + 1, j1))
    computing = {key for key, _ in theirs}
    ids = {id(their_held[key]) for key in gone if key in their_held}
    chosen = set()
    for node in their_held.values():
        leaves = [n for n in node.walk() if not n.children and call_key(n.module_path, n.call_index) in computing]
        if node.parent is not None and leaves and all(id(n) in ids for n in leaves):
            chosen.add(id(node))
    return [n for n in their_held.values() if id(n) in chosen or any(id(up) in chosen for up in n.ancestors())]


def twin_leaves(trace: Any, twin: Twin, params: Any) -> list[tuple[str, Kind]]:
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


def in_order(mine: list[Kind], theirs: list[Kind]) -> dict[int, int]:
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
