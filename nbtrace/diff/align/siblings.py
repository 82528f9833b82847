"""Sibling calls paired by what they are handed, where call order pairs them wrongly or not at all.

Two libraries add a model's embeddings in another order (word, position, token type against word, token type,
position): the same-shaped sibling calls then stand in another order under their parents, and the alignment by
call order pairs at most one of them right. Each such leaf is handed its own ids (positions, segments), and a port
hands its counterpart the same ids: the values of a call's inputs say which of the other side's siblings it is.
Under each pair of aligned parents, a leaf of a is paired with the one leaf of b that is handed the same values
(equal printed values, equal files; the same shapes, as the alignment requires) where no other leaf of either
side is handed them too. Calls handed one tensor together (q, k and v) stay as call order paired them, and so does
a leaf whose inputs a bug changed.
"""

from __future__ import annotations

import re
from collections.abc import Hashable

from ...core.node import Node
from ...core.tensor import TensorValue
from .flow import TensorCache

_DTYPE = re.compile(r",\s*dtype=[\w.]+")  # torch writes an int32 tensor's dtype, an int64 one's not


def repair_siblings(pairs: list[tuple[Node, Node]], caches: tuple[TensorCache, TensorCache],
                    left_out: set[int]) -> list[tuple[Node, Node]]:
    """``pairs`` with the leaves under each aligned pair of parents paired by what they are handed (see above), in
    a's call order; ``left_out``: ids of calls kept out of the alignment (they compute nothing)."""
    partner: dict[int, tuple[Node, Node]] = {id(x): (x, y) for x, y in pairs}  # a's call -> its pair
    taken: dict[int, Node] = {id(y): x for x, y in pairs}  # b's call -> a's call it is paired with
    changed = False
    for parent_a, parent_b in pairs:
        leaves_a, leaves_b = _same_shaped(parent_a, parent_b, left_out)
        if len(leaves_a) < 2 or not leaves_b:
            continue
        keys_a = {id(x): _handed(x, caches[0]) for x in leaves_a}
        keys_b = {id(y): _handed(y, caches[1]) for y in leaves_b}
        for x in leaves_a:
            key = keys_a[id(x)]
            if key is None or sum(1 for k in keys_a.values() if k == key) != 1:
                continue
            found = [y for y in leaves_b if keys_b[id(y)] == key]
            if len(found) != 1 or (id(x) in partner and partner[id(x)][1] is found[0]):
                continue
            y = found[0]
            if id(x) in partner:  # x's old partner is free again
                del taken[id(partner.pop(id(x))[1])]
            if id(y) in taken:  # so is y's
                del partner[id(taken.pop(id(y)))]
            partner[id(x)], taken[id(y)] = (x, y), x
            changed = True
    return sorted(partner.values(), key=lambda pair: pair[0].index) if changed else pairs


def _same_shaped(parent_a: Node, parent_b: Node, left_out: set[int]) -> tuple[list[Node], list[Node]]:
    """The leaves under two aligned parents whose outputs have a shape (but for the batch) another leaf of a's side
    shares: siblings order can mistake for each other (only their inputs are read, and only theirs)."""
    def shape(node: Node) -> tuple:  # the batch dimension left out: one side's positions broadcast over it
        return tuple(tuple(t.shape[1:]) for t in node.output_tensors())

    leaves_a = [c for c in parent_a.children if not c.children and id(c) not in left_out]
    shapes = [shape(c) for c in leaves_a]
    shared = {s for s in shapes if shapes.count(s) > 1}
    leaves_b = [c for c in parent_b.children if not c.children and id(c) not in left_out and shape(c) in shared]
    return [c for c, s in zip(leaves_a, shapes) if s in shared], leaves_b


def _handed(node: Node, cache: TensorCache) -> Hashable | None:
    """What a call is handed, as values (None where any input has none to compare)."""
    found = []
    for tensor in node.input_tensors():
        ids = _ids(tensor, cache)
        if ids is not None:
            found.append(ids)
        elif tensor.lines is not None:
            found.append((tensor.shape, tuple(_DTYPE.sub("", line) for line in tensor.lines)))
        elif tensor.ref is not None:
            found.append(cache.fingerprint(tensor))
        else:
            return None
    return tuple(found) if found else None


def _ids(tensor: TensorValue, cache: TensorCache) -> Hashable | None:
    """An integer tensor printed in full or held in a file, as its values with rows repeated along the batch left out
    (positions expanded to ``[batch, seq]`` on one side and ``[1, seq]`` on the other are handed the same ids);
    None otherwise."""
    if "int" not in tensor.dtype or tensor.numel > _MOST_IDS:
        return None
    if tensor.lines is not None and not any("..." in line for line in tensor.lines):
        numbers = [int(v) for v in _INTEGER.findall(_DTYPE.sub("", " ".join(tensor.lines)))]
    elif tensor.ref is not None:
        loaded = cache.load(tensor)
        if loaded is None:
            return None
        numbers = [int(v) for v in loaded.reshape(-1).tolist()]
    else:
        return None
    if len(numbers) != tensor.numel or not tensor.shape:
        return None
    shape = list(tensor.shape)
    while len(shape) > 1:
        row = len(numbers) // shape[0]
        if any(numbers[i * row:(i + 1) * row] != numbers[:row] for i in range(1, shape[0])):
            break
        numbers, shape = numbers[:row], shape[1:]
    return ("ids", tuple(shape), tuple(numbers))


_INTEGER = re.compile(r"-?\d+")
_MOST_IDS = 1 << 16  # an id tensor larger than this is not read to pair two calls
