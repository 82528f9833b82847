"""What a call looks like, without its values: the features the alignment by call order pairs calls on.

Values are what differ when a port is wrong, so a pairing that reads them changes with
the bug it is meant to find (two same-shape projections, q_proj and o_proj, trade places
as soon as o_proj's values are off). A call is described by what it *is* and how it is
*wired*, each read from its own trace alone (``flow.py``):

- leaf or not, whether a leaf holds weights of its own (a norm is not the activation after it); its number of
  children (those that compute something: a call that hands its input back
  unchanged, an identity or a dropout in eval, never stands for a computation and is left out of the
  sequences before aligning, ``idle.py``); the shapes and dtype kinds of its inputs and outputs;
- its ``.N`` layer numbers and its name (a hint);
- whether its main input is what enters the call it works in (its parent, wrappers
  skipped): q/k/v_proj read the attention's input, o_proj reads something made inside
  (by inline code or by an attention-core module alike); and how many calls read that
  same tensor (q/k/v share one).
"""

from __future__ import annotations

import math
import re
from collections.abc import Set as AbstractSet

from ...core.dtypes import dtype_kind
from ...core.node import Node
from ...core.paths import path_numbers
from .shapes import same_flat_order, same_views
from .flow import Flow

_MIN_SCORE = 3.0  # weaker pairs are never matched
_TOKEN = re.compile(r"[A-Za-z]+")


class CallFeatures:
    """The value-free description of one call (see the module docstring)."""

    __slots__ = (
        "children",
        "entry",
        "fan",
        "ins",
        "key",
        "leaf",
        "main_in",
        "name",
        "node",
        "numbers",
        "out_shapes",
        "outs",
        "rel_path",
        "tokens",
        "weights",
    )

    def __init__(self, node: Node, flow: Flow | None, readers: dict[int, int], idle: AbstractSet[int]) -> None:
        self.node = node
        self.leaf = not node.children
        self.children = sum(1 for child in node.children if id(child) not in idle)
        tensors = node.tensors()
        ins = [t for io, _, t in tensors if io == "input"]
        outs = [t for io, _, t in tensors if io == "output"]
        self.ins = tuple(sorted((t.shape, dtype_kind(t.dtype)) for t in ins))
        floats = [t for t in ins if dtype_kind(t.dtype) == "float"]
        first = floats[0] if floats else (ins[0] if ins else None)
        self.main_in = first.shape if first is not None else None
        self.outs = tuple((t.shape, t.dtype) for t in outs)
        self.out_shapes = tuple(t.shape for t in outs)
        self.numbers = path_numbers(node.module_path)
        self.name = node.name if node.parent is not None else ""
        self.tokens = frozenset(tok.lower() for tok in _TOKEN.findall(self.name))
        self.rel_path = node.module_path.split(".", 1)[1] if "." in node.module_path else ""
        self.entry: bool | None = None
        self.fan = 0
        self.weights: tuple[int, ...] | None = None
        if flow is not None:
            self.weights = own_weights(node, flow.trace.sidecar.get("parameters"))
            self._wiring(flow, readers)
        self.key = (self.leaf, self.out_shapes, self.ins, self.numbers, self.name)

    def _wiring(self, flow: Flow, readers: dict[int, int]) -> None:
        node = self.node
        inputs = flow.slots(node, "input")
        main = next((s for s in inputs if dtype_kind(s.tensor.dtype) == "float"), inputs[0] if inputs else None)
        if main is None:
            return
        scope = working_scope(node, flow)
        self.entry = scope is not None and any(s.source is main.source for s in flow.slots(scope, "input"))
        self.fan = min(readers.get(id(main.source), 0), 3)


def own_weights(node: Node, section: object) -> tuple[int, ...] | None:
    """The element counts of a call's own parameters (its module's, as the sidecar's fingerprints hold them), in
    order: structure, read without values (a 3x3 convolution against a 1x1 one of the same shapes in and out).
    Counts, not shapes: a port may hold a kernel transposed or a convolution's kernel as a matrix. None: no
    fingerprints were recorded."""
    if not isinstance(section, dict):
        return None
    tensors = section.get(node.module_path.split(" ", 1)[0])
    if not isinstance(tensors, dict):
        return ()
    return tuple(sorted(math.prod(t.get("shape") or ()) for t in tensors.values()
                        if isinstance(t, dict) and t.get("kind", "parameter") == "parameter"))


