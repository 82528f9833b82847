"""The backward verdict from two float64 twins' backward fingerprints (``verdict.py``, rule 3)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.ranks import call_key
from .verdict import (
    TWIN_RELATIVE, BackwardVerdict, GradientDivergence, counterpart_names, path_of, renamed,
)

if TYPE_CHECKING:  # pragma: no cover
    from ...core.gradients import Backward
    from ..comparison import Comparison


def relative(x: Any, y: Any) -> float:
    """The RMS of the difference of two fingerprinted tensors, relative to the larger RMS."""
    scale = max(x.rms, y.rms)
    if scale == 0.0:
        return 0.0
    return x.distance(y) / scale


def _compare(places_a: dict[str, Any], places_b: dict[str, Any],
             prefix: tuple[str, ...]) -> tuple[float | None, list[str]]:
    """The largest relative difference over the places starting with ``prefix`` both hold (same shape), and the
    places beyond ``TWIN_RELATIVE``."""
    worst: float | None = None
    differ = []
    for place, x in places_a.items():
        if not place.startswith(prefix):
            continue
        y = places_b.get(place)
        if y is None or tuple(x.shape) != tuple(y.shape) or x.kept != y.kept:
            continue
        score = relative(x, y)
        worst = score if worst is None else max(worst, score)
        if score > TWIN_RELATIVE:
            differ.append(place)
    return worst, differ


def twin_verdict(comparison: Comparison, a: Backward, b: Backward) -> BackwardVerdict:
    """Walk a's twin calls in backward order; name the first whose arrived gradient agrees and whose sent one does
    not (its inputs' or its parameters'); a difference that arrives without being born at a call is born in its
    parent's own code."""
    assert a.twin is not None and b.twin is not None
    aligned = counterpart_names(comparison)
    b_by_a_name = {renamed(name, comparison.rename): name for name in b.twin}
    visible = {call_key(n.module_path, n.call_index) for n in comparison.a.nodes()}
    order = a.twin_order or list(a.twin)
    calls: list[tuple[str, float | None, float | None]] = []
    first_arrival: str | None = None
    for name in reversed(order):
        other = aligned.get(name) or b_by_a_name.get(name)
        places_a = a.twin.get(name, {})
        places_b = b.twin.get(other, {}) if other is not None else {}
        if not places_b:
            continue
        arrived, arrived_differ = _compare(places_a, places_b, ("outputs.",))
        sent_in, inputs_differ = _compare(places_a, places_b, ("inputs.",))
        sent_par, params_differ = _compare(places_a, places_b, ("param.",))
        sent = max((s for s in (sent_in, sent_par) if s is not None), default=None)
        calls.append((name, arrived, sent))
        if arrived_differ and first_arrival is None:
            first_arrival = name
        if not arrived_differ and (inputs_differ or params_differ):
            what = "inputs" if inputs_differ else "parameters"
            found = GradientDivergence(path_of(name), name, what, sent or 0.0, arrived, "twin",
                                       inputs_differ + params_differ, hidden=name not in visible)
            return BackwardVerdict("diverge", "twin", f"the backward differs first at {found}", found, calls)
    if first_arrival is not None:
        parent = path_of(first_arrival).rsplit(".", 1)[0]
        found = GradientDivergence(parent, parent, "inputs", 0.0, None, "twin", [f"its own code, before "
                                   f"{first_arrival} in backward order"], hidden=first_arrival not in visible)
        return BackwardVerdict("diverge", "twin", f"the backward differs first in the own code of {parent}: the "
                               f"gradient reaching {first_arrival} differs while every call after it agrees",
                               found, calls)
    return BackwardVerdict("agree", "twin", "the backward passes agree: at every call the float64 twins' gradients "
                           f"are within {TWIN_RELATIVE:.1e} of each other (float64 rounding)", None, calls)
