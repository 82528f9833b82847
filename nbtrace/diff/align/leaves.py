"""Aligning two traces of another library's house: the leaves first, then the containers around them.

Two libraries lay out one network differently: one wraps each convolution, norm and activation in a module of its
own, numbers its stages from 0 in a list, and runs a block's shortcut before its main branch; the other names its
stages ``layer1…layer4`` and runs the shortcut after. Their containers and their path numbers do not correspond,
but the computations do: the leaves (the calls that compute) run in the same order, with the same shapes.

- The leaves that compute something (``idle.py`` left out) are aligned as two sequences (the global alignment of
  ``align.py``), on what they are and how they are wired (``call_features.py``), the shapes of their own weights
  among it, and never on path numbers (each house numbers its own way). Order is the constraint: two same-shaped
  convolutions of different blocks cannot pair, since every call between them would have to go unmatched.
- Containers pair by the leaves they hold: a's container with the outermost of b's containers that holds the
  counterparts of its paired leaves and no other paired leaf. A container of one side only (a wrapper around a
  convolution, a norm and an activation; a stage's list) stays unmatched.
- Leaves left over inside a pair of containers (a shortcut run before the main branch on one side and after it on
  the other: it reads the block's input, not the branch's output, so its place in the order is free) pair with
  each other within that pair of containers only, by structure, where one counterpart stands out.
"""

from __future__ import annotations

import copy

from ...core.node import Node
from .call_features import CallFeatures, pair_score
from .sequence import align_run

#: a leaf's own weights (the shapes of its parameters, as element counts) agreeing or not
_WEIGHTS_AGREE = 2.0


def leaf_pairs(roots: tuple[Node, Node], fa: list[CallFeatures], fb: list[CallFeatures]) -> list[tuple[Node, Node]]:
    """Pairs of a's and b's calls, leaves by sequence and containers by the leaves they hold (module docstring).
    ``fa``/``fb`` are the features of both sides' calls but their ``roots``."""
    leaves_a = [_numberless(f) for f in fa if f.leaf]
    leaves_b = [_numberless(f) for f in fb if f.leaf]
    pairs = align_run(leaves_a, leaves_b, _leaf_score)
    pairs += _between(leaves_a, leaves_b, pairs)
    containers: list[tuple[Node, Node]] = []
    for _ in range(2):  # a leftover paired inside a pair of containers can pair the containers around it
        containers = _containers(fa, fb, pairs)
        found = _leftovers(leaves_a, leaves_b, pairs, [roots, *containers])
        if not found:
            break
        pairs += found
    return pairs + containers


def _numberless(f: CallFeatures) -> CallFeatures:
    """A copy of the features without path numbers: each house numbers its stacks its own way."""
    f = copy.copy(f)
    f.numbers = ()
    return f


def _leaf_score(x: CallFeatures, y: CallFeatures) -> float | None:
    """``pair_score``, with the shapes of the leaves' own weights: a 3x3 convolution is not a 1x1 one."""
    score = pair_score(x, y)
    if score is None or x.weights is None or y.weights is None:
        return score
    return score + (_WEIGHTS_AGREE if x.weights == y.weights else -_WEIGHTS_AGREE)


def _between(leaves_a: list[CallFeatures], leaves_b: list[CallFeatures], pairs: list[tuple[Node, Node]]
             ) -> list[tuple[Node, Node]]:
    """The unpaired leaves between two consecutive pairs, aligned in order where they are the same kind of call
    with tensors of other sizes (``_resized_score``): a pooling with another padding, and every call after it
    until the sizes meet again, still pair with their counterparts, so a difference of size is seen where born."""
    where_a = {id(f.node): i for i, f in enumerate(leaves_a)}
    where_b = {id(f.node): j for j, f in enumerate(leaves_b)}
    found: list[tuple[Node, Node]] = []
    last_a = last_b = -1
    for i, j in sorted((where_a[id(x)], where_b[id(y)]) for x, y in pairs) + [(len(leaves_a), len(leaves_b))]:
        if i > last_a + 1 and j > last_b + 1:
            found += align_run(leaves_a[last_a + 1:i], leaves_b[last_b + 1:j], _resized_score)
        last_a, last_b = i, j
    return found