def is_wrapper(node: Node, flow: Flow) -> bool:
    """A call with one child that hands it its own input (``out = Linear`` inside ``OutProj``)."""
    if len(node.children) != 1:
        return False
    mine = {id(s.source) for s in flow.slots(node, "input")}
    return any(id(s.source) in mine for s in flow.slots(node.children[0], "input"))


def working_scope(node: Node, flow: Flow) -> Node | None:
    """The call a call works inside: its parent, wrappers skipped."""
    scope = node.parent
    while scope is not None and is_wrapper(scope, flow):
        scope = scope.parent
    return scope


def features(nodes: list[Node], flow: Flow | None, idle: AbstractSet[int] = frozenset()) -> list[CallFeatures]:
    """The features of ``nodes`` (calls of the trace ``flow`` describes; None: without a data flow); ``idle``
    holds the ids of the trace's calls that compute nothing (``idle.py``), which no call counts as a child."""
    readers: dict[int, int] = {}
    if flow is not None:  # calls taking each tensor as their first float input; a wrapper and its child once
        for event in flow.events:
            floats = [s for s in event.slots if s.io == "input" and dtype_kind(s.tensor.dtype) == "float"]
            parent = event.node.parent
            if not floats or (parent is not None and is_wrapper(parent, flow)):
                continue
            key = id(floats[0].source)
            readers[key] = readers.get(key, 0) + 1
    return [CallFeatures(node, flow, readers, idle) for node in nodes]


def pair_score(x: CallFeatures, y: CallFeatures) -> float | None:
    """How well call ``y`` of b stands for call ``x`` of a; None when it cannot. Reads no values."""
    if x.leaf != y.leaf:
        return None
    score = 0.0
    if x.leaf:
        if x.weights is not None and y.weights is not None and bool(x.weights) != bool(y.weights):
            score -= 2.0  # a call with weights of its own (a norm) against one without (its activation)
        if x.out_shapes != y.out_shapes:
            if not x.out_shapes or not same_views(x.out_shapes, y.out_shapes):
                return None
            score += 2.0  # heads split on one side, merged on the other (a JAX original against its port)
        else:
            score += 4.0 if x.outs else 1.0
            if x.outs != y.outs:
                score -= 1.0  # same shapes, other dtypes (e.g. a bf16 port)
    elif x.children == y.children:
        score += 1.0
    if x.ins and y.ins:  # the same computation starts from tensors of the same shapes (or views of them)
        common = len(set(x.ins) & set(y.ins))
        if common == 0:
            views = any(kx == ky and same_flat_order(sx, sy) for sx, kx in x.ins for sy, ky in y.ins)
            if not views:
                return None
            score += 0.5 / len(set(x.ins) | set(y.ins))
        else:
            score += common / len(set(x.ins) | set(y.ins))
    if x.main_in is not None and x.main_in == y.main_in:
        score += 1.0 if x.leaf else 2.0
    k = min(len(x.numbers), len(y.numbers))
    if k:
        if x.numbers[:k] != y.numbers[:k]:
            return None
        score += 3.0 if len(x.numbers) == len(y.numbers) else 1.0
    elif x.numbers or y.numbers:
        score -= 0.5
    if x.rel_path and x.rel_path == y.rel_path:
        score += 3.0
    elif x.name and x.name == y.name:
        score += 2.0
    elif x.tokens and y.tokens:
        score += len(x.tokens & y.tokens) / len(x.tokens | y.tokens)
    if x.entry is not None and x.entry == y.entry:
        score += 2.0
    if x.entry is not None and y.entry is not None and (x.fan > 1) == (y.fan > 1):
        score += 1.0
    return score if score >= _MIN_SCORE else None
