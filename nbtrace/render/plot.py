"""Activation statistics across layers (or calls) as a matplotlib plot."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from ..core.load import load_trace
from ..core.trace import Trace
from .plot_data import pruned_ranges, stats_table, unrecorded_blocks

if TYPE_CHECKING:  # pragma: no cover
    import pandas
    from matplotlib.axes import Axes

STATS = ("mean", "std", "min", "max", "absmax")
_SPAN_FOR_LOG = 1e3  # values spanning more than this many times: log scale


def plot_stats(
    data: Trace | str | os.PathLike,
    *,
    stat: str = "mean",
    ax: Axes | None = None,
    compare: Trace | str | os.PathLike | None = None,
    where: str | None = None,
    compare_where: str | None = None,
    io: str = "output",
    minmax: bool = False,
    log: bool | None = None,
    label: str | None = None,
    compare_label: str | None = None,
    title: str | None = None,
) -> Axes:
    """Plot how a statistic of the activations evolves through a model; returns the Axes.

    By default the output of each layer block across the layer index; with
    ``where`` (a regex on module paths) every matching call's output (``io="input"``:
    its first input) across layers or call order. ``stat="mean"`` draws the mean
    with a ±std band; ``"std"``, ``"min"``, ``"max"``, ``"absmax"`` draw that statistic
    alone. ``minmax=True`` adds min and max as thin dashed lines. ``compare`` overlays
    a second trace (``compare_where`` selects its calls, default ``where``), with
    a legend. ``log=None`` picks a log (or symmetric log, when values change sign)
    y scale when the values span more than three orders of magnitude. Draws into
    ``ax`` (default: the current Axes, as seaborn does); never calls ``plt.show()``.
    """
    if stat not in STATS:
        raise ValueError(f"stat must be one of {', '.join(STATS)}; got {stat!r}")
    first = load_trace(data)
    second = load_trace(compare) if compare is not None else None
    tables = [(first, stats_table(first, where=where, io=io), label)]
    if second is not None:
        tables.append((second, stats_table(second, where=compare_where or where, io=io), compare_label))
    if ax is None:
        try:
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("nbtrace.plot_stats needs matplotlib: pip install 'nbtrace[notebook]'") from None

        ax = plt.gca()
    names = _legend_names([trace for trace, _, _ in tables], [given for _, _, given in tables])
    drawn: list[float] = []
    scales: list[float] = []
    gaps: set[tuple[int, int]] = set()
    unrecorded: set[int] = set()
    # one series per trace: a colour per trace; several: a colour per series, the traces told apart by line style
    several = any(table["series"].nunique() > 1 for _, table, _ in tables)
    series_names = list(dict.fromkeys(s for _, table, _ in tables for s in table["series"]))
    by_series = {s: f"C{i % 10}" for i, s in enumerate(series_names)} if several else None
    colours = _colours(len(tables))
    for (trace, table, _), name, colour in zip(tables, names, colours):
        if table.empty:
            continue
        palette = by_series or {s: colour for s in table["series"]}
        found = _draw(ax, table, name, palette, stat, minmax, dashed=len(tables) > 1 and trace is second)
        drawn.extend(found["values"])
        scales.extend(found["scales"])
        if where is None:
            gaps.update((r.first, r.last) for r in pruned_ranges(trace))
            unrecorded.update(layer for _, layer in unrecorded_blocks(trace))
    _mark_gaps(ax, sorted(gaps), sorted(unrecorded))
    if not drawn:
        ax.text(0.5, 0.5, "no statistics to plot", ha="center", va="center", transform=ax.transAxes)
    _scale(ax, drawn, scales, log)
    _labels(ax, first, tables[0][1], stat, where, io, title)
    if len(tables) > 1 or ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    return ax


def _legend_names(traces: list[Trace], given: list[str | None]) -> list[str]:
    names = [g if g is not None else t.model_name for t, g in zip(traces, given)]
    if len(names) == 2 and names[0] == names[1]:
        names = [f"{names[0]} (a)", f"{names[1]} (b)"]
    return names


def _colours(count: int) -> list[str]:
    return [f"C{i}" for i in range(count)]


def _draw(
    ax: Axes, table: pandas.DataFrame, name: str, palette: dict, stat: str, minmax: bool, dashed: bool
) -> dict:
    """Draw one trace's series; returns the plotted values: ``{"values": [...], "scales": [...]}``."""
    values: list[float] = []
    scales: list[float] = []
    several = table["series"].nunique() > 1
    style = "--" if dashed else "-"
    for index, (series, part) in enumerate(table.groupby("series", sort=False)):
        part = part.sort_values("x")
        x = part["x"].to_numpy()
        label = f"{name}: {series}" if several else name
        marker = "os^vD"[index % 5]
        colour = palette[series]
        y = part["mean" if stat == "mean" else stat].to_numpy()
        runs = _runs(x) if not part["layer"].isna().any() else [slice(0, len(x))]
        if len(runs) > 1:  # across pruned layers: a thin dotted line, not data
            ax.plot(x, y, ":", color=colour, linewidth=1)
        text = f"{label} mean ± std" if stat == "mean" else f"{label} {stat}"
        for k, run in enumerate(runs):
            ax.plot(x[run], y[run], style, marker=marker, markersize=4, color=colour, label=text if k == 0 else None)
        if stat == "mean":
            std = part["std"].to_numpy()
            for run in runs:
                ax.fill_between(x[run], (y - std)[run], (y + std)[run], color=colour, alpha=0.18, linewidth=0)
                if run.stop - run.start == 1:  # a lone point: show its band as an error bar
                    ax.errorbar(x[run], y[run], yerr=std[run], color=colour, capsize=3, linewidth=1)
            values.extend((y - std).tolist() + (y + std).tolist())
            scales.extend(std.tolist())
        else:
            scales.extend(abs(v) for v in y.tolist())
        values.extend(y.tolist())
        scales.extend(part["absmax"].tolist())
        if minmax:
            for bound in ("min", "max"):
                yb = part[bound].to_numpy()
                ax.plot(x, yb, linestyle=":" if bound == "min" else "-.", color=colour, linewidth=1,
                        label=f"{label} {bound}")
                values.extend(yb.tolist())
    return {
        "values": [v for v in values if math.isfinite(v)],
        "scales": [v for v in scales if math.isfinite(v) and v > 0],
    }


