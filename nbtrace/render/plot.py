"""Activation statistics across layers (or calls) as a matplotlib plot: drawing only.

What is drawn — points, bands, pruned layers, scale, words — is decided in ``plot_data.plan_plot``;
this module turns that plan into artists, one named step each.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from ..core.trace import Trace
from .plot_data import STATS, Line, PlotPlan, plan_plot

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

__all__ = ["STATS", "plot_stats"]


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
    A pruned trace shows only the layer blocks whose output it holds, and says which were pruned.
    """
    plan = plan_plot(
        data, stat=stat, compare=compare, where=where, compare_where=compare_where, io=io, minmax=minmax,
        log=log, label=label, compare_label=compare_label, title=title,
    )
    ax = ax if ax is not None else _current_axes()
    for line in plan.lines:
        _draw_line(ax, line)
    _mark_pruned(ax, plan)
    if not any(math.isfinite(y) for line in plan.lines for y in line.y):
        ax.text(0.5, 0.5, "no statistics to plot", ha="center", va="center", transform=ax.transAxes)
    _set_scale(ax, plan)
    _set_words(ax, plan)
    handles, labels = ax.get_legend_handles_labels()
    if plan.difference is not None:
        extra = _draw_difference(ax, plan)
        handles, labels = handles + extra, labels + [e.get_label() for e in extra]
        _legend_below(ax, handles, labels)  # "best" sees only ax's lines, not the right axis': it covered them
    elif len(plan.lines) > 1 or handles:
        ax.legend(handles, labels, loc="best", fontsize="small")
    return ax


def _legend_below(ax: Axes, handles: list, labels: list[str]) -> None:
    """The legend under the x axis' words, outside the plotting area, so it covers no data."""
    below = -0.3
    try:
        renderer = ax.figure.canvas.get_renderer()
        bottom = ax.xaxis.get_tightbbox(renderer).y0
        below = float(ax.transAxes.inverted().transform((0.0, bottom))[1]) - 0.02
    except (AttributeError, TypeError, ValueError):  # a canvas without a renderer: a fixed place
        pass
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, below), ncol=2, fontsize="small",
              frameon=False)


def _draw_difference(ax: Axes, plan: PlotPlan) -> list:
    """The companion line of a comparison: b's stats against a's, on a log axis of its own (right), so two
    curves that look the same cannot hide a difference; and where to look next."""
    line = plan.difference
    assert line is not None
    twin = ax.twinx()
    (drawn,) = twin.plot(line.x, line.y, color="0.25", linestyle="--", marker="x", markersize=5, linewidth=1,
                         label=line.label)
    zeros = [(x, y) for x, y, zero in zip(line.x, line.y, line.zero) if zero]
    drawn_all = [drawn]
    if zeros:
        drawn_all.append(twin.scatter(*zip(*zeros), s=22, facecolors="none", edgecolors="0.25", zorder=3,
                                      label=line.zero_label))
    if line.tolerance:
        twin.axhline(line.tolerance, color="0.45", linestyle=":", linewidth=1)
        twin.annotate(f"tolerance {line.tolerance:g}", (1, line.tolerance), xycoords=("axes fraction", "data"),
                      xytext=(-4, 2), textcoords="offset points", ha="right", va="bottom", fontsize="x-small",
                      color="0.35")
    twin.set_yscale("log")
    twin.set_ylabel(line.ylabel, fontsize="small")
    ax.set_xlabel(f"{ax.get_xlabel()}\n{line.hint}")
    return drawn_all


def _current_axes() -> Axes:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("nbtrace.plot_stats needs matplotlib: pip install 'nbtrace[notebook]'") from None
    return plt.gca()


def _draw_line(ax: Axes, line: Line) -> None:
    """A series: its runs of consecutive layers (a dotted line across pruned ones), the ±std band, min/max."""
    import numpy as np

    x, y = np.asarray(line.x, dtype=float), np.asarray(line.y, dtype=float)
    if len(line.runs) > 1:  # across pruned layers: a thin dotted line, not data
        ax.plot(x, y, ":", color=line.colour, linewidth=1)
    style = "--" if line.dashed else "-"
    for k, (start, stop) in enumerate(line.runs):
        ax.plot(x[start:stop], y[start:stop], style, marker=line.marker, markersize=4, color=line.colour,
                label=line.label if k == 0 else None)
    if line.band is not None:
        std = np.asarray(line.band, dtype=float)
        for start, stop in line.runs:
            part = slice(start, stop)
            ax.fill_between(x[part], (y - std)[part], (y + std)[part], color=line.colour, alpha=0.18, linewidth=0)
            if stop - start == 1:  # a lone point: show its band as an error bar
                ax.errorbar(x[part], y[part], yerr=std[part], color=line.colour, capsize=3, linewidth=1)
    for bound, label, values in line.bounds:
        ax.plot(x, values, linestyle=":" if bound == "min" else "-.", color=line.colour, linewidth=1, label=label)


def _mark_pruned(ax: Axes, plan: PlotPlan) -> None:
    """Shade layers pruned from the trace and say so, so nothing is read as data where there is none.

    A block whose output went into a pruned block has no point: its layer is named as not recorded.
    """
    for text, first, last in plan.pruned:
        ax.axvspan(first - 0.5, last + 0.5, color="0.5", alpha=0.12, linewidth=0)
        ax.text((first + last) / 2, 0.98, _wrap(text), ha="center", va="top", fontsize="x-small", color="0.35",
                transform=ax.get_xaxis_transform())
    for text, layer in plan.unrecorded:
        ax.axvline(layer, color="0.6", linestyle=":", linewidth=1)
        ax.text(layer, 0.02, _wrap(text), ha="center", va="bottom", fontsize="x-small", color="0.35",
                transform=ax.get_xaxis_transform())
    if plan.pruned or plan.unrecorded:
        low, high = ax.get_xlim()
        ax.set_xlim(min([first - 1.0 for _, first, _ in plan.pruned] + [u - 0.6 for _, u in plan.unrecorded] + [low]),
                    max([last + 1.0 for _, _, last in plan.pruned] + [high]))


def _wrap(text: str, width: int = 12) -> str:
    """Short lines for a label inside the plot."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "\n".join(lines)


def _set_scale(ax: Axes, plan: PlotPlan) -> None:
    if plan.scale == "symlog":
        ax.set_yscale("symlog", linthresh=plan.linthresh)
    elif plan.scale == "log":
        ax.set_yscale("log")


def _set_words(ax: Axes, plan: PlotPlan) -> None:
    ax.set_title(plan.title)
    ax.set_xlabel(plan.xlabel)
    ax.set_ylabel(plan.ylabel)
    if plan.ticks is not None:
        ax.set_xticks([x for x, _ in plan.ticks])
        ax.set_xticklabels([text for _, text in plan.ticks], rotation=45, ha="right", fontsize="x-small")
    elif plan.integer_x:
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
