"""Calls that compute nothing: an ``Identity``, a ``Dropout`` in eval mode, a hook-only wrapper.

Such a call hands on one of its inputs unchanged, so a port that has no counterpart for it (or has one where the
original has none) lacks nothing: the alignment leaves these calls out, and neither its coverage nor its
"unmatched" counts hold them. Told from the values recorded, never from a class name: every output of a leaf call
holds the values of one of its inputs (equal fingerprints: the file's hash, the printed lines, or the stats).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from ...core.node import Node
from ...core.tensor import TensorValue

Fingerprint = Callable[[TensorValue], Hashable | None]


def computes_nothing(node: Node, fingerprint: Fingerprint) -> bool:
    """True for a leaf call (no calls inside, no error) whose every recorded output equals one of its inputs."""
    if node.children or node.error or node.parent is None:
        return False
    found = node.tensors()
    outputs = [t for io, _, t in found if io == "output"]
    if not outputs:
        return False
    inputs = {fingerprint(t) for io, _, t in found if io == "input"}
    inputs.discard(None)
    return all((key := fingerprint(t)) is not None and key in inputs for t in outputs)