def _runs(x) -> list[slice]:
    """Index ranges of consecutive layers (split where layers were pruned)."""
    runs, start = [], 0
    for i in range(1, len(x)):
        if x[i] - x[i - 1] > 1:
            runs.append(slice(start, i))
            start = i
    runs.append(slice(start, len(x)))
    return runs


def _mark_gaps(ax: Axes, gaps: list[tuple[int, int]], unrecorded: list[int]) -> None:
    """Shade layers pruned from the trace and say so, so nothing is read as data where there is none.

    A block whose output went into a pruned block has no point: its layer is named as not recorded.
    """
    for first, last in gaps:
        ax.axvspan(first - 0.5, last + 0.5, color="0.5", alpha=0.12, linewidth=0)
        text = f"layer {first}\npruned" if first == last else f"layers {first}–{last}\npruned"
        ax.text((first + last) / 2, 0.98, text, ha="center", va="top", fontsize="x-small", color="0.35",
                transform=ax.get_xaxis_transform())
    for layer in unrecorded:
        ax.axvline(layer, color="0.6", linestyle=":", linewidth=1)
        ax.text(layer, 0.02, f"layer {layer}:\noutput not\nrecorded", ha="center", va="bottom", fontsize="x-small",
                color="0.35", transform=ax.get_xaxis_transform())
    if gaps or unrecorded:
        ax.set_xlim(min([g[0] - 1.0 for g in gaps] + [u - 0.6 for u in unrecorded] + [ax.get_xlim()[0]]),
                    max([g[1] + 1.0 for g in gaps] + [ax.get_xlim()[1]]))


def _scale(ax: Axes, values: list[float], scales: list[float], log: bool | None) -> None:
    """Log y scale when the activations' magnitudes (std, largest |value|) span orders of magnitude.

    Means near zero do not count: a mean crossing zero is not a reason for a log scale.
    """
    if not values or not scales:
        return
    if log is None:
        log = max(scales) / min(scales) > _SPAN_FOR_LOG
    if not log:
        return
    if min(values) > 0:
        ax.set_yscale("log")
    else:
        linthresh = 10 ** math.floor(math.log10(min(scales)))
        ax.set_yscale("symlog", linthresh=linthresh)


def _labels(
    ax: Axes, trace: Trace, table: pandas.DataFrame, stat: str, where: str | None, io: str, title: str | None
) -> None:
    what = "mean ± std" if stat == "mean" else stat
    if title is None:
        if where is None:
            title = f"{trace.model_name}: {what} of each layer block's {io}"
        else:
            series = table["series"].unique().tolist() if not table.empty else []
            subject = series[0] if len(series) == 1 else f"calls matching {where}"
            title = f"{trace.model_name}: {what} of {subject} ({io}s)"
        if len(title) > 60:  # a long module pattern: two lines rather than a clipped title
            head, _, tail = title.partition(": ")
            title = f"{head}:\n{tail}" if tail else title
    ax.set_title(title)
    by_layer = (
        not table.empty and not table["layer"].isna().any() and (table["x"] == table["layer"].astype(float)).all()
    )
    ax.set_xlabel("layer" if by_layer or where is None else "call (in call order)")
    ax.set_ylabel("activation value" if stat in ("mean", "min", "max") else f"activation {stat}")
    if not table.empty and not by_layer:
        ticks = table.drop_duplicates("x").sort_values("x")
        if len(ticks) <= 24:
            ax.set_xticks(ticks["x"].tolist())
            ax.set_xticklabels(ticks["label"].tolist(), rotation=45, ha="right", fontsize="x-small")
    elif not table.empty:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
