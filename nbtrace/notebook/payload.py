"""Trace -> the compact, columnar rows payload the TraceView front end draws.

A plain function of a Trace (and, for a comparison, a status per node): no
widget, no torch. One row per module call in call order, plus one marker row
where layer pruning removed blocks. Columns are flat lists of small numbers
that index a shared string table, so a 20,000-call trace stays a few hundred
kilobytes; everything bulky (value lines, every input, min/max) is left to
``node_detail``, which the widget sends only when a row is selected.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..core.dtypes import short_dtype
from ..core.node import Node
from ..core.paths import role, without_root
from ..core.tensor import TensorValue
from ..core.trace import Trace
from ..diff.verdict.report import STATUSES
from ..render.tree_rows import rows_in_order
from ..render.vocabulary import (
    JUMP_BIG_FACTOR,
    JUMP_SMALL_FACTOR,
    gap_label,
    jump_tooltip,
    round_number,
    short_shape,
    widget_vocabulary,
)

PAYLOAD_VERSION = 1

# Bits of the ``flags`` column.
NONFINITE = 1  # this call recorded a NaN or inf
ERROR = 2  # this call raised
GAP = 4  # a marker row: layers removed by pruning (not a call)
MORE_OUTPUTS = 8  # the call has more than one output tensor (the row shows the first)
# A jump is measured against the same module in the previous layer block (``layers.#.mlp``), else
# against the call's own main input: how a module's output evolves layer by layer, or how much a call
# rescaled what it was given. (Against the previous call in call order, every layer's first norm would
# jump: it follows the small residual update of the previous layer's last projection.) Against its own
# input only when the output has the input's shape and the call is not a norm: a norm rescales on
# purpose, and an output of another shape (rotary cos/sin, logits of ids) has nothing to keep.
JUMP_SMALL = 16  # scale jumped >= JUMP_SMALL_FACTOR
JUMP_BIG = 32  # scale jumped >= JUMP_BIG_FACTOR
HAS_NONFINITE_BELOW = 64  # a descendant recorded a NaN or inf
HAS_ERROR_BELOW = 128  # a descendant raised
FIRST_NONFINITE = 256  # the first call, in call order, that recorded a NaN or inf
ABSOLUTE = 512  # ``seg`` is the full module path (it does not extend the parent's path)
JUMP_UP = 1024  # with JUMP_SMALL/JUMP_BIG: the scale grew (else it shrank)

#: names of normalization modules (the last path component), which rescale by design
NORM_NAME = re.compile(r"norm|^ln(_|\d|$)", re.IGNORECASE)

# Codes of the ``status`` column (comparisons only).
STATUS_CODES = {name: code for code, name in enumerate(STATUSES, 1)}


class _Strings:
    """A string table: each distinct string is sent once, rows refer to it by index."""

    def __init__(self) -> None:
        self.items: list[str] = [""]
        self._index: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = len(self.items)
            self.items.append(text)
        return found


def _scale(tensor: TensorValue) -> float | None:
    """The tensor's root mean square (from mean and std), the quantity jumps are measured on."""
    if tensor.mean is None or tensor.std is None:
        return None
    if not (math.isfinite(tensor.mean) and math.isfinite(tensor.std)):
        return None
    return math.sqrt(tensor.mean * tensor.mean + tensor.std * tensor.std)


def _main_input(node: Node) -> TensorValue | None:
    """The call's first input tensor that has stats: what the module turned into its output."""
    for tensor in node.input_tensors():
        if tensor.mean is not None and tensor.std is not None:
            return tensor
    return None


def _jump(previous: TensorValue, current: TensorValue) -> float:
    """The change of scale from ``previous`` to ``current``: the ratio (std or rms) furthest from 1."""
    worst = 1.0
    pairs = ((previous.std, current.std), (_scale(previous), _scale(current)))
    for before, after in pairs:
        if before is None or after is None or not (math.isfinite(before) and math.isfinite(after)):
            continue
        tiny = 1e-12
        if before <= tiny and after <= tiny:
            continue
        ratio = max(after, tiny) / max(before, tiny)
        if max(ratio, 1.0 / ratio) > max(worst, 1.0 / worst):
            worst = ratio
    return worst


def _jump_bits(
    node: Node, out: TensorValue, last_of_role: dict[str, tuple[TensorValue, Node]]
) -> tuple[int, str | None]:
    """The JUMP_* bits of a call whose first output is ``out`` and the words of its tooltip
    (see the note on JUMP_SMALL)."""
    where = role(node.module_path)
    found = last_of_role.get(where) if where is not None else None
    reference, against = (found[0], found[1]) if found is not None else (None, None)
    if reference is None:
        given = _main_input(node)
        if given is not None and tuple(given.shape) == tuple(out.shape) and not NORM_NAME.search(node.name or ""):
            reference = given
    if where is not None and (out.mean is not None or out.std is not None):
        last_of_role[where] = (out, node)
    if reference is None:
        return 0, None
    ratio = _jump(reference, out)
    factor = max(ratio, 1.0 / ratio)
    bits = JUMP_BIG if factor >= JUMP_BIG_FACTOR else JUMP_SMALL if factor >= JUMP_SMALL_FACTOR else 0
    if not bits:
        return 0, None
    if ratio > 1:
        bits |= JUMP_UP
    return bits, jump_tooltip(ratio > 1, factor, without_root(against.module_path) if against is not None else None)


