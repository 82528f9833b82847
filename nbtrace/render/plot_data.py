"""The numbers ``plot_stats`` draws, as a tidy table (computed apart from drawing, tested on its own)."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, NamedTuple

from ..core.load import load_trace
from ..core.node import Node
from ..core.paths import pattern, split_layer_path, without_root
from ..core.structure import handed_on, outer_layer_blocks
from ..core.tensor import TensorValue
from ..core.trace import Trace
from .table import Columns

if TYPE_CHECKING:  # pragma: no cover
    import pandas

SCHEMA = (
    ("series", "str"),
    ("x", "float"),
    ("label", "str"),
    ("module_path", "str"),
    ("call_index", "Int64"),
    ("layer", "Int64"),
    ("recorded_at", "str"),
    ("arg", "str"),
    ("mean", "float"),
    ("std", "float"),
    ("min", "float"),
    ("max", "float"),
    ("absmax", "float"),
)
COLUMNS = tuple(name for name, _ in SCHEMA)


class Point(NamedTuple):
    """One point of the plot: its series, the call it stands for, and the tensor read (and where)."""

    series: str
    node: Node
    recorded_at: Node
    arg: str
    tensor: TensorValue


def stats_table(trace: Trace | str | os.PathLike, *, where: str | None = None, io: str = "output") -> pandas.DataFrame:
    """One row per point of the plot: which tensor, where it sits on the x axis, its stats.

    Without ``where``: the output of each layer block, one series per layer stack,
    ``x`` the layer number. The format keeps no outputs for calls with children,
    so a block's output is read where it was recorded — the next block's input
    (``nbtrace.core.structure.handed_on``); a block whose output was not recorded
    (the one before layers pruned from the trace) has no point. With ``where`` (a
    regular expression searched in module paths): every matching call's output
    (or first input with ``io="input"``), one series per path pattern (digits as
    ``N``), ``x`` the layer number when it tells the calls apart, else their order.

    Columns: ``series``, ``x`` (float), ``label`` (tick text), ``module_path``,
    ``call_index``, ``layer`` (nullable Int64), ``recorded_at`` (the call whose
    tensor was read), ``arg``, ``mean``, ``std``, ``min``, ``max``, ``absmax``
    (float64, NaN where the format has no stats).
    """
    if io not in ("input", "output"):
        raise ValueError(f"io must be 'input' or 'output', got {io!r}")
    trace = load_trace(trace)
    points = _block_points(trace, io) if where is None else _matching_points(trace, where, io)
    xs, labels = _positions(points)
    rows = Columns(SCHEMA)
    for point, x, label in zip(points, xs, labels):
        tensor = point.tensor
        edges = [abs(v) for v in (tensor.min, tensor.max) if v is not None]
        rows.add(
            series=point.series,
            x=x,
            label=label,
            module_path=point.node.module_path,
            call_index=point.node.call_index,
            layer=point.node.layer,
            recorded_at=point.recorded_at.module_path,
            arg=point.arg,
            mean=tensor.mean,
            std=tensor.std,
            min=tensor.min,
            max=tensor.max,
            absmax=max(edges) if edges else None,
        )
    return rows.frame("nbtrace.plot_stats")


def _block_points(trace: Trace, io: str) -> list[Point]:
    points = []
    for block in outer_layer_blocks(trace):
        found = _tensor_of(block, io)
        if found is not None:
            split = split_layer_path(block.module_path)
            prefix = split[0] if split else block.module_path
            points.append(Point(without_root(prefix), block, *found))
    return points


def _matching_points(trace: Trace, where: str, io: str) -> list[Point]:
    try:
        regex = re.compile(where)
    except re.error as exc:
        raise ValueError(f"where={where!r} is not a valid regular expression: {exc}") from None
    points = []
    for node in trace.nodes():
        if regex.search(node.module_path):
            found = _tensor_of(node, io)
            if found is not None:
                points.append(Point(without_root(pattern(node.module_path)), node, *found))
    return points


def _positions(points: list[Point]) -> tuple[list[float], list[str]]:
    """Each point's x and tick label: its layer when that tells a series' calls apart, else its order."""
    xs: list[float] = [0.0] * len(points)
    labels: list[str] = [""] * len(points)
    by_series: dict[str, list[int]] = {}
    for i, point in enumerate(points):
        by_series.setdefault(point.series, []).append(i)
    for members in by_series.values():
        layers = [points[i].node.layer for i in members]
        by_layer = None not in layers and len(set(layers)) == len(layers)
        for order, i in enumerate(members):
            node = points[i].node
            if by_layer:
                xs[i] = float(layers[order])  # type: ignore[arg-type]
                labels[i] = str(layers[order])
            else:
                xs[i] = float(order)
                labels[i] = without_root(node.module_path) + (f" #{node.call_index + 1}" if node.call_index else "")
    return xs, labels


def _tensor_of(node: Node, io: str) -> tuple[Node, str, TensorValue] | None:
    if io == "output":
        return handed_on(node)
    for kind, arg, tensor in node.tensors():
        if kind == "input" and tensor.mean is not None:
            return node, arg, tensor
    return None


class PrunedRange(NamedTuple):
    """Layers ``first`` … ``last`` of a series that layer pruning removed from the trace."""

    series: str
    first: int
    last: int


def pruned_ranges(trace: Trace | str | os.PathLike) -> list[PrunedRange]:
    """The layer blocks pruning removed from each stack of ``trace``, by series (named as ``stats_table`` does)."""
    trace = load_trace(trace)
    ranges = []
    for node in trace.nodes():
        for gap in node.pruned_layers():
            ranges.append(PrunedRange(without_root(gap.prefix), gap.first, gap.last))
    return ranges


def unrecorded_blocks(trace: Trace | str | os.PathLike) -> list[tuple[str, int]]:
    """``(series, layer)`` of the layer blocks whose output the trace does not hold (the block
    before pruned layers: its output went into a block that was not kept)."""
    trace = load_trace(trace)
    missing = []
    for block in outer_layer_blocks(trace):
        split = split_layer_path(block.module_path)
        if split is not None and handed_on(block) is None:
            missing.append((without_root(split[0]), split[1]))
    return missing
