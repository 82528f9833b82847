"""What ``plot_divergence`` draws, computed apart from drawing: each aligned call's difference as a tidy
table (``divergence_table``) and the whole figure as data (``plan_divergence``).

Nothing here judges: the numbers are the comparison's own — ``Match.difference`` (own and inherited
difference in units of u) where the verdict measured it, else the largest relative difference on the
call's own tensors (``Match.score``) and their tolerance — and "born" is ``first_divergence``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..core.paths import without_root
from .table import Columns
from .vocabulary import DIFFERENCE_WORDS, OWN_SHOWN, PALETTE, STATUS_WORDS, UNIT, format_number, format_score

if TYPE_CHECKING:  # pragma: no cover
    import pandas

SCHEMA = (
    ("x", "int"),
    ("module_path", "str"),
    ("call_index", "int"),
    ("label", "str"),
    ("layer", "Int64"),
    ("status", "str"),
    ("own", "float"),
    ("inherited", "float"),
    ("out", "float"),
    ("score", "float"),
    ("tolerance", "float"),
    ("born", "bool"),
)


def _comparison_of(comparison: Any, step: int | None) -> tuple[Any, Any, int | None]:
    """The single comparison to draw, the divergence to mark, and its step (a run: the diverging step)."""
    if hasattr(comparison, "steps") and callable(getattr(comparison, "comparison", None)):
        first = comparison.first_divergence
        if step is None:
            candidates = [first.step if first is not None else None, comparison.first_token_step, 0]
            step = next(s for s in candidates if s is not None)
        one = comparison.comparison(step)
        return one, (first if first is not None and first.step == step else one.first_divergence), step
    if step not in (None, 0):
        raise ValueError(f"step={step}: a comparison of single forwards has no steps")
    return comparison, comparison.first_divergence, None


def divergence_table(comparison: Any, *, step: int | None = None) -> pandas.DataFrame:
    """One row per aligned call of a with something compared, in call order: ``x`` (its position),
    ``module_path``, ``call_index``, ``label`` (the path without the root), ``layer``, ``status``,
    ``own``/``inherited``/``out`` (units of u; NaN where the verdict did not measure them), ``score``
    (the largest relative difference on its own tensors), ``tolerance`` (the largest rtol of its tensors)
    and ``born`` (the first divergence). ``step`` picks a step of a run (default: where it diverges)."""
    one, first, _ = _comparison_of(comparison, step)
    report = one.node_report()
    rows = Columns(SCHEMA)
    x = 0
    for node, entry in zip(one.a.nodes(), report):
        match = one.match_of(node)
        if match is None or match.verdict() is None:
            continue
        d = match.difference
        tolerances = [t.rtol for t in match.diffs if t.rtol is not None]
        rows.add(
            x=x,
            module_path=node.module_path,
            call_index=node.call_index,
            label=without_root(node.module_path) + (f" #{node.call_index + 1}" if node.call_index else ""),
            layer=node.layer,
            status=entry["status"],
            own=d.own if d is not None else None,
            inherited=d.inherited if d is not None else None,
            out=d.out if d is not None else None,
            score=match.score,
            tolerance=max(tolerances) if tolerances else None,
            born=_is_born(first, node),
        )
        x += 1
    return rows.frame("nbtrace.plot_divergence")


def _is_born(first: Any, node: Any) -> bool:
    """Is ``node`` the call the first divergence blames (a KV cache divergence names a path only)?"""
    if first is None:
        return False
    blamed = getattr(first, "node", None)
    return node is blamed if blamed is not None else (node.module_path == first.module_path and node.call_index == 0)


class Series(NamedTuple):
    """One line of the plot: its values by x, and how it is drawn."""

    label: str
    x: list[int]
    y: list[float]
    colour: str
    style: str  # "-" own / the score, ":" inherited
    marker: str


class DivergencePlan(NamedTuple):
    """Everything ``plot_divergence`` draws."""

    kind: str  # "units" (own vs inherited) or "relative" (the largest relative difference)
    series: list[Series]
    points: list[tuple[int, float, str, bool]]  # (x, y, colour, zero): each call coloured by its status
    floor: float  # where zero is drawn on the log scale (hollow markers); an unmeasured call is a gap
    tolerance: list[tuple[float, str]]  # horizontal lines: (value, words)
    born: tuple[int, float, str] | None  # (x, y, words) where the difference is born
    layers: list[tuple[int, int, int]]  # (layer, first x, last x) of each layer's calls
    ticks: list[tuple[int, str]]
    title: str
    xlabel: str
    ylabel: str


def plan_divergence(comparison: Any, *, step: int | None = None, title: str | None = None) -> DivergencePlan:
    """What ``plot_divergence`` draws for ``comparison`` (a Comparison, or a StepsComparison: one step)."""
    one, first, shown_step = _comparison_of(comparison, step)
    table = divergence_table(comparison, step=step)
    units = bool(table["own"].notna().any())
    x = table["x"].tolist()
    values = (table["own"] if units else table["score"]).tolist()
    positive = [v for column in ("own", "inherited", "score") for v in table[column].tolist() if v == v and v > 0]
    floor = min(positive) / 10 if positive else (0.1 if units else 1e-12)
    if units:  # in units of the dtype's rounding, nothing below a thousandth of it is worth a decade of axis
        floor = max(floor, 1e-3)
    nan = float("nan")
    lift = lambda v: nan if v != v else floor if v <= 0 else v  # noqa: E731 - zeros on the floor; unmeasured: a gap
    inherited = table["inherited"].tolist()
    if units:  # own where it exceeds what the call inherited; below that, √(out² − inherited²) of a call that
        # passes on (and rescales) a large difference is cancellation noise: it zig-zagged between 0 and 1e5 u
        values = [v if v != v or not (h == h and h > 0) or v > h else nan for v, h in zip(values, inherited)]
    series = [Series(f"{DIFFERENCE_WORDS['own']} ({UNIT}), {OWN_SHOWN}" if units else DIFFERENCE_WORDS["relative"],
                     x, [lift(v) for v in values], "0.35", "-", "")]
    if units:
        series.append(Series(f"{DIFFERENCE_WORDS['inherited']} ({UNIT})", x,
                             [lift(v) for v in inherited], "0.6", ":", ""))
    # each call's status marker on the line that says most about it: own where drawn, else what it inherited
    points = [(k, lift(v if v == v else h), PALETTE.get(s, PALETTE["only_a"])[0], (v if v == v else h) <= 0)
              for k, v, h, s in zip(x, values, inherited if units else values, table["status"])
              if v == v or h == h]
    tolerance = []
    if not units:
        for value in sorted({t for t in table["tolerance"].tolist() if t == t and t > 0}):
            tolerance.append((value, f"tolerance {format_number(value)}"))
    born = None
    if first is not None and table["born"].any():
        row = table[table["born"]].iloc[0]
        where = f"{STATUS_WORDS['first']}: {row['label']}"
        evidence = getattr(first, "evidence", [])
        if evidence:
            where += f" (score {format_score(max(e.score for e in evidence))})"
        value = row["own"] if units and row["own"] == row["own"] else row["score"] if not units else floor
        born = (int(row["x"]), lift(value), where)
    layers = []
    for layer, part in table.dropna(subset=["layer"]).groupby("layer", sort=True):
        layers.append((int(layer), int(part["x"].min()), int(part["x"].max())))
    ticks = [(first_x, f"layer {layer}") for layer, first_x, _ in layers] if layers else (
        list(zip(x, table["label"].tolist())) if len(x) <= 40 else [])
    head = title if title is not None else (
        f"{one.a.model_name} vs {one.b.model_name}{f' (step {shown_step})' if shown_step is not None else ''}: "
        + ("own vs inherited difference" if units else "difference") + " across calls")
    return DivergencePlan(
        kind="units" if units else "relative",
        series=series,
        points=points,
        floor=floor,
        tolerance=tolerance,
        born=born,
        layers=layers,
        ticks=ticks,
        title=head,
        xlabel="calls of a, in call order" + (" (layers shaded)" if layers else ""),
        ylabel=f"difference ({UNIT}: the dtype's unit roundoff)" if units else "largest relative difference",
    )
