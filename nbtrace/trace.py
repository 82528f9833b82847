"""Trace, Node and TensorValue: the in-memory call tree every consumer reads.

A Trace is built from the JSON tree of the file format (``Trace.from_tree``), both
when a forward was just recorded and when files are loaded, so a recorded trace
and the same trace loaded from disk are equal by construction.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import TraceFormatError
from .prune import is_layer_block_call, split_layer_path

if TYPE_CHECKING:  # pragma: no cover
    import pandas
    import torch

STAT_NAMES = ("mean", "std", "min", "max")
_SHAPE = re.compile(r"^torch\.Size\(\[([0-9, ]*)\]\)$")
_NONFINITE_TOKEN = re.compile(r"(?<![A-Za-z_])-?(?:nan|inf)(?![A-Za-z_])")
_NAN_TOKEN = re.compile(r"(?<![A-Za-z_])nan(?![A-Za-z_])")


def parse_stat(text: str | None) -> float | None:
    """The number in a stat string such as ``tensor(6.5460e-06, dtype=torch.float16)``."""
    if not isinstance(text, str) or not text.startswith("tensor("):
        return None
    end = text.find(",", 7)
    if end < 0:
        end = text.find(")", 7)
    try:
        return float(text[7:end])
    except ValueError:  # "...": a meta tensor has no value
        return None


def layer_number(module_path: str) -> int | None:
    """The layer a path belongs to: its outermost ``.N`` component after the root, or None.

    ``Llama.model.layers.3.mlp.experts.7.w1`` belongs to layer 3 (expert 7 of layer 3).
    """
    for part in module_path.split(".")[1:]:
        if part.isdigit():
            return int(part)
    return None


def is_tensor_record(value: Any) -> bool:
    """True for the dict the format writes for one tensor (shape, dtype, value, stats)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("shape"), str)
        and isinstance(value.get("dtype"), str)
        and value["shape"].startswith("torch.Size(")
    )


class TensorValue:
    """One recorded tensor: shape, dtype, stats, and its values (printed lines or a file).

    ``value`` is the list of printed lines (FULL file with ``use_repr=True``), the
    relative safetensors reference (``"./X_outputs.safetensors"``), or None in a
    SUMMARY file. Stats are floats parsed from the stat strings the format writes
    (transformers writes them for float16/bfloat16/float32 only).
    """

    __slots__ = ("shape", "dtype", "value", "stats", "base_dir", "_has_value", "mean", "std", "min", "max")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: str,
        value: list[str] | str | None = None,
        stats: dict[str, str] | None = None,
        base_dir: Path | None = None,
        has_value: bool | None = None,
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self.value = value
        self.stats = stats or {}
        self.base_dir = base_dir
        self._has_value = value is not None if has_value is None else has_value
        self.mean = parse_stat(self.stats.get("mean"))
        self.std = parse_stat(self.stats.get("std"))
        self.min = parse_stat(self.stats.get("min"))
        self.max = parse_stat(self.stats.get("max"))

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def lines(self) -> list[str] | None:
        """The tensor as torch printed it, when the file holds printed values."""
        return self.value if isinstance(self.value, list) else None

    @property
    def ref(self) -> str | None:
        """The relative safetensors reference, when the file holds one."""
        return self.value if isinstance(self.value, str) else None

    @property
    def path(self) -> Path | None:
        """Where the safetensors file of this tensor lives, if it has one."""
        if self.ref is None:
            return None
        base = self.base_dir if self.base_dir is not None else Path(".")
        return base / self.ref

    @property
    def nonfinite(self) -> bool:
        """True when the stats or the printed values show a NaN or an infinity."""
        for name in ("mean", "min", "max"):
            number = getattr(self, name)
            if number is not None and not math.isfinite(number):
                return True
        if self.std is not None and not math.isfinite(self.std) and self.numel > 1:
            return True
        lines = self.lines
        return bool(lines) and any(_NONFINITE_TOKEN.search(line) for line in lines)

    @property
    def has_nan(self) -> bool:
        """True when the stats or the printed values show a NaN (min and max propagate NaN)."""
        if (self.min is not None and math.isnan(self.min)) or (self.max is not None and math.isnan(self.max)):
            return True
        lines = self.lines
        return bool(lines) and any(_NAN_TOKEN.search(line) for line in lines)

    def load(self) -> torch.Tensor:
        """Read the full tensor from its safetensors file (only when the trace has one)."""
        from .files import load_tensor

        if self.ref is None:
            raise TraceFormatError(
                self.base_dir or ".",
                "this tensor has no safetensors file (trace recorded with use_repr=True or a SUMMARY file)",
            )
        return load_tensor(self.path)

    def to_dict(self) -> dict[str, Any]:
        """The tensor record exactly as the file format writes it."""
        out: dict[str, Any] = {"shape": f"torch.Size({list(self.shape)})", "dtype": self.dtype}
        if self._has_value:
            out["value"] = self.value
        for name in STAT_NAMES:
            if name in self.stats:
                out[name] = self.stats[name]
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorValue):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        stats = "" if self.mean is None else f" mean={self.mean:.4g} std={self.std:.4g}"
        return f"TensorValue({list(self.shape)}, {self.dtype.replace('torch.', '')}{stats})"


