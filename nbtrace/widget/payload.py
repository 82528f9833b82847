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
from collections import Counter
from collections.abc import Sequence
from typing import Any

from ..trace import Node, TensorValue, Trace

PAYLOAD_VERSION = 1

# Bits of the ``flags`` column.
NONFINITE = 1  # this call recorded a NaN or inf
ERROR = 2  # this call raised
GAP = 4  # a marker row: layers removed by pruning (not a call)
MORE_OUTPUTS = 8  # the call has more than one output tensor (the row shows the first)
# A jump is measured against the same module in the previous layer block (``layers.#.mlp``), else
# against the call's own main input: how a module's output evolves layer by layer, or how much a call
# rescaled what it was given. (Against the previous call in call order, every layer's first norm would
# jump: it follows the small residual update of the previous layer's last projection.)
JUMP_SMALL = 16  # scale jumped >= JUMP_SMALL_FACTOR
JUMP_BIG = 32  # scale jumped >= JUMP_BIG_FACTOR
HAS_NONFINITE_BELOW = 64  # a descendant recorded a NaN or inf
HAS_ERROR_BELOW = 128  # a descendant raised
FIRST_NONFINITE = 256  # the first call, in call order, that recorded a NaN or inf
ABSOLUTE = 512  # ``seg`` is the full module path (it does not extend the parent's path)
JUMP_UP = 1024  # with JUMP_SMALL/JUMP_BIG: the scale grew (else it shrank)

JUMP_SMALL_FACTOR = 10.0
JUMP_BIG_FACTOR = 100.0

# Codes of the ``status`` column (comparisons only).
STATUS_CODES = {"match": 1, "diverged": 2, "first": 3, "only_a": 4, "no_data": 5}


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


def short_number(value: float | None) -> float | str | None:
    """A stat for the payload: 3 significant digits (what a row shows), ``"nan"``/``"inf"``/``"-inf"`` as text."""
    if value is None:
        return None
    if not math.isfinite(value):
        return str(value)
    number = float(f"{value:.3g}")
    return int(number) if number.is_integer() and abs(number) < 1e15 else number


def short_shape(shape: Sequence[int]) -> str:
    """``1×16×64``; ``scalar`` for a 0-d tensor."""
    return "×".join(str(d) for d in shape) if shape else "scalar"


def short_dtype(dtype: str) -> str:
    return dtype.replace("torch.", "")


def _scale(tensor: TensorValue) -> float | None:
    """The tensor's root mean square (from mean and std), the quantity jumps are measured on."""
    if tensor.mean is None or tensor.std is None:
        return None
    if not (math.isfinite(tensor.mean) and math.isfinite(tensor.std)):
        return None
    return math.sqrt(tensor.mean * tensor.mean + tensor.std * tensor.std)


def _role(node: Node) -> str | None:
    """The path with its layer number masked (``Llama.layers.#.mlp``): the same module in every layer."""
    parts = node.module_path.split(".")
    for i in range(1, len(parts)):
        if parts[i].isdigit():
            return ".".join(parts[:i] + ["#"] + parts[i + 1 :])
    return None


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


def _relative(node: Node) -> tuple[str, bool]:
    """The row label and whether it is the full path (when it does not extend the parent's)."""
    if node.parent is None:
        return node.module_path, False
    prefix = node.parent.module_path + "."
    if node.module_path.startswith(prefix):
        return node.module_path[len(prefix) :], False
    return node.module_path, True


def rows_in_order(trace: Trace) -> list[Node | tuple[int, str, int, int]]:
    """Every call in call order, with a ``(depth, prefix, first, last)`` marker where layers were pruned."""
    order: list[Node | tuple[int, str, int, int]] = []
    stack: list[Node | tuple[int, str, int, int]] = [trace.root]
    while stack:
        item = stack.pop()
        order.append(item)
        if isinstance(item, tuple):
            continue
        gaps = {position: (prefix, first, last) for position, prefix, first, last in item.pruned_layers()}
        pending: list[Node | tuple[int, str, int, int]] = []
        for position, child in enumerate(item.children):
            if position in gaps:
                prefix, first, last = gaps[position]
                pending.append((item.depth + 1, prefix, first, last))
            pending.append(child)
        stack.extend(reversed(pending))
    return order


