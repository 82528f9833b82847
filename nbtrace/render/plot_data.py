"""What ``plot_stats`` draws, computed apart from drawing and tested on its own: the numbers as a tidy
table (``stats_table``), the facts about pruning, and the whole figure as data (``plan_plot``)."""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, NamedTuple

from ..core.load import load_trace
from ..core.node import Node
from ..core.paths import pattern, split_layer_path, without_root
from ..core.structure import handed_on, outer_layer_blocks
from ..core.tensor import TensorValue
from ..core.trace import Trace
from .stats_difference import DifferenceLine, difference_line
from .table import Columns
from .vocabulary import gap_label, read_at_words

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
    A matching call with children (not a layer block) is read at its last inner
    call's output (``recorded_at`` says which; the plot's words too).

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
            found = _tensor_of(node, io) if io == "input" or node.is_layer_block else _own_output(node)
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


def _own_output(node: Node) -> tuple[Node, str, TensorValue] | None:
    """A call's output where the format keeps one; for a call with children (the format drops their outputs)
    the output of its last call: what it returns unless its own code works on it after that call. Never the
    next call's input, which is its output only between layer blocks (a residual add may sit between)."""
    for holder in (node, node.last_leaf()):
        for kind, arg, tensor in holder.tensors():
            if kind == "output" and tensor.mean is not None:
                return holder, arg, tensor
    return None


def read_inside(table: pandas.DataFrame) -> str | None:
    """The inner call (relative, numbers masked: ``c_proj``) every point of ``table`` was read at, or None."""
    if table.empty:
        return None
    inner = {
        pattern(at[len(path) + 1:]) if at.startswith(path + ".") else None
        for path, at in zip(table["module_path"], table["recorded_at"])
    }
    return inner.pop() if len(inner) == 1 and None not in inner else None


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


# -- the whole figure, computed: what plot_stats draws, decided apart from drawing it ------------------
STATS = ("mean", "std", "min", "max", "absmax")
SPAN_FOR_LOG = 1e3  # magnitudes spanning more than this factor: a log y scale


class Line(NamedTuple):
    """One series of one trace as it is drawn."""

    label: str  # legend text
    colour: str
    marker: str
    dashed: bool  # the compared trace
    x: list[float]
    y: list[float]  # the statistic (the mean for "mean")
    band: list[float] | None  # the std around the mean (stat "mean"), else None
    bounds: list[tuple[str, str, list[float]]]  # ("min" or "max", legend text, values) with minmax=True
    absmax: list[float]  # the largest |value| at each point (for the y scale)
    runs: list[tuple[int, int]]  # [start, stop) of consecutive layers; several: pruned layers lie between


class PlotPlan(NamedTuple):
    """Everything ``plot_stats`` draws: lines, what pruning removed, scale and words."""

    lines: list[Line]
    pruned: list[tuple[str, int, int]]  # (words, first, last): layers pruning removed
    unrecorded: list[tuple[str, int]]  # (words, layer): layers whose output the trace does not hold
    scale: str  # "linear", "log" or "symlog"
    linthresh: float | None  # symlog's linear region
    title: str
    xlabel: str
    ylabel: str
    ticks: list[tuple[float, str]] | None  # named x ticks (calls in call order)
    integer_x: bool  # the x axis counts layers: integer ticks
    difference: DifferenceLine | None = None  # with ``compare``: how far apart the two traces' stats are


def plan_plot(
    data: Trace | str | os.PathLike,
    *,
    stat: str = "mean",
    compare: Trace | str | os.PathLike | None = None,
    where: str | None = None,
    compare_where: str | None = None,
    io: str = "output",
    minmax: bool = False,
    log: bool | None = None,
    label: str | None = None,
    compare_label: str | None = None,
    title: str | None = None,
) -> PlotPlan:
    """What ``plot_stats`` with these arguments draws, as data (its arguments, same meaning)."""
    if stat not in STATS:
        raise ValueError(f"stat must be one of {', '.join(STATS)}; got {stat!r}")
    traces = [load_trace(data)] + ([load_trace(compare)] if compare is not None else [])
    tables = [stats_table(traces[0], where=where, io=io)]
    if compare is not None:
        tables.append(stats_table(traces[1], where=compare_where or where, io=io))
    names = _legend_names(traces, [label, compare_label])
    lines = _lines(tables, names, stat, minmax)
    pruned: dict[tuple[int, int, str], list[str]] = {}
    unrecorded: dict[int, list[str]] = {}
    if where is None:  # which trace lacks them, when there are two
        for trace, name in zip(traces, names):
            for gap in pruned_ranges(trace):
                pruned.setdefault((gap.first, gap.last, gap.series), []).append(name)
            for _, layer in unrecorded_blocks(trace):
                unrecorded.setdefault(layer, []).append(name)
    whose = (lambda who: f" in {' and '.join(who)}") if len(traces) > 1 else (lambda who: "")
    scale, linthresh = _scale(lines, log)
    by_layer = not tables[0].empty and _by_layer(tables[0])
    xlabel = "layer" if by_layer or where is None else "call (in call order)"
    if pruned:
        xlabel += "\n(pruned trace: do_prune_layers=False keeps every layer)"
    return PlotPlan(
        lines=lines,
        pruned=[
            (gap_label(series, first, last) + whose(who), first, last)
            for (first, last, series), who in sorted(pruned.items())
        ],
        unrecorded=[
            (f"layer {layer}: output not recorded{whose(who)}", layer) for layer, who in sorted(unrecorded.items())
        ],
        scale=scale,
        linthresh=linthresh,
        title=title if title is not None else _title(traces[0], tables[0], stat, where, io),
        xlabel=xlabel,
        ylabel="activation value" if stat in ("mean", "min", "max") else f"activation {stat}",
        ticks=None if by_layer or tables[0].empty else _ticks(tables[0]),
        integer_x=by_layer,
        difference=difference_line(traces[0], traces[1], tables[0]) if len(tables) > 1 else None,
    )


