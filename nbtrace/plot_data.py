"""The numbers ``plot_stats`` draws, as a tidy table (computed apart from drawing, tested on its own)."""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING

from .files import load_trace
from .structure import block_prefix, handed_on, outer_layer_blocks
from .trace import Node, TensorValue, Trace, layer_number

if TYPE_CHECKING:  # pragma: no cover
    import pandas

COLUMNS = (
    "series",
    "x",
    "label",
    "module_path",
    "call_index",
    "layer",
    "recorded_at",
    "arg",
    "mean",
    "std",
    "min",
    "max",
    "absmax",
)
_DIGITS = re.compile(r"(?<=\.)\d+(?=\.|$)")


def stats_table(trace: Trace | str | os.PathLike, *, where: str | None = None, io: str = "output") -> pandas.DataFrame:
    """One row per point of the plot: which tensor, where it sits on the x axis, its stats.

    Without ``where``: the output of each layer block (the format keeps no outputs
    for calls with children, so a block's output is read where it was recorded —
    the next call's input, see ``nbtrace.structure.handed_on``), one series per
    layer stack, ``x`` the layer number. With ``where`` (a regular expression
    searched in module paths): every matching call's output (or first input with
    ``io="input"``), one series per path pattern (digits as ``N``), ``x`` the layer
    number when it tells the calls apart, else their order.

    Columns: ``series``, ``x`` (float), ``label`` (tick text), ``module_path``,
    ``call_index``, ``layer`` (nullable Int64), ``recorded_at`` (the call whose
    tensor was read), ``arg``, ``mean``, ``std``, ``min``, ``max``, ``absmax``
    (float64, NaN where the format has no stats).
    """
    from .frame import require_pandas

    np, pd = require_pandas("nbtrace.plot_stats")
    if io not in ("input", "output"):
        raise ValueError(f"io must be 'input' or 'output', got {io!r}")
    trace = load_trace(trace)
    points: list[tuple[str, Node, Node, str, TensorValue]] = []
    if where is None:
        for block in outer_layer_blocks(trace):
            found = _tensor_of(block, io)
            if found is not None:
                prefix = block_prefix(block) or block.module_path
                points.append((_relative(prefix), block, *found))
    else:
        try:
            regex = re.compile(where)
        except re.error as exc:
            raise ValueError(f"where={where!r} is not a valid regular expression: {exc}") from None
        for node in trace.nodes():
            if regex.search(node.module_path):
                found = _tensor_of(node, io)
                if found is not None:
                    points.append((_DIGITS.sub("N", _relative(node.module_path)), node, *found))
    rows: dict[str, list] = {name: [] for name in COLUMNS}
    by_series: dict[str, list[int]] = {}
    for i, (series, node, recorded_at, arg, tensor) in enumerate(points):
        by_series.setdefault(series, []).append(i)
        rows["series"].append(series)
        rows["module_path"].append(node.module_path)
        rows["call_index"].append(node.call_index)
        rows["layer"].append(layer_number(node.module_path))
        rows["recorded_at"].append(recorded_at.module_path)
        rows["arg"].append(arg)
        for name in ("mean", "std", "min", "max"):
            value = getattr(tensor, name)
            rows[name].append(math.nan if value is None else value)
        edges = [abs(v) for v in (tensor.min, tensor.max) if v is not None]
        rows["absmax"].append(max(edges) if edges else math.nan)
    xs: list[float] = [0.0] * len(points)
    labels: list[str] = [""] * len(points)
    for members in by_series.values():
        layers = [rows["layer"][i] for i in members]
        by_layer = None not in layers and len(set(layers)) == len(layers)
        for order, i in enumerate(members):
            node = points[i][1]
            if by_layer:
                xs[i] = float(layers[order])
                labels[i] = str(layers[order])
            else:
                xs[i] = float(order)
                labels[i] = _relative(node.module_path) + (f" #{node.call_index + 1}" if node.call_index else "")
    rows["x"] = xs
    rows["label"] = labels
    data = {}
    for name in COLUMNS:
        if name in ("mean", "std", "min", "max", "absmax", "x"):
            data[name] = np.asarray(rows[name], dtype=np.float64)
        elif name in ("layer", "call_index"):
            data[name] = pd.array(rows[name], dtype="Int64")
        else:
            data[name] = rows[name]
    return pd.DataFrame(data, columns=list(COLUMNS))


def _tensor_of(node: Node, io: str) -> tuple[Node, str, TensorValue] | None:
    if io == "output":
        return handed_on(node)
    for kind, arg, tensor in node.tensors():
        if kind == "input" and tensor.mean is not None:
            return node, arg, tensor
    return None


def _relative(path: str) -> str:
    """The path without the root class name (``model.layers`` for ``Llama.model.layers``)."""
    return path.split(".", 1)[1] if "." in path else path


def pruned_ranges(table: pandas.DataFrame) -> list[tuple[str, float, float]]:
    """``(series, after_x, before_x)`` for each jump of more than one layer within a layer-numbered series."""
    gaps = []
    for series, part in table.groupby("series", sort=False):
        if part["layer"].isna().any():
            continue
        xs = sorted(part["x"].tolist())
        if len(set(xs)) != len(xs) or xs != part["x"].tolist():
            continue
        for left, right in zip(xs, xs[1:]):
            if right - left > 1:
                gaps.append((str(series), left, right))
    return gaps
