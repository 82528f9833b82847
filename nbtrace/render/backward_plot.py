"""Gradient norms across layers (the picture of vanishing and exploding gradients): drawing only.

``plot_gradient_norms(data, *, ax=None, compare=None)`` draws, for each layer block the files hold, the norm of the
gradient that reached its outputs in the latest backward pass (``render/gradient_layers.layer_gradients`` computes
it, the layer blocks pruned from the files included), on a log scale; ``compare`` draws a second trace's beside it.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..core.load import load_trace
from ..core.paths import layer_number
from .backward_frame import gradient_norms
from .gradient_layers import layer_gradients

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes


def _norms(data: Any, which: str) -> list[tuple[float, float]]:
    """(layer, norm) of ``data``: a trace's layers from ``layer_gradients`` (blocks pruned from the files too, from
    the norms its backward file keeps), a bare ``Backward``'s from the layer blocks its tree holds."""
    from ..core.gradients import Backward

    if isinstance(data, Backward):
        return [(float(layer_number(path) or 0), norm) for path, norm in gradient_norms(data, which)]
    trace = load_trace(data)
    if trace.backward is None:
        raise ValueError(f"{trace.model_name} has no backward pass recorded (trace it with backward=True)")
    kind = "arrived" if which == "outputs" else "sent"
    return [(g.x, getattr(g, kind)) for g in layer_gradients(trace) if getattr(g, kind) is not None]


def plot_gradient_norms(
    data: Any,
    *,
    ax: Axes | None = None,
    compare: Any = None,
    which: str = "outputs",
    label: str | None = None,
    compare_label: str | None = None,
) -> Axes:
    """Plot the gradient norm at each layer block's ``outputs`` (or ``inputs``) across the layer index; returns
    the Axes. ``data``/``compare``: a Trace, a trace folder or file, or a ``Backward``."""
    import matplotlib.pyplot as plt

    if ax is None:
        ax = plt.gca()
    sides = [(data, label or "a")] + ([(compare, compare_label or "b")] if compare is not None else [])
    for (source, name), marker in zip(sides, ("o", "s")):
        norms = _norms(source, which)
        ax.plot([x for x, _ in norms], [n for _, n in norms], marker=marker, label=name if compare is not None else None)
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel(f"‖gradient‖ at the layer's {which}")
    ax.set_title("gradient norms across layers (latest backward pass)")
    if compare is not None:
        ax.legend()
    return ax