class _Columns:
    """The payload's columns, filled one row at a time."""

    def __init__(self, with_status: bool) -> None:
        self.strings = _Strings()
        self.depth: list[int] = []
        self.seg: list[int] = []
        self.flags: list[int] = []
        self.output: list[int] = []  # "1×16×64 float32" of the first output tensor
        self.mean: list[float | str | None] = []
        self.std: list[float | str | None] = []
        self.calls: list[list[int]] = []  # [row, call index, total calls] for paths called more than once
        self.status: list[int] | None = [] if with_status else None

    def add(self, depth: int, label: str, flags: int, out: TensorValue | None, status: str | None) -> None:
        self.depth.append(depth)
        self.seg.append(self.strings(label))
        self.flags.append(flags)
        if out is None:
            self.output.append(0)
            self.mean.append(None)
            self.std.append(None)
        else:
            self.output.append(self.strings(f"{short_shape(out.shape)} {short_dtype(out.dtype)}"))
            self.mean.append(round_number(out.mean))
            self.std.append(round_number(out.std))
        if self.status is not None:
            self.status.append(STATUS_CODES.get(status or "", 0))


def _node_flags(node: Node, outputs: list[TensorValue]) -> int:
    bits = 0 if node.parent is None or node.extends_parent else ABSOLUTE
    if node.nonfinite:
        bits |= NONFINITE
    if node.error is not None:
        bits |= ERROR
    if len(outputs) > 1:
        bits |= MORE_OUTPUTS
    return bits


def _mark_below(nodes: list[Node], node_row: dict[int, int], flags: list[int]) -> None:
    """Set the "something below is wrong" bits, children before parents."""
    for node in reversed(nodes):
        if node.parent is None:
            continue
        row, up = node_row[id(node)], node_row[id(node.parent)]
        if flags[row] & (NONFINITE | HAS_NONFINITE_BELOW):
            flags[up] |= HAS_NONFINITE_BELOW
        if flags[row] & (ERROR | HAS_ERROR_BELOW):
            flags[up] |= HAS_ERROR_BELOW


def tree_payload(
    trace: Trace, status: Sequence[str | None] | None = None, expand_depth: int = 2
) -> tuple[dict[str, Any], list[Node | None]]:
    """The columnar payload for ``trace`` and, per row, the Node it shows (None for a marker row).

    ``status`` (optional) is one comparison status per node of ``trace.nodes()``;
    ``expand_depth`` is how many levels the tree opens with.
    """
    nodes = trace.nodes()
    if status is not None and len(status) != len(nodes):
        raise ValueError(f"status has {len(status)} entries but the trace has {len(nodes)} calls")
    columns = _Columns(status is not None)
    totals = Counter(node.module_path for node in nodes)
    row_nodes: list[Node | None] = []
    node_row: dict[int, int] = {}
    first_nonfinite_row = -1
    error_rows: list[int] = []
    last_of_role: dict[str, tuple[TensorValue, Node]] = {}  # "Llama.layers.#.mlp" -> its last output, and call
    jumps: list[list[Any]] = []  # [row, tooltip] of the rows with a jump of scale

    for row, item in enumerate(rows_in_order(trace)):
        if isinstance(item, tuple):
            level, prefix, first, last = item
            columns.add(level, gap_label(prefix, first, last), GAP, None, None)
            row_nodes.append(None)
            continue
        node = item
        node_row[id(node)] = row
        row_nodes.append(node)
        outputs = node.output_tensors()
        bits = _node_flags(node, outputs)
        if bits & NONFINITE and first_nonfinite_row < 0:
            first_nonfinite_row = row
            bits |= FIRST_NONFINITE
        if bits & ERROR:
            error_rows.append(row)
        if outputs:
            jump, words = _jump_bits(node, outputs[0], last_of_role)
            bits |= jump
            if words:
                jumps.append([row, words])
        columns.add(node.depth, node.label, bits, outputs[0] if outputs else None,
                    status[node.index] if status is not None else None)
        if totals[node.module_path] > 1:
            columns.calls.append([row, node.call_index, totals[node.module_path]])
    _mark_below(nodes, node_row, columns.flags)

    first_row = -1
    if columns.status is not None:
        first_row = next((r for r, code in enumerate(columns.status) if code == STATUS_CODES["first"]), -1)
        if first_row < 0:  # where an unresolved verdict stopped: the innermost call marked so, opened to
            marked = [r for r, code in enumerate(columns.status) if code == STATUS_CODES["unresolved"]]
            first_row = marked[-1] if marked else -1
    payload: dict[str, Any] = {
        "version": PAYLOAD_VERSION,
        "model": trace.model_name,
        "kind": trace.kind,
        "source": str(trace.source) if trace.source is not None else "",
        "calls_total": len(nodes),
        "expand_depth": expand_depth,
        "vocabulary": widget_vocabulary(),
        "strings": columns.strings.items,
        "depth": columns.depth,
        "seg": columns.seg,
        "flags": columns.flags,
        "output": columns.output,
        "mean": columns.mean,
        "std": columns.std,
        "calls": columns.calls,
        "jumps": jumps,
        "first_nonfinite": first_nonfinite_row,
        "innermost_error": error_rows[-1] if error_rows else -1,
        "first_divergence": first_row,
    }
    if columns.status is not None:
        payload["status"] = columns.status
    return payload, row_nodes
