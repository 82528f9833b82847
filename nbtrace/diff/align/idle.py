"""Calls that compute nothing: an ``Identity``, a ``Dropout`` in eval mode, a hook-only wrapper.

Such a call hands on one of its inputs unchanged, so a port that has no counterpart for it (or has one where the
original has none) lacks nothing: the alignment leaves these calls out, and neither its coverage nor its
"unmatched" counts hold them. Told from the values recorded, never from a class name: every output of a leaf call
holds the values of one of its inputs (equal fingerprints: the file's hash, the printed lines, or the stats; a view
in another shape, ``nn.Flatten``, computes nothing either).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from ...core.node import Node
from ...core.tensor import TensorValue

Fingerprint = Callable[[TensorValue], Hashable | None]


def computes_nothing(node: Node, fingerprint: Fingerprint, flat: Fingerprint | None = None) -> bool:
    """True for a leaf call (no calls inside, no error) whose every recorded output equals one of its inputs, or
    (``flat``: a fingerprint without the shape) holds an input's values in another shape (a flatten)."""
    if node.children or node.error or node.parent is None:
        return False
    found = node.tensors()
    outputs = [t for io, _, t in found if io == "output"]
    if not outputs:
        return False
    inputs = [t for io, _, t in found if io == "input"]
    keys = {fingerprint(t) for t in inputs}
    keys.discard(None)
    views = {flat(t) for t in inputs} if flat is not None else set()
    views.discard(None)
    return all((key := fingerprint(t)) is not None and key in keys
               or flat is not None and (view := flat(t)) is not None and view in views for t in outputs)