def gap_label(prefix: str, first: int, last: int) -> str:
    """``layers 1–30 pruned``"""
    name = prefix.rsplit(".", 1)[-1]
    span = f"{first}" if first == last else f"{first}–{last}"
    return f"{name} {span} pruned"


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
    strings = _Strings()
    totals = Counter(node.module_path for node in nodes)
    order = rows_in_order(trace)

    depth: list[int] = []
    seg: list[int] = []
    flags: list[int] = []
    output: list[int] = []  # "1×16×64 float32" of the first output tensor
    mean: list[float | str | None] = []
    std: list[float | str | None] = []
    calls: list[list[int]] = []  # [row, call index, total calls] for module paths called more than once
    status_column: list[int] = []
    row_nodes: list[Node | None] = []
    node_row: dict[int, int] = {}

    first_nonfinite_row = -1
    error_rows: list[int] = []
    last_of_role: dict[str, TensorValue] = {}  # "Llama.layers.#.mlp" -> the last output of that role

    for row, item in enumerate(order):
        if isinstance(item, tuple):
            level, prefix, first, last = item
            depth.append(level)
            seg.append(strings(gap_label(prefix, first, last)))
            flags.append(GAP)
            output.append(0)
            mean.append(None)
            std.append(None)
            if status is not None:
                status_column.append(0)
            row_nodes.append(None)
            continue
        node = item
        node_row[id(node)] = row
        row_nodes.append(node)
        label, absolute = _relative(node)
        bits = ABSOLUTE if absolute else 0
        outputs = node.output_tensors()
        if node.nonfinite:
            bits |= NONFINITE
            if first_nonfinite_row < 0:
                first_nonfinite_row = row
                bits |= FIRST_NONFINITE
        if node.error is not None:
            bits |= ERROR
            error_rows.append(row)
        if len(outputs) > 1:
            bits |= MORE_OUTPUTS
        if outputs:
            out = outputs[0]
            role = _role(node)
            reference = last_of_role.get(role) if role is not None else None
            if reference is None:
                reference = _main_input(node)
            if reference is not None:
                ratio = _jump(reference, out)
                factor = max(ratio, 1.0 / ratio)
                if factor >= JUMP_BIG_FACTOR:
                    bits |= JUMP_BIG
                elif factor >= JUMP_SMALL_FACTOR:
                    bits |= JUMP_SMALL
                if factor >= JUMP_SMALL_FACTOR and ratio > 1:
                    bits |= JUMP_UP
            if role is not None and (out.mean is not None or out.std is not None):
                last_of_role[role] = out
            output.append(strings(f"{short_shape(out.shape)} {short_dtype(out.dtype)}"))
            mean.append(short_number(out.mean))
            std.append(short_number(out.std))
        else:
            output.append(0)
            mean.append(None)
            std.append(None)
        depth.append(node.depth)
        seg.append(strings(label))
        flags.append(bits)
        if totals[node.module_path] > 1:
            calls.append([row, node.call_index, totals[node.module_path]])
        if status is not None:
            status_column.append(STATUS_CODES.get(status[node.index] or "", 0))

    # "Something below is wrong" bits, children before parents.
    for node in reversed(nodes):
        if node.parent is None:
            continue
        row, up = node_row[id(node)], node_row[id(node.parent)]
        if flags[row] & (NONFINITE | HAS_NONFINITE_BELOW):
            flags[up] |= HAS_NONFINITE_BELOW
        if flags[row] & (ERROR | HAS_ERROR_BELOW):
            flags[up] |= HAS_ERROR_BELOW

    first_row = -1
    if status is not None:
        first_row = next((r for r, code in enumerate(status_column) if code == STATUS_CODES["first"]), -1)

    payload: dict[str, Any] = {
        "version": PAYLOAD_VERSION,
        "model": trace.model_name,
        "kind": trace.kind,
        "source": str(trace.source) if trace.source is not None else "",
        "calls_total": len(nodes),
        "expand_depth": expand_depth,
        "strings": strings.items,
        "depth": depth,
        "seg": seg,
        "flags": flags,
        "output": output,
        "mean": mean,
        "std": std,
        "calls": calls,
        "first_nonfinite": first_nonfinite_row,
        "innermost_error": error_rows[-1] if error_rows else -1,
        "first_divergence": first_row,
    }
    if status is not None:
        payload["status"] = status_column
    return payload, row_nodes
