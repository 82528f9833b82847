"""A leaf of one side paired with a container of the other that computes the same thing in parts.

``nn.MultiheadAttention`` projects queries, keys and values from its own ``in_proj_weight`` and runs its output
projection as a function of ``out_proj``'s weight (or one fused native kernel): one call with no children. A port
of it calls ``q_proj``, ``k_proj``, ``v_proj`` and ``o_proj`` as modules inside its attention. The alignment never
pairs a leaf with a container on what they look like (a container's leaves align on their own), so the original's
attention and the port's stay unpaired, and whatever they compute is blamed on the next call that pairs.

Where, under a pair of parents, one side's only unpaired call in a stretch between two paired siblings is a leaf
and the other side's only one there is a container none of whose calls paired, both starting from a tensor of the
same shape and (where both are recorded) ending in one, they are the same computation: paired. Order and
uniqueness decide, never a name or a value.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from ...core.dtypes import dtype_kind
from ...core.node import Node
from ...core.tensor import TensorValue


def fused_pairs(pairs: list[tuple[Node, Node]], idle: AbstractSet[int]) -> list[tuple[Node, Node]]:
    """The pairs of a leaf and a container (either side's) found as the module docstring says; ``idle``: ids of
    calls that compute nothing (never a counterpart, never a rival)."""
    b_of = {id(x): y for x, y in pairs}
    paired_a = {id(x) for x, _ in pairs}
    paired_b = {id(y) for _, y in pairs}
    found: list[tuple[Node, Node]] = []
    for x, y in pairs:
        if not x.children or not y.children:
            continue
        for mine, theirs in _stretches(x, y, b_of, paired_a, paired_b, idle):
            if len(mine) != 1 or len(theirs) != 1:
                continue
            p, q = mine[0], theirs[0]
            leaf, whole = (p, q) if not p.children else (q, p)
            if leaf.children or not whole.children or not _untouched(whole, paired_a | paired_b):
                continue
            if _same_ends(leaf, whole):
                found.append((p, q))
    return found


def _stretches(x: Node, y: Node, b_of: dict[int, Node], paired_a: set[int], paired_b: set[int],
               idle: AbstractSet[int]) -> list[tuple[list[Node], list[Node]]]:
    """The unpaired children of ``x`` and of ``y`` between consecutive paired children (counterparts of each
    other), stretch by stretch; None where the paired children of the two are not in the same order."""
    kids_b = {id(child): k for k, child in enumerate(y.children)}
    stretches: list[tuple[list[Node], list[Node]]] = []
    mine: list[Node] = []
    last_b = -1
    for child in x.children:
        if id(child) in idle:
            continue
        if id(child) not in paired_a:
            mine.append(child)
            continue
        k = kids_b.get(id(b_of[id(child)]))
        if k is None or k <= last_b:
            return []
        stretches.append((mine, _unpaired(y.children[last_b + 1:k], paired_b, idle)))
        mine, last_b = [], k
    stretches.append((mine, _unpaired(y.children[last_b + 1:], paired_b, idle)))
    return stretches


def _unpaired(children: list[Node], paired: set[int], idle: AbstractSet[int]) -> list[Node]:
    return [child for child in children if id(child) not in paired and id(child) not in idle]


def _untouched(node: Node, paired: set[int]) -> bool:
    """No call inside ``node`` (itself included) is paired."""
    return not any(id(n) in paired for n in node.walk())


def _same_ends(leaf: Node, whole: Node) -> bool:
    """The two start from a float tensor of the same shape, and end in one where both outputs are recorded."""
    ins = _first_float(leaf.input_tensors()), _first_float(whole.input_tensors())
    if ins[0] is None or ins[0] != ins[1]:
        return False
    outs = _first_float(leaf.output_tensors()), _first_float(whole.output_tensors())
    return outs[0] is None or outs[1] is None or outs[0] == outs[1]


def _first_float(tensors: list[TensorValue]) -> tuple[int, ...] | None:
    return next((tuple(t.shape) for t in tensors if dtype_kind(t.dtype) == "float"), None)
