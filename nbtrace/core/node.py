"""Node: one module call in the call tree, and the questions asked about its place in the tree."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from .paths import is_layer_block_call, layer_number, split_layer_path
from .tensor import TensorValue


class PrunedGap(NamedTuple):
    """Layer blocks ``prefix.first`` … ``prefix.last`` that pruning removed before ``children[position]``."""

    position: int
    prefix: str
    first: int
    last: int


class Node:
    """One module call: its path, place in the tree, inputs, outputs and error.

    ``inputs``/``outputs`` keep the nesting of the format (dicts and lists) with
    TensorValue leaves and strings for everything else; ``outputs`` is None when
    the format prunes them (a node with children). ``duration`` (seconds) and
    ``autocast`` exist only on traces just recorded. ``measured`` holds the rounding measured per output
    place when the trace was recorded with ``measure_rounding`` (``core/measured.py``).
    """

    __slots__ = (
        "module_path",
        "index",
        "depth",
        "parent",
        "children",
        "inputs",
        "outputs",
        "error",
        "call_index",
        "duration",
        "autocast",
        "measured",
        "_keys",
        "_tensors",
    )

    def __init__(self, module_path: str) -> None:
        self.module_path = module_path
        self.index = 0
        self.depth = 0
        self.parent: Node | None = None
        self.children: list[Node] = []
        self.inputs: Any = None
        self.outputs: Any = None
        self.error: dict[str, str] | None = None
        self.call_index = 0
        self.duration: float | None = None
        #: (device type, dtype) of the autocast the call ran under, on traces just recorded; None: none (or unknown)
        self.autocast: tuple[str, Any] | None = None
        #: place -> Measured: the rounding measured as it was recorded (``core/measured.py``); {} when not measured
        self.measured: dict[str, Any] = {}
        self._keys: tuple[str, ...] = ("module_path",)
        self._tensors: tuple[Any, Any, list[tuple[str, str, TensorValue]]] | None = None

    # -- names ------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """The last component of the module path (the class name for the root)."""
        return self.module_path.rsplit(".", 1)[-1] if self.parent is not None else self.module_path

    @property
    def extends_parent(self) -> bool:
        """True when this call's path is its parent's path plus more (the normal case)."""
        return self.parent is not None and self.module_path.startswith(self.parent.module_path + ".")

    @property
    def label(self) -> str:
        """The name a tree shows for this call: its path relative to its parent's (``layers.0``
        under ``DemoLM``), the whole path when it does not extend the parent's, the path for the root."""
        if self.extends_parent:
            assert self.parent is not None
            return self.module_path[len(self.parent.module_path) + 1 :]
        return self.module_path

    @property
    def layer(self) -> int | None:
        """The layer this call belongs to: the outermost ``.N`` of its path (see ``paths.layer_number``)."""
        return layer_number(self.module_path)

    # -- tensors ------------------------------------------------------------------------
    def tensors(self) -> list[tuple[str, str, TensorValue]]:
        """Every recorded tensor of this call as ``(io, arg, TensorValue)``.

        ``io`` is ``"input"`` or ``"output"``; ``arg`` names the place:
        ``args.0``, ``kwargs.attention_mask``, ``out``, ``out.1``, ``out.logits``.
        """
        known = self._tensors  # found once for the values held now (a comparison asks ~10 times per call)
        if known is not None and known[0] is self.inputs and known[1] is self.outputs:
            return list(known[2])
        found: list[tuple[str, str, TensorValue]] = []
        if self.inputs is not None:
            found += [("input", place, t) for place, t in leaf_places(self.inputs, "", _is_tensor)]
        if self.outputs is not None:
            found += [("output", place, t) for place, t in leaf_places(self.outputs, "out", _is_tensor)]
        self._tensors = (self.inputs, self.outputs, found)
        return list(found)

    def output_tensors(self) -> list[TensorValue]:
        return [t for io, _, t in self.tensors() if io == "output"]

    def input_tensors(self) -> list[TensorValue]:
        return [t for io, _, t in self.tensors() if io == "input"]

    @property
    def nonfinite(self) -> bool:
        """True when this call produced a NaN or inf (in an output) or was handed a NaN (in an input).

        An infinity in an input is not counted: attention masks hold ``-inf`` on purpose.
        """
        return any(t.nonfinite if io == "output" else t.has_nan for io, _, t in self.tensors())

    # -- place in the tree -------------------------------------------------------------------
    def walk(self) -> Iterator[Node]:
        """This node and every descendant, in call order."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def ancestors(self) -> list[Node]:
        """The parent, grandparent, … up to the root."""
        found = []
        walker = self.parent
        while walker is not None:
            found.append(walker)
            walker = walker.parent
        return found

    @property
    def position(self) -> int:
        """This call's position among its parent's children (0 for the root)."""
        if self.parent is None:
            return 0
        return next(i for i, child in enumerate(self.parent.children) if child is self)

    def previous_sibling(self) -> Node | None:
        """The call the same parent made right before this one, or None."""
        position = self.position
        return self.parent.children[position - 1] if self.parent is not None and position > 0 else None

    def next_sibling(self) -> Node | None:
        """The call the same parent made right after this one, or None."""
        if self.parent is None:
            return None
        siblings = self.parent.children
        position = self.position
        return siblings[position + 1] if position + 1 < len(siblings) else None

    def last_leaf(self) -> Node:
        """The last call inside this one that has no children (itself for a leaf)."""
        node = self
        while node.children:
            node = node.children[-1]
        return node

    # -- layer blocks and pruning ----------------------------------------------------------
    @property
    def is_layer_block(self) -> bool:
        """True for one block of a layer stack, as the format's pruning sees it (``paths.is_layer_block_call``)."""
        return bool(self.children) and is_layer_block_call(self.module_path, (c.module_path for c in self.children))

    def pruned_layers(self) -> list[PrunedGap]:
        """Gaps left among this node's layer blocks by layer pruning, in order."""
        gaps = []
        previous: tuple[str, int] | None = None
        for position, child in enumerate(self.children):
            if not child.is_layer_block:
                continue
            prefix, number = split_layer_path(child.module_path)  # type: ignore[misc]
            if previous is not None and previous[0] == prefix and number > previous[1] + 1:
                gaps.append(PrunedGap(position, prefix, previous[1] + 1, number - 1))
            previous = (prefix, number)
        return gaps

    def gap_before(self) -> PrunedGap | None:
        """The layer blocks pruning removed right before this call, or None."""
        if self.parent is None:
            return None
        position = self.position
        return next((gap for gap in self.parent.pruned_layers() if gap.position == position), None)

    # -- the format ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """This call and its subtree exactly as the FULL (or SUMMARY) file holds it."""
        out: dict[str, Any] = {}
        for key in self._keys:
            if key == "module_path":
                out[key] = self.module_path
            elif key == "inputs":
                out[key] = _plain(self.inputs)
            elif key == "outputs":
                out[key] = _plain(self.outputs)
            elif key == "error":
                out[key] = dict(self.error or {})
            elif key == "children":
                out[key] = [child.to_dict() for child in self.children]
        return out

    def __repr__(self) -> str:
        extra = f" call {self.call_index}" if self.call_index else ""
        return f"<Node {self.module_path}{extra} depth={self.depth} children={len(self.children)}>"


def leaf_places(
    value: Any, place: str, is_leaf: Callable[[Any], bool], found: list[tuple[str, Any]] | None = None
) -> list[tuple[str, Any]]:
    """Every leaf of a nested input or output value with the name of its place, in order.

    The one rule for place names: ``place`` is ``""`` for inputs and ``"out"`` for outputs, and each
    level adds ``.<key>`` or ``.<index>`` (``args.0``, ``kwargs.attention_mask``, ``out``, ``out.1``).
    ``is_leaf`` says what a leaf is (a TensorValue here, a tensor record of the JSON tree in capture).
    """
    if found is None:
        found = []
    if is_leaf(value):
        found.append((place, value))
    elif isinstance(value, dict):
        for key, item in value.items():
            leaf_places(item, f"{place}.{key}" if place else str(key), is_leaf, found)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            leaf_places(item, f"{place}.{i}" if place else str(i), is_leaf, found)
    return found


def _is_tensor(value: Any) -> bool:
    return isinstance(value, TensorValue)


def _plain(value: Any) -> Any:
    if isinstance(value, TensorValue):
        return value.to_dict()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value