class Node:
    """One module call: its path, place in the tree, inputs, outputs and error.

    ``inputs``/``outputs`` keep the nesting of the format (dicts and lists) with
    TensorValue leaves and strings for everything else; ``outputs`` is None when
    the format prunes them (a node with children). ``duration`` (seconds) exists
    only on traces just recorded.
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
        "_keys",
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
        self._keys: tuple[str, ...] = ("module_path",)

    @property
    def name(self) -> str:
        """The last component of the module path (the class name for the root)."""
        return self.module_path.rsplit(".", 1)[-1] if self.parent is not None else self.module_path

    @property
    def layer(self) -> int | None:
        """The layer this call belongs to: the outermost ``.N`` of its path (see ``layer_number``)."""
        return layer_number(self.module_path)

    def tensors(self) -> list[tuple[str, str, TensorValue]]:
        """Every recorded tensor of this call as ``(io, arg, TensorValue)``.

        ``io`` is ``"input"`` or ``"output"``; ``arg`` names the place:
        ``args.0``, ``kwargs.attention_mask``, ``out``, ``out.1``, ``out.logits``.
        """
        found: list[tuple[str, str, TensorValue]] = []
        if self.inputs is not None:
            _collect(self.inputs, "", "input", found)
        if self.outputs is not None:
            _collect(self.outputs, "out", "output", found)
        return found

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

    def walk(self) -> Iterator[Node]:
        """This node and every descendant, in call order."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    @property
    def is_layer_block(self) -> bool:
        """True for one block of a layer stack, as the format's pruning sees it (``prune.is_layer_block_call``)."""
        return bool(self.children) and is_layer_block_call(self.module_path, (c.module_path for c in self.children))

    def pruned_layers(self) -> list[tuple[int, str, int, int]]:
        """Gaps left among this node's layer blocks by layer pruning.

        Each gap is ``(position, prefix, first, last)``: layers ``prefix.first`` to
        ``prefix.last`` were removed and would sit before ``children[position]``.
        """
        gaps = []
        previous: tuple[str, int] | None = None
        for position, child in enumerate(self.children):
            if not child.is_layer_block:
                continue
            prefix, number = split_layer_path(child.module_path)  # type: ignore[misc]
            if previous is not None and previous[0] == prefix and number > previous[1] + 1:
                gaps.append((position, prefix, previous[1] + 1, number - 1))
            previous = (prefix, number)
        return gaps

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


def _collect(value: Any, place: str, io: str, found: list) -> None:
    if isinstance(value, TensorValue):
        found.append((io, place, value))
    elif isinstance(value, dict):
        for key, item in value.items():
            _collect(item, f"{place}.{key}" if place else str(key), io, found)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _collect(item, f"{place}.{i}" if place else str(i), io, found)


def _plain(value: Any) -> Any:
    if isinstance(value, TensorValue):
        return value.to_dict()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


class Trace:
    """A recorded or loaded forward pass: the call tree and how to reach its files.

    ``kind`` is ``"full"`` (values present) or ``"summary"``; ``source`` is the
    JSON file it came from or was written to; ``base_dir`` is where safetensors
    references resolve.
    """

    def __init__(self, root: Node, *, kind: str = "full", source: Path | None = None, base_dir: Path | None = None):
        self.root = root
        self.kind = kind
        self.source = Path(source) if source is not None else None
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self._nodes: list[Node] | None = None

    # -- construction ---------------------------------------------------------
    @classmethod
    def from_tree(
        cls,
        tree: dict[str, Any],
        *,
        kind: str = "full",
        source: Path | str | None = None,
        base_dir: Path | str | None = None,
    ) -> Trace:
        """Build a Trace from the JSON tree of the format; malformed input raises TraceFormatError."""
        where = source if source is not None else "<trace tree>"
        base = Path(base_dir) if base_dir is not None else None
        builder = _Builder(where, base)
        root = builder.node(tree, "root", None)
        trace = cls(root, kind=kind, source=Path(source) if source is not None else None, base_dir=base)
        trace._nodes = builder.order
        return trace

    # -- access ---------------------------------------------------------------
    @property
    def model_name(self) -> str:
        """The class name of the traced model (the root's module path)."""
        return self.root.module_path

    def nodes(self) -> list[Node]:
        """Every module call, in call order (the root first)."""
        if self._nodes is None:
            self._nodes = list(self.root.walk())
            for i, node in enumerate(self._nodes):
                node.index = i
        return self._nodes

    def __len__(self) -> int:
        return len(self.nodes())

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes())

    def find(self, pattern: str) -> list[Node]:
        """Calls whose module path matches ``pattern`` (a regular expression, searched)."""
        regex = re.compile(pattern)
        return [node for node in self.nodes() if regex.search(node.module_path)]

    def get(self, module_path: str, call: int = 0) -> Node | None:
        """The ``call``-th call (0-based) of ``module_path``, or None."""
        for node in self.nodes():
            if node.module_path == module_path and node.call_index == call:
                return node
        return None

    def __getitem__(self, module_path: str) -> Node:
        node = self.get(module_path)
        if node is None:
            raise KeyError(f"no module call {module_path!r} in this trace of {self.model_name}")
        return node

    def first_nonfinite(self) -> Node | None:
        """The first call (in call order) that produced a NaN or inf or was handed a NaN, or None."""
        for node in self.nodes():
            if node.nonfinite:
                return node
        return None

    def errors(self) -> list[Node]:
        """Calls that raised, innermost last."""
        return [node for node in self.nodes() if node.error is not None]

    def to_dict(self) -> dict[str, Any]:
        """The whole tree exactly as its file holds it."""
        return self.root.to_dict()

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per recorded tensor; see ``nbtrace.to_dataframe``."""
        from .frame import to_dataframe

        return to_dataframe(self)

    def _repr_html_(self) -> str:
        from .html import trace_html

        return trace_html(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return self.kind == other.kind and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = f" from {self.source}" if self.source else ""
        return f"<Trace {self.model_name}: {len(self)} calls, {self.kind.upper()}{where}>"


class _Malformed(Exception):
    """A problem found while building; the place is collected while it unwinds."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.place: list[str] = []


