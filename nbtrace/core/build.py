"""Building Nodes from the JSON tree of the format, checking its shape and naming any problem.

Trace files are shared, so they are untrusted input: every malformed place raises
TraceFormatError with the file and the place (``root.children[3].inputs.args[0]``),
values may not nest deeper than ``MAX_VALUE_DEPTH``, and a tensor file reference
must name a file beside the trace.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError
from .node import Node
from .tensor import STAT_NAMES, TensorValue, is_tensor_record, reference_problem

#: How deep an input or output value may nest (module arguments are a few levels at most).
MAX_VALUE_DEPTH = 100
_SHAPE = re.compile(r"^torch\.Size\(\[([0-9, ]*)\]\)$")


class Malformed(Exception):
    """A problem found while building; the place is collected while it unwinds."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.place: list[str] = []


class TreeBuilder:
    """Turns a JSON tree into Nodes (call order in ``order``).

    The fast path builds no location strings: a problem raises ``Malformed``,
    which collects where it happened as it unwinds.
    """

    def __init__(self, where: object, base_dir: Path | None) -> None:
        self.where = where
        self.base_dir = base_dir
        self.order: list[Node] = []
        self.calls: dict[str, int] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}

    def build(self, tree: Any) -> Node:
        """The root Node of ``tree``; iterative, so very deep call trees cannot exhaust the stack."""
        root: Node | None = None
        pending: list[tuple[Any, str, Node | None]] = [(tree, "root", None)]
        while pending:
            raw, where, up = pending.pop()
            try:
                node = self._one(raw, up)
                children = raw.get("children", [])
                if not isinstance(children, list):
                    raise Malformed("'children' must be a list")
            except Malformed as bad:
                place = where + "".join(reversed(bad.place))
                raise TraceFormatError(self.where, f"{bad.problem} (at {place})") from None
            if root is None:
                root = node
            pending.extend(
                (child, f"{where}.children[{i}]", node) for i, child in reversed(list(enumerate(children)))
            )
        assert root is not None
        return root

    def _one(self, raw: Any, parent: Node | None) -> Node:
        if not isinstance(raw, dict):
            raise Malformed(f"a call must be a JSON object, found {type(raw).__name__}")
        path = raw.get("module_path")
        if not isinstance(path, str):
            raise Malformed("a call needs a string 'module_path'")
        node = Node(path)
        node._keys = tuple(raw)
        node.parent = parent
        node.depth = 0 if parent is None else parent.depth + 1
        node.index = len(self.order)
        node.call_index = self.calls.get(path, 0)
        self.calls[path] = node.call_index + 1
        for key in ("inputs", "outputs"):
            if key in raw:
                try:
                    setattr(node, key, self.value(raw[key], 0))
                except Malformed as bad:
                    bad.place.append(f".{key}")
                    raise
        if "error" in raw:
            error = raw["error"]
            if not isinstance(error, dict) or not all(isinstance(v, str) for v in error.values()):
                raise Malformed("'error' must be an object of strings ('type' and 'message')")
            node.error = dict(error)
        if parent is not None:
            parent.children.append(node)
        self.order.append(node)
        return node

    def value(self, raw: Any, depth: int) -> Any:
        if isinstance(raw, str) or raw is None:
            return raw
        if depth >= MAX_VALUE_DEPTH:
            raise Malformed(f"a value nests deeper than {MAX_VALUE_DEPTH} levels")
        if isinstance(raw, dict):
            if is_tensor_record(raw):
                return self.tensor(raw)
            out = {}
            for key, item in raw.items():
                try:
                    out[key] = self.value(item, depth + 1)
                except Malformed as bad:
                    bad.place.append(f".{key}")
                    raise
            return out
        if isinstance(raw, list):
            items = []
            for i, item in enumerate(raw):
                try:
                    items.append(self.value(item, depth + 1))
                except Malformed as bad:
                    bad.place.append(f"[{i}]")
                    raise
            return items
        raise Malformed(f"unexpected {type(raw).__name__} value {raw!r:.60}")

    def tensor(self, raw: dict[str, Any]) -> TensorValue:
        text = raw["shape"]
        shape = self.shapes.get(text)
        if shape is None:
            match = _SHAPE.match(text)
            dims = match.group(1).strip() if match else "x"
            try:
                shape = tuple(int(d) for d in dims.split(",")) if dims else ()
            except ValueError:
                raise Malformed(f"bad tensor shape {text[:80]!r}") from None
            self.shapes[text] = shape
        value = raw.get("value")
        if isinstance(value, str):
            problem = reference_problem(value)
            if problem is not None:
                raise Malformed(problem)
        elif value is not None and (not isinstance(value, list) or not set(map(type, value)) <= {str}):
            raise Malformed("a tensor 'value' must be a list of lines or a file reference")
        stats = {}
        for name in STAT_NAMES:
            if name in raw:
                if not isinstance(raw[name], str):
                    raise Malformed(f"tensor stat {name!r} must be a string")
                stats[name] = raw[name]
        return TensorValue(shape, raw["dtype"], value, stats, self.base_dir, has_value="value" in raw)
