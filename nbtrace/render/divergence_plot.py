"""How two traces differ across calls and layers, with where the difference is born marked: drawing only.

What is drawn is decided in ``divergence_data.plan_divergence``; this module turns that plan into artists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .divergence_data import DivergencePlan, plan_divergence
from .vocabulary import PALETTE

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

__all__ = ["plot_divergence"]


def plot_divergence(comparison: Any, *, ax: Axes | None = None, step: int | None = None, title: str | None = None,
                    **kwargs: Any) -> Axes:
    """Plot how ``b`` differs from ``a`` call by call (a's call order, layers shaded), on a log scale,
    with the call where the difference is born marked; returns the Axes.

    ``comparison`` is what ``nbtrace.compare`` returns: a Comparison, or a StepsComparison (then the
    step where the runs diverge, or ``step``). Where the verdict measured each call's own and inherited
    difference (full tensors), both are drawn, in units of the dtype's unit roundoff; otherwise each
    call's largest relative difference, with the tolerance. ``kwargs`` go to the main line's
    ``Axes.plot``. Draws into ``ax`` (default: the current Axes, as seaborn does); never calls
    ``plt.show()``. The numbers: ``nbtrace.render.divergence_data.divergence_table``.
    """
    plan = plan_divergence(comparison, step=step, title=title)
    ax = ax if ax is not None else _current_axes()
    _shade_layers(ax, plan)
    for k, line in enumerate(plan.series):
        style = dict(color=line.colour, linestyle=line.style, linewidth=1.2, label=line.label, zorder=2)
        if k == 0:
            style.update(kwargs)
        ax.plot(line.x, line.y, **style)
    for zero in (False, True):
        chosen = [(x, y, colour) for x, y, colour, is_zero in plan.points if is_zero is zero]
        if chosen:
            xs, ys, colours = zip(*chosen)
            fill = {"facecolors": "none", "edgecolors": list(colours)} if zero else {"c": list(colours)}
            ax.scatter(xs, ys, s=18, zorder=3, label="0 (drawn at the bottom)" if zero else "_calls", **fill)
    for value, words in plan.tolerance:
        ax.axhline(value, color="0.45", linestyle="--", linewidth=1, label=words, zorder=1)
    if plan.born is not None:
        x, y, words = plan.born
        colour = PALETTE["first"][0]
        ax.axvline(x, color=colour, linewidth=1, alpha=0.6, zorder=1)
        ax.scatter([x], [y], s=110, facecolors="none", edgecolors=colour, linewidths=1.8, zorder=4, label=words)
        right = x > (plan.points[-1][0] if plan.points else x) / 2  # the label on the side with more room
        ax.annotate(words, (x, y), xytext=(x, 0.97), textcoords=("data", "axes fraction"),
                    ha="right" if right else "left", va="top", color=colour, fontsize="small", fontweight="bold",
                    zorder=6, bbox={"boxstyle": "round,pad=0.25", "facecolor": "white", "edgecolor": "none", "alpha": 0.9},
                    arrowprops={"arrowstyle": "-", "color": colour, "linewidth": 0.8})
    if not plan.points:
        ax.text(0.5, 0.5, "nothing was compared", ha="center", va="center", transform=ax.transAxes)
    ax.set_yscale("log")
    if plan.born is not None:  # headroom: the born call's label sits above every line, not across one
        low, high = ax.get_ylim()
        ax.set_ylim(low, high * 1e2)
    ax.set_title(plan.title)
    ax.set_xlabel(plan.xlabel)
    ax.set_ylabel(plan.ylabel)
    if plan.ticks:
        ax.set_xticks([x for x, _ in plan.ticks])
        ax.set_xticklabels([text for _, text in plan.ticks], rotation=45 if not plan.layers else 0,
                           ha="right" if not plan.layers else "center", fontsize="x-small")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(loc="best", fontsize="small")
    return ax


def _shade_layers(ax: Axes, plan: DivergencePlan) -> None:
    for k, (_, first, last) in enumerate(plan.layers):
        if k % 2 == 0:
            ax.axvspan(first - 0.5, last + 0.5, color="0.5", alpha=0.08, linewidth=0, zorder=0)


def _current_axes() -> Axes:
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("nbtrace.plot_divergence needs matplotlib: pip install 'nbtrace[notebook]'") from None
    return plt.gca()