class _Builder:
    """Turns a JSON tree into Nodes, checking its shape and naming any problem.

    The fast path builds no location strings: a problem raises ``_Malformed``,
    which collects where it happened as it unwinds.
    """

    def __init__(self, where: object, base_dir: Path | None) -> None:
        self.where = where
        self.base_dir = base_dir
        self.order: list[Node] = []
        self.calls: dict[str, int] = {}
        self.shapes: dict[str, tuple[int, ...]] = {}

    def node(self, tree: Any, place: str, parent: Node | None) -> Node:
        # Iterative pre-order walk: very deep trees must not hit Python's recursion limit.
        root: Node | None = None
        pending: list[tuple[Any, str, Node | None]] = [(tree, place, parent)]
        while pending:
            raw, where, up = pending.pop()
            try:
                node = self._one(raw, up)
                children = raw.get("children", [])
                if not isinstance(children, list):
                    raise _Malformed("'children' must be a list")
            except _Malformed as bad:
                raise TraceFormatError(self.where, f"{bad.problem} (at {where}{''.join(reversed(bad.place))})") from None
            if root is None:
                root = node
            pending.extend(
                (child, f"{where}.children[{i}]", node) for i, child in reversed(list(enumerate(children)))
            )
        assert root is not None
        return root

    def _one(self, raw: Any, parent: Node | None) -> Node:
        if not isinstance(raw, dict):
            raise _Malformed(f"a call must be a JSON object, found {type(raw).__name__}")
        path = raw.get("module_path")
        if not isinstance(path, str):
            raise _Malformed("a call needs a string 'module_path'")
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
                    setattr(node, key, self.value(raw[key]))
                except _Malformed as bad:
                    bad.place.append(f".{key}")
                    raise
        if "error" in raw:
            error = raw["error"]
            if not isinstance(error, dict):
                raise _Malformed("'error' must be an object with 'type' and 'message'")
            node.error = {str(k): str(v) for k, v in error.items()}
        if parent is not None:
            parent.children.append(node)
        self.order.append(node)
        return node

    def value(self, raw: Any) -> Any:
        if isinstance(raw, str) or raw is None:
            return raw
        if isinstance(raw, dict):
            if is_tensor_record(raw):
                return self.tensor(raw)
            out = {}
            for key, item in raw.items():
                try:
                    out[key] = self.value(item)
                except _Malformed as bad:
                    bad.place.append(f".{key}")
                    raise
            return out
        if isinstance(raw, list):
            items = []
            for i, item in enumerate(raw):
                try:
                    items.append(self.value(item))
                except _Malformed as bad:
                    bad.place.append(f"[{i}]")
                    raise
            return items
        raise _Malformed(f"unexpected {type(raw).__name__} value {raw!r}")

    def tensor(self, raw: dict[str, Any]) -> TensorValue:
        text = raw["shape"]
        shape = self.shapes.get(text)
        if shape is None:
            match = _SHAPE.match(text)
            dims = match.group(1).strip() if match else "x"
            try:
                shape = tuple(int(d) for d in dims.split(",")) if dims else ()
            except ValueError:
                raise _Malformed(f"bad tensor shape {text!r}") from None
            self.shapes[text] = shape
        value = raw.get("value")
        if value is not None and not isinstance(value, str):
            if not isinstance(value, list) or not set(map(type, value)) <= {str}:
                raise _Malformed("a tensor 'value' must be a list of lines or a file reference")
        stats = {}
        for name in STAT_NAMES:
            if name in raw:
                if not isinstance(raw[name], str):
                    raise _Malformed(f"tensor stat {name!r} must be a string")
                stats[name] = raw[name]
        return TensorValue(shape, raw["dtype"], value, stats, self.base_dir, has_value="value" in raw)
