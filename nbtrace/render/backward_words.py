"""The backward side in words: a comparison's backward verdict and a trace's backward passes, as ``nbtrace diff``,
``nbtrace show``, ``assert_port_matches(..., backward=True)`` and the notebook say them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .gradient_layers import layer_gradients
from .vocabulary import format_number

if TYPE_CHECKING:  # pragma: no cover
    from ..core.trace import Trace

#: the exit status of ``nbtrace diff`` for a backward verdict, where the forward agrees
BACKWARD_STATUS = {"diverge": 1, "unresolved": 3}
_HEAD = {"diverge": "BACKWARD DIVERGES", "agree": "backward agrees", "unresolved": "backward unresolved",
         "forward": "backward not judged", "none": "no backward"}


def has_backward(comparison: Any) -> bool:
    """Whether either side of ``comparison`` recorded a backward pass (a comparison of several steps: no)."""
    a, b = getattr(comparison, "a", None), getattr(comparison, "b", None)
    return hasattr(comparison, "backward") and any(getattr(t, "backward", None) is not None for t in (a, b))


def backward_lines(comparison: Any) -> list[str]:
    """The backward verdict in a few lines (none when neither side recorded a backward pass)."""
    if not has_backward(comparison):
        return []
    verdict = comparison.backward
    lines = [f"{_HEAD[verdict.state]}: {verdict.reason}"]
    found = verdict.first_divergence
    if found is not None:
        how = "the float64 twins' backward" if found.method == "twin" else "the runs' recorded gradients"
        arrived = f", arrived {format_number(found.arrived)}" if found.arrived is not None else ""
        lines.append(f"  decided by {how}: sent {format_number(found.score)} relative{arrived}")
    return lines


def diff_status(comparison: Any, status: int) -> int:
    """``nbtrace diff``'s exit status: the forward's, or the backward's where the forward agrees."""
    if status != 0 or not has_backward(comparison):
        return status
    return BACKWARD_STATUS.get(comparison.backward.state, 0)


def trace_backward_lines(trace: Trace) -> list[str]:
    """What ``nbtrace show`` adds for a trace with backward passes: how many, and the gradient norm per layer."""
    backward = trace.backward
    if backward is None:
        return []
    twin = "recorded" if backward.twin is not None else (backward.twin_skipped or "not recorded")
    lines = [f"backward: {len(backward)} pass(es) recorded (float64 twin's backward: {twin}); "
             f"{len(backward.parameters)} parameter gradient(s) in the latest"]
    layers = [g for g in layer_gradients(trace) if g.layer is not None and g.arrived is not None]
    if layers:  # layer blocks pruned from the files too: the backward file keeps their norms
        lines.append("  gradient norm at each layer's outputs: " + ", ".join(
            f"{g.layer}: {format_number(g.arrived)}" for g in layers))
    return lines


def backward_text(trace: Trace) -> str | None:
    """``trace_backward_lines`` as one block of text after a blank line, or None."""
    lines = trace_backward_lines(trace)
    return "\n".join(["", *lines]) if lines else None
