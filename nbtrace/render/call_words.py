"""One call of a comparison in words: its status, its difference (own vs inherited), its tensors beside b's.

The tree's difference column (text table, static HTML, widget) and the widget's detail pane read
these; like ``verdict.py`` they only put the comparison's own numbers (``Match.diffs``,
``Match.difference``, the node report) in the words and formats of ``vocabulary.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.dtypes import short_dtype
from .shards import cell as rank_cell
from .verdict import EvidenceWords, evidence_words, format_difference
from .vocabulary import (
    CALL_SITUATIONS,
    DIFFERENCE_WORDS,
    STATUS_WORDS,
    TENSOR_VERDICT_WORDS,
    difference_level,
    format_number,
    format_score,
    format_units,
    short_shape,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..core.node import Node
    from ..core.tensor import TensorValue
    from ..diff.verdict.evidence import CallDifference
    from ..diff.measure.metrics import TensorDiff

STATS = ("mean", "std", "min", "max")


@dataclass
class DifferenceWords:
    """A call's ``CallDifference`` as text, in units of u (the dtype's unit roundoff)."""

    own: str
    inherited: str
    out: str
    score: str
    unit: str
    replayed: bool
    evidence: list[EvidenceWords] = field(default_factory=list)

    @property
    def line(self) -> str:
        """``own 3.20e+03 u · inherited 2.10 u · out 3.20e+03 u · score 73.7×``"""
        w = DIFFERENCE_WORDS
        return (f"{w['own']} {self.own} · {w['inherited']} {self.inherited} · {w['out']} {self.out} · "
                f"{w['score']} {self.score}")


def difference_words(difference: CallDifference) -> DifferenceWords:
    return DifferenceWords(
        own=format_units(difference.own),
        inherited=format_units(difference.inherited),
        out=format_units(difference.out),
        score=format_score(difference.score),
        unit=format_number(difference.unit),
        replayed=difference.replayed,
        evidence=evidence_words(list(difference.evidence)),
    )


@dataclass
class Cell:
    """One call's cell in the tree's difference column."""

    text: str
    tooltip: str
    level: int  # bar length 0–100 (own, or the relative difference)
    inherited_level: int | None  # bar length of what it inherited (units only)


@dataclass
class DifferenceColumn:
    """The difference column of a comparison's tree: ``units`` (own vs inherited, from the verdict's
    ``Match.difference``) when the comparison has them, else ``relative`` (the largest relative
    difference on the call's own tensors). One cell per call of ``a.nodes()`` (None: nothing compared)."""

    kind: str
    header: str
    cells: list[Cell | None]


def difference_column(comparison: Any) -> DifferenceColumn | None:
    """The column for ``comparison``, or None when it has no matches to show (a duck-typed comparison)."""
    match_of = getattr(comparison, "match_of", None)
    if not callable(match_of):
        return None
    nodes = comparison.a.nodes()
    matches = [match_of(node) for node in nodes]
    units = any(m is not None and m.difference is not None and m.difference.own is not None for m in matches)
    cells: list[Cell | None] = []
    for match in matches:
        if match is None:
            cells.append(None)
        elif units and match.difference is not None and match.difference.own is not None:
            d = match.difference
            words = difference_words(d)
            cells.append(Cell(words.own, words.line + _b_output(match), difference_level(d.own, True),
                              difference_level(d.inherited, True)))
        elif units or match.score is None:
            cells.append(None)
        else:
            text = format_number(match.score)
            cells.append(Cell(text, f"{DIFFERENCE_WORDS['relative']} {text}{_b_output(match)}",
                              difference_level(match.score, False), None))
    header = f"{DIFFERENCE_WORDS['own']} (u)" if units else "max rel diff"
    return DifferenceColumn("units" if units else "relative", header, cells)


def _b_output(match: Any) -> str:
    """`` · b: mean 0.012 std 1.01`` of b's first output (what the row shows of a), or nothing."""
    outputs = match.b.output_tensors()
    if not outputs or outputs[0].mean is None:
        return ""
    return f" · b: mean {format_number(outputs[0].mean)} std {format_number(outputs[0].std)}"


@dataclass
class TensorWords:
    """One tensor pair of a call: a's and b's names, shapes and stats side by side, and how they compare."""

    io: str
    arg: str
    b_arg: str
    shape: str
    b_shape: str
    dtype: str
    b_dtype: str
    basis: str
    numbers: str  # "max_abs=… max_rel=… cosine=…" or the stat differences
    tolerance: str
    verdict: str
    ok: bool | None
    a: dict[str, str]
    b: dict[str, str]
    reassembled: str


def tensor_words(diff: TensorDiff, a: TensorValue | None, b: TensorValue | None, *,
                 by_tolerance: bool = True) -> TensorWords:
    """The words of one tensor pair; ``by_tolerance`` False: the verdict judged it by where the difference
    flows against the dtype's rounding, so no per-element tolerance is shown as if it had decided."""
    numbers = format_difference(diff).split("] ", 1)[-1] if diff.basis else (diff.problem or "")
    return TensorWords(
        io=diff.io,
        arg=diff.arg,
        b_arg=diff.b_arg,
        shape=short_shape(diff.shape),
        b_shape=short_shape(diff.b_shape),
        dtype=short_dtype(diff.dtype),
        b_dtype=short_dtype(diff.b_dtype),
        basis=diff.basis or "-",
        numbers=numbers if diff.problem is None or diff.basis != "shape" else diff.problem,
        tolerance=format_number(diff.rtol) if by_tolerance else "-",
        verdict=TENSOR_VERDICT_WORDS[diff.ok],
        ok=diff.ok,
        a=_stats(a),
        b=_stats(b),
        reassembled=rank_cell(diff),
    )


def _stats(tensor: TensorValue | None) -> dict[str, str]:
    if tensor is None:
        return {}
    return {name: format_number(getattr(tensor, name), missing="") for name in STATS}


def _tensor_at(node: Node, io: str, arg: str) -> TensorValue | None:
    for kind, place, tensor in node.tensors():
        if kind == io and place == arg:
            return tensor
    return None


@dataclass
class CallWords:
    """One call of a in a comparison: status, what that means for it, b's counterpart, difference, tensors."""

    status: str
    status_word: str
    situation: str
    b_path: str | None
    difference: DifferenceWords | None
    tensors: list[TensorWords]


def call_words(comparison: Any, node: Node, entry: dict[str, Any]) -> CallWords:
    """The words of ``node`` (a call of a); ``entry`` is its row of ``comparison.node_report()``."""
    status = entry.get("status") or "no_data"
    match_of = getattr(comparison, "match_of", None)
    match = match_of(node) if callable(match_of) else None
    tensors: list[TensorWords] = []
    difference = None
    if match is not None:
        by_tolerance = getattr(comparison, "method", "tolerance") == "tolerance"
        tensors = [tensor_words(d, _tensor_at(node, d.io, d.arg), _tensor_at(match.b, d.io, d.b_arg),
                                by_tolerance=by_tolerance) for d in match.diffs]
        difference = difference_words(match.difference) if match.difference is not None else None
    situation = status
    if status == "diverged":
        own = match.verdict() if match is not None else None
        situation = "diverged_own" if own is False else "diverged_inside"
    return CallWords(
        status=status,
        status_word=STATUS_WORDS.get(status, status),
        situation=CALL_SITUATIONS.get(situation, ""),
        b_path=entry.get("b_path"),
        difference=difference,
        tensors=tensors,
    )
