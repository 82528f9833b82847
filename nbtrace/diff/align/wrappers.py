"""A call that only calls one module paired as that module: the pair moved to the innermost call.

A ``Sequential`` holding one block, a stage's wrapper around its only list, a library's ``forward`` that hands its
arguments to one submodule and returns what it returned: the wrapper and what it wraps take the same inputs and
return the same values, so the alignment can pair either with the other side's call. The inner one is where the
code is: a bug in the block's own code is born in the block, and the verdict names a's call of a pair. Told from the
values recorded (equal fingerprints of every input and output; where the files keep no output of a call with
children, as transformers' format does, its float64 twin's fingerprints), never from a class name.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from ...core.node import Node
from ...core.tensor import TensorValue
from ...core.twin import Twin

Fingerprint = Callable[[TensorValue], Hashable | None]


def innermost_pairs(pairs: list[tuple[Node, Node]], fingerprints: tuple[Fingerprint, Fingerprint],
                    twins: tuple[Twin | None, Twin | None] = (None, None)) -> list[tuple[Node, Node]]:
    """``pairs`` with each pair whose call only wraps a single unpaired child (on either side) moved to that
    child, as far down as such wrappers go; ``twins``: each side's float64 twin, for outputs its files do not
    hold."""
    paired = ({id(x) for x, _ in pairs}, {id(y) for _, y in pairs})
    moved = []
    for x, y in pairs:
        for side, fingerprint in enumerate(fingerprints):
            node = (x, y)[side]
            inner = _wrapped(node, fingerprint, twins[side])
            while inner is not None and id(inner) not in paired[side]:
                node = inner
                inner = _wrapped(node, fingerprint, twins[side])
            if node is not (x, y)[side]:
                paired[side].discard(id((x, y)[side]))
                paired[side].add(id(node))
                x, y = (node, y) if side == 0 else (x, node)
        moved.append((x, y))
    return moved


def _wrapped(node: Node, fingerprint: Fingerprint, twin: Twin | None) -> Node | None:
    """The only child of ``node`` when it holds every input and output ``node`` recorded (equal values), else
    None."""
    if node.parent is None or len(node.children) != 1 or node.error:
        return None
    child = node.children[0]
    if not child.children or child.error:
        return None  # a leaf is never the counterpart of a container: the leaves align on their own
    mine, theirs = node.tensors(), child.tensors()
    for io in ("input", "output"):
        keys = [fingerprint(t) for kind, _, t in mine if kind == io]
        held = {fingerprint(t) for kind, _, t in theirs if kind == io}
        if not keys and io == "output" and twin is not None:  # the files keep outputs at the leaves only
            keys = [p.sums for place, p in twin.of(node).items() if place.startswith("out")]
            held = {p.sums for place, p in twin.of(child).items() if place.startswith("out")}
        if not keys or any(k is None or k not in held for k in keys):
            return None
    return child