def _legend_names(traces: list[Trace], given: list[str | None]) -> list[str]:
    names = [g if g is not None else t.model_name for t, g in zip(traces, given)]
    if len(names) == 2 and names[0] == names[1]:
        names = [f"{names[0]} (a)", f"{names[1]} (b)"]
    return names


def _lines(tables: list[pandas.DataFrame], names: list[str], stat: str, minmax: bool) -> list[Line]:
    """One Line per series of each trace: a colour per trace, or per series when a trace has several
    (the traces then told apart by line style)."""
    several = any(table["series"].nunique() > 1 for table in tables)
    series_names = list(dict.fromkeys(s for table in tables for s in table["series"]))
    lines = []
    for number, (table, name) in enumerate(zip(tables, names)):
        for index, (series, part) in enumerate(table.groupby("series", sort=False)):
            part = part.sort_values("x")
            x = part["x"].tolist()
            text = f"{name}: {series}" if table["series"].nunique() > 1 else name
            inner = read_inside(part)
            text += f" ({read_at_words(inner)})" if inner is not None else ""
            colour = f"C{series_names.index(series) % 10}" if several else f"C{number}"
            contiguous = not part["layer"].isna().any()
            lines.append(Line(
                label=f"{text} mean ± std" if stat == "mean" else f"{text} {stat}",
                colour=colour,
                marker="os^vD"[index % 5],
                dashed=number > 0,
                x=x,
                y=part[stat].tolist(),
                band=part["std"].tolist() if stat == "mean" else None,
                bounds=[(bound, f"{text} {bound}", part[bound].tolist()) for bound in ("min", "max")] if minmax else [],
                absmax=part["absmax"].tolist(),
                runs=_runs(x) if contiguous else [(0, len(x))],
            ))
    return lines


def _runs(x: list[float]) -> list[tuple[int, int]]:
    """Index ranges of consecutive layers (split where layers were pruned)."""
    runs, start = [], 0
    for i in range(1, len(x)):
        if x[i] - x[i - 1] > 1:
            runs.append((start, i))
            start = i
    runs.append((start, len(x)))
    return runs


def _scale(lines: list[Line], log: bool | None) -> tuple[str, float | None]:
    """Log y scale when the activations' magnitudes (std, largest |value|) span orders of magnitude.

    Means near zero do not count: a mean crossing zero is not a reason for a log scale.
    """
    values: list[float] = []
    scales: list[float] = []
    for line in lines:
        values.extend(line.y)
        if line.band is not None:
            values.extend([y - s for y, s in zip(line.y, line.band)] + [y + s for y, s in zip(line.y, line.band)])
            scales.extend(line.band)
        else:
            scales.extend(abs(v) for v in line.y)
        scales.extend(line.absmax)
        for _, _, bound in line.bounds:
            values.extend(bound)
    values = [v for v in values if math.isfinite(v)]
    scales = [v for v in scales if math.isfinite(v) and v > 0]
    if not values or not scales:
        return "linear", None
    if log is None:
        log = max(scales) / min(scales) > SPAN_FOR_LOG
    if not log:
        return "linear", None
    if min(values) > 0:
        return "log", None
    return "symlog", 10 ** math.floor(math.log10(min(scales)))


def _by_layer(table: pandas.DataFrame) -> bool:
    return not table["layer"].isna().any() and bool((table["x"] == table["layer"].astype(float)).all())


def _ticks(table: pandas.DataFrame) -> list[tuple[float, str]] | None:
    ticks = table.drop_duplicates("x").sort_values("x")
    if len(ticks) > 24:
        return None
    return list(zip(ticks["x"].tolist(), ticks["label"].tolist()))


def _title(trace: Trace, table: pandas.DataFrame, stat: str, where: str | None, io: str) -> str:
    what = "mean ± std" if stat == "mean" else stat
    if where is None:
        title = f"{trace.model_name}: {what} of each layer block's {io}"
    else:
        series = table["series"].unique().tolist() if not table.empty else []
        subject = series[0] if len(series) == 1 else f"calls matching {where}"
        inner = read_inside(table) if io == "output" else None
        title = f"{trace.model_name}: {what} of {subject} ({io}s" + (f", {read_at_words(inner)})" if inner else ")")
    if len(title) > 60:  # a long module pattern: two lines rather than a clipped title
        head, _, tail = title.partition(": ")
        title = f"{head}:\n{tail}" if tail else title
    return title
