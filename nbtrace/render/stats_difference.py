"""How far apart the two traces of ``plot_stats(a, compare=b)`` are at each plotted point: its companion
line, so an overlay of two curves that look the same cannot hide a port's bug.

Stats carry 5 significant digits: a difference of 1e-4 in one attention's output moves the mean and std
of the layer outputs by less than that, and two overlaid curves look the same. The companion line is not
made of the stats: it reads, from ``compare(a, b)``, the comparison of the very tensor each point of a
was read from (its largest relative difference, full tensors or printed values where the traces have
them), on a log axis of its own, with the tolerance. Where in the model the difference is born is
``plot_divergence``'s question, which the plot names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..core.trace import Trace

if TYPE_CHECKING:  # pragma: no cover
    import pandas

ZERO_WORDS = "exactly 0 (drawn at the bottom)"
HINT = "where b starts to differ: nbtrace.plot_divergence(nbtrace.compare(a, b))"


class DifferenceLine(NamedTuple):
    """b against a at the points both have (0 drawn at ``floor``, hollow), and the tolerance."""

    x: list[float]
    y: list[float]
    zero: list[bool]
    tolerance: float | None  # only where the comparison judged each tensor by it (``method == "tolerance"``)
    label: str
    zero_label: str  # the legend entry of the hollow markers: exact zeros, drawn at the bottom
    ylabel: str
    hint: str


def difference_line(a: Trace, b: Trace, table: pandas.DataFrame) -> DifferenceLine | None:
    """The companion line of the points of ``table`` (a's ``stats_table``) against trace ``b``; None when
    no plotted tensor has a counterpart in b."""
    from ..diff.comparison import compare

    comparison = compare(a, b)
    found: dict[float, tuple[float, float | None]] = {}
    for row in table.itertuples(index=False):
        diff = _diff_of(comparison, a, row)
        if diff is not None and diff.score is not None:
            known = found.get(float(row.x))
            if known is None or diff.score > known[0]:
                found[float(row.x)] = (diff.score, diff.rtol)
    if not found:
        return None
    xs = sorted(found)
    ys = [found[x][0] for x in xs]
    positive = [y for y in ys if y > 0]
    floor = min(positive) / 10 if positive else 1e-12
    by_tolerance = getattr(comparison, "method", "tolerance") == "tolerance"
    tolerances = [found[x][1] for x in xs if found[x][1]] if by_tolerance else []
    return DifferenceLine(
        x=xs,
        y=[y if y > 0 else floor for y in ys],
        zero=[y <= 0 for y in ys],
        tolerance=max(tolerances) if tolerances else None,
        label="largest relative difference of b (right axis)",
        zero_label=ZERO_WORDS,
        ylabel="b vs a: largest relative difference",
        hint=HINT,
    )


def _diff_of(comparison: Any, a: Trace, row: Any):
    """The comparison of the tensor a point of a was read from: its call (or the next call, for a block
    whose output was read as the next call's input), its place."""
    node = a.get(row.module_path, row.call_index)
    if node is None:
        return None
    if row.recorded_at == row.module_path:
        recorded = node
    elif row.recorded_at.startswith(row.module_path + "."):  # a parent read at its last inner call
        recorded = node.last_leaf()
    else:  # a layer block read at the next call's input
        recorded = node.next_sibling()
    match = comparison.match_of(recorded) if recorded is not None else None
    if match is None:
        return None
    io = "output" if row.arg.startswith("out") else "input"
    return next((d for d in match.diffs if d.io == io and d.arg == row.arg), None)