def _resized_score(x: CallFeatures, y: CallFeatures) -> float | None:
    """Two leaves that are the same kind of call on tensors of other sizes: as many inputs and outputs, of the same
    ranks and kinds, and weights of the same sizes (None where either differs)."""
    if x.weights != y.weights or len(x.ins) != len(y.ins) or len(x.outs) != len(y.outs):
        return None
    ranks = [(len(s), k) for s, k in x.ins] == [(len(s), k) for s, k in y.ins]
    if not ranks or [len(s) for s in x.out_shapes] != [len(s) for s in y.out_shapes]:
        return None
    return 3.0 + (1.0 if x.entry == y.entry else 0.0)


def _containers(fa: list[CallFeatures], fb: list[CallFeatures], pairs: list[tuple[Node, Node]]
                ) -> list[tuple[Node, Node]]:
    """Each of a's containers with b's outermost container that holds the counterparts of its paired leaves and no
    other paired leaf (outer containers first, each of b's taken once)."""
    b_of = {id(x): y for x, y in pairs}
    paired_b = {id(y) for _, y in pairs}
    held_b: dict[int, int] = {}  # id(b's call) -> how many paired leaves it holds
    for f in fb:
        if f.leaf and id(f.node) in paired_b:
            for up in f.node.ancestors():
                held_b[id(up)] = held_b.get(id(up), 0) + 1
    found: list[tuple[Node, Node]] = []
    taken: set[int] = set()
    for f in fa:  # call order: a container comes before what it holds
        if f.leaf:
            continue
        mine = [b_of[id(n)] for n in f.node.walk() if not n.children and id(n) in b_of]
        if not mine:
            continue
        holder = _common(mine)
        if holder is None or holder.parent is None or held_b.get(id(holder), 0) != len(mine):
            continue
        while (holder.parent is not None and holder.parent.parent is not None
               and held_b.get(id(holder.parent), 0) == len(mine) and id(holder.parent) not in taken):
            holder = holder.parent
        if id(holder) in taken:
            continue
        taken.add(id(holder))
        found.append((f.node, holder))
    return found


def _common(nodes: list[Node]) -> Node | None:
    """The innermost call that holds every one of ``nodes`` (a leaf alone: its parent)."""
    held = [n.parent for n in nodes[:1]]
    walker = held[0]
    chain = []
    while walker is not None:
        chain.append(walker)
        walker = walker.parent
    for node in nodes[1:]:
        mine = {id(n) for n in node.ancestors()}
        chain = [n for n in chain if id(n) in mine]
    return chain[0] if chain else None


def _leftovers(fa: list[CallFeatures], fb: list[CallFeatures], pairs: list[tuple[Node, Node]],
               containers: list[tuple[Node, Node]]) -> list[tuple[Node, Node]]:
    """Unpaired leaves of a and b inside one pair of containers (the innermost pair holding each), paired with each
    other where each is the other's best-scoring counterpart there and no rival scores as well."""
    taken_a = {id(x) for x, _ in pairs}
    taken_b = {id(y) for _, y in pairs}
    inside: dict[int, Node] = {id(x): y for x, y in containers}
    scopes_b = {id(y) for _, y in containers}
    groups_a: dict[int, list[CallFeatures]] = {}
    groups_b: dict[int, list[CallFeatures]] = {}
    for f in fa:
        scope = next((up for up in f.node.ancestors() if id(up) in inside), None)
        if id(f.node) not in taken_a and scope is not None:
            groups_a.setdefault(id(inside[id(scope)]), []).append(f)
    for f in fb:
        scope = next((up for up in f.node.ancestors() if id(up) in scopes_b), None)
        if id(f.node) not in taken_b and scope is not None:
            groups_b.setdefault(id(scope), []).append(f)
    found = []
    for key, mine in groups_a.items():
        theirs = groups_b.get(key, [])
        for x in mine:
            scored = [(s, y) for y in theirs if (s := _leaf_score(x, y)) is not None]
            if not scored:
                continue
            best, y = max(scored, key=lambda item: item[0])
            if sum(1 for s, _ in scored if s >= best) > 1:
                continue  # two of b's fit as well: structure cannot tell
            rivals = [s for other in mine if other is not x and (s := _leaf_score(other, y)) is not None]
            if any(s >= best for s in rivals):
                continue
            found.append((x.node, y.node))
            theirs = [f for f in theirs if f.node is not y.node]
    return found
