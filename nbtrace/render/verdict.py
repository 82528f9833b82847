"""A comparison's verdict in words: the one source of the sentences every view shows.

The text summary (``nbtrace diff``), the static HTML, the table's attributes and the widget's
header and detail pane all read ``verdict_words(comparison)``; none builds a verdict sentence
of its own, so they show the same verdict and the same evidence for the same comparison. Nothing
here judges anything: it reads the contract of ``diff/evidence.py`` (``Comparison.verdict``,
``notes``, ``weights``, ``first_divergence`` with its ``reason``, ``confidence`` and ``evidence``,
and ``suspects`` where the verdict gives them) and puts it in the words of ``vocabulary.py``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .operations_words import operation_line
from .shards import divergence_line
from .vocabulary import (
    DECIDED_BY_LABEL,
    DECIDED_BY_WORDS,
    END_TO_END_LABEL,
    END_TO_END_WORDS,
    TOP_K_WORDS,
    NUMERICS_LABEL,
    PRECISION_LABEL,
    AGREE_ROUNDING_SENTENCE,
    AGREE_TWIN_SENTENCE,
    AGREE_SENTENCE,
    CONFIDENCE_WORDS,
    NOTHING_COMPARED,
    SOURCE_WORDS,
    STATUS_WORDS,
    SUSPECTS_WORDS,
    VERDICT_MARKS,
    VERDICT_WORDS,
    format_number,
    format_score,
)

if TYPE_CHECKING:  # pragma: no cover
    from ..diff.verdict.divergence import FirstDivergence
    from ..diff.verdict.evidence import Evidence

MAX_SHOWN = 6  # names listed in one hint before "…"


@dataclass
class EvidenceWords:
    """One test's numbers as text: what it measured, against what, and its score (1 or more: born here)."""

    test: str
    sentence: str
    statistic: str
    threshold: str
    score: str
    source: str
    born: bool

    @property
    def line(self) -> str:
        """``tolerance: the largest relative difference … (score 73.7×)``, the source named unless the traces."""
        source = "" if self.source == SOURCE_WORDS["files"] else f", from {self.source}"
        return f"{self.test}: {self.sentence} (score {self.score}{source})"


def evidence_words(evidence: list[Evidence]) -> list[EvidenceWords]:
    """The evidence of a verdict or a call, strongest first."""
    ranked = sorted(evidence, key=lambda e: -(e.score if e.score == e.score else float("inf")))
    return [
        EvidenceWords(
            test=e.test,
            sentence=e.sentence,
            statistic=format_number(e.statistic),
            threshold=format_number(e.threshold),
            score=format_score(e.score),
            source=SOURCE_WORDS.get(e.source, e.source),
            born=bool(e.score >= 1),
        )
        for e in ranked
    ]


def format_difference(div: Any) -> str:
    """``[tensors] max_abs=… max_rel=… cosine=…`` or the stat differences, with the basis
    (of a FirstDivergence or a TensorDiff)."""
    parts = []
    for name in ("max_abs", "max_rel", "cosine"):
        value = getattr(div, name)
        if value is not None:
            parts.append(f"{name}={value:.6f}" if name == "cosine" else f"{name}={format_number(value)}")
    for name, value in div.stat_diffs.items():
        parts.append(f"Δ{name}={format_number(value)}")
    basis = div.basis or "no data"
    return f"[{basis}] " + " ".join(parts)


@dataclass
class DivergenceWords:
    """Where the difference is born and why, as every view says it."""

    headline: str  # "first divergence: X (b: Y)"
    module_path: str
    b_path: str | None
    exact: bool
    reason: str
    confidence: str | None = None
    numbers: str | None = None  # the worst tensor where it was seen: "[tensors] max_abs=…"
    seen_at: str | None = None  # "….o_proj input args.0"
    evidence: list[EvidenceWords] = field(default_factory=list)
    ranks: str | None = None
    hints: list[str] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)  # of the blamed module (the summary lists every one)
    step: int | None = None
    operation: str | None = None  # the first diverging operation inside it, once narrowed

    @property
    def lines(self) -> list[str]:
        """The divergence in the text summary's lines (indented after the headline)."""
        out = [self.headline, f"  {self.reason}"]
        if self.operation:
            out.append(f"  {self.operation}")
        if self.numbers:
            out.append(f"  {self.numbers}")
        if self.evidence:
            out.append(f"  evidence{f' ({self.confidence})' if self.confidence else ''}:")
            out.extend(f"    {e.line}" for e in self.evidence)
        if self.ranks:
            out.append(f"  {self.ranks}")
        out.extend(f"  note: {hint}" for hint in self.hints)
        return out


def divergence_words(div: Any) -> DivergenceWords:
    """The words of a FirstDivergence (or of a step's KV cache divergence, which has fewer facts)."""
    b_path = getattr(div, "b_path", None)
    b = f" (b: {b_path})" if b_path and b_path != div.module_path else ""
    exact = getattr(div, "exact", True)
    words = DivergenceWords(
        headline=f"{STATUS_WORDS['first']}: {div.module_path}{b}{'' if exact else ' (approximate)'}",
        module_path=div.module_path,
        b_path=b_path,
        exact=exact,
        reason=getattr(div, "reason", ""),
        step=getattr(div, "step", None),
    )
    if not hasattr(div, "diffs"):  # a KV cache divergence: the reason says it all
        return words
    confidence = getattr(div, "confidence", None)
    words.confidence = CONFIDENCE_WORDS.get(confidence, confidence) if confidence else None
    words.numbers = format_difference(div)
    words.seen_at = f"{div.observed_path} {div.io} {div.arg}"
    words.evidence = evidence_words(list(getattr(div, "evidence", [])))
    words.ranks = divergence_line(div) or None
    words.weights = [str(w) for w in getattr(div, "weights", [])]
    words.hints = _divergence_hints(div)
    words.operation = operation_line(getattr(div, "operation", None))
    return words


def _divergence_hints(div: FirstDivergence) -> list[str]:
    hints = []
    if div.earlier:
        shown = "; ".join(f"{path} {io}s {arg} ({format_number(excess)})" for path, io, arg, excess in div.earlier)
        hints.append(f"smaller differences, within tolerance but beyond rounding, show earlier: {shown}")
    if div.b_only_between:
        hints.append(f"b also runs, with no counterpart in a: {_listed(div.b_only_between)}")
    return hints


def _listed(names: list[str]) -> str:
    return ", ".join(names[:MAX_SHOWN]) + ("…" if len(names) > MAX_SHOWN else "")


@dataclass
class VerdictWords:
    """A comparison's verdict as every view shows it: the word, the headline, the divergence, the notes."""

    verdict: str  # "agree", "diverge" or "unresolved"
    word: str
    mark: str
    headline: str
    divergence: DivergenceWords | None = None
    notes: list[str] = field(default_factory=list)
    weights: list[str] = field(default_factory=list)  # every serious weight finding
    suspects: list[str] = field(default_factory=list)  # calls that came close to a flag
    decided_by: str | None = None  # which rule decided (``Comparison.decided_by``), in words
    numerics: list[str] = field(default_factory=list)  # what each side computed with (``trace.numerics``)
    precision: list[str] = field(default_factory=list)  # where the port's run lost what the reference's kept
    end_to_end: str | None = None  # the final outputs' difference (``end_to_end_line``)

    @property
    def lines(self) -> list[str]:
        """The verdict block of the text summary (after the facts and notes): the end-to-end line right under the
        verdict's first line."""
        if self.divergence is not None:
            lines = list(self.divergence.lines)
        else:
            lines = [self.headline]
        if self.end_to_end:
            lines.insert(1, f"  {END_TO_END_LABEL}: {self.end_to_end}")
        lines.extend(f"  {PRECISION_LABEL}: {line}" for line in self.precision)
        if self.suspects:
            lines.append(f"  {SUSPECTS_WORDS}: {', '.join(self.suspects)}")
        if self.decided_by:
            lines.append(f"  {DECIDED_BY_LABEL}: {self.decided_by}")
        lines.extend(f"  {NUMERICS_LABEL}: {line}" for line in self.numerics)
        return lines

    def to_dict(self) -> dict[str, Any]:
        """Plain data for the widget's payload (the ES module shows it as it is)."""
        data = asdict(self)
        if self.divergence is not None:
            data["divergence"]["evidence"] = [dict(asdict(e), line=e.line) for e in self.divergence.evidence]
        return data


def verdict_words(comparison: Any, divergence: Any = None) -> VerdictWords:
    """The verdict of ``comparison`` in words (``divergence`` instead of its own, for a run's step)."""
    first = divergence if divergence is not None else getattr(comparison, "first_divergence", None)
    verdict = getattr(comparison, "verdict", None) or ("diverge" if first is not None else "agree")
    if divergence is not None:  # a run's step: its divergence may lie in the KV cache, its tensors agreeing
        verdict = "diverge"
    if verdict == "diverge" and first is not None:
        words = divergence_words(first)
        headline = words.headline
    elif verdict == "agree" and getattr(comparison, "method", None) == "twin":
        words, headline = None, f"{VERDICT_WORDS['agree']}: {AGREE_TWIN_SENTENCE}"
    elif verdict == "agree":
        resolution = getattr(comparison, "resolution", None)
        sentence = AGREE_ROUNDING_SENTENCE.format(dtype=resolution) if resolution else AGREE_SENTENCE
        words, headline = None, f"{VERDICT_WORDS['agree']}: {sentence}"
    elif getattr(comparison, "unresolved", None) is not None:
        words, headline = None, f"{VERDICT_WORDS['unresolved']}: {comparison.unresolved[1].removeprefix('unresolved ')}"
    elif getattr(comparison, "compared", 1) == 0:
        words, headline = None, f"{VERDICT_WORDS['unresolved']}: {NOTHING_COMPARED}"
    else:
        coverage = getattr(comparison, "coverage", 0.0)
        words, headline = None, f"{VERDICT_WORDS['unresolved']}: only {coverage:.0%} of a's calls were aligned; no verdict"
    weights = [str(w) for w in _weights(comparison) if w.serious]
    suspects = [f"{path} ({format_score(score)})" for path, score in getattr(comparison, "suspects", [])[:MAX_SHOWN]]
    return VerdictWords(
        verdict=verdict,
        word=VERDICT_WORDS.get(verdict, verdict),
        mark=VERDICT_MARKS.get(verdict, ""),
        headline=headline,
        divergence=words,
        notes=list(getattr(comparison, "notes", [])),
        weights=weights,
        suspects=suspects,
        decided_by=DECIDED_BY_WORDS.get(getattr(comparison, "decided_by", None) or "", None),
        numerics=numerics_lines(comparison),
        precision=[f"{p.module_path} ({p.rule}): {p.sentence}" for p in _precision(comparison)],
        end_to_end=end_to_end_line(comparison),
    )


def end_to_end_line(comparison: Any) -> str | None:
    """The final outputs' difference in words (``Comparison.end_to_end``): the line porters check first."""
    try:
        found = getattr(comparison, "end_to_end", None)
    except Exception:  # noqa: BLE001 - a duck-typed comparison without files: none
        return None
    if found is None:
        return None
    line = END_TO_END_WORDS.format(arg=found.arg, path=found.path.rsplit(".", 1)[-1],
                                   max_abs=format_number(found.max_abs), max_rel=format_number(found.max_rel),
                                   basis=found.basis or "no data")
    if found.positions:
        line += "; " + TOP_K_WORDS.format(top1=found.top1, top5=found.top5, positions=found.positions)
    return line


def numerics_lines(comparison: Any) -> list[str]:
    """What each side's run computed with (TF32, attention backends, device, measured rounding), in the words of
    ``numerics_words``: one line per side that recorded it."""
    from .numerics_words import numerics_words

    lines = []
    for side, trace in zip("ab", (getattr(comparison, "a", None), getattr(comparison, "b", None))):
        words = numerics_words(trace) if trace is not None and hasattr(trace, "numerics") else []
        if words:
            lines.append(f"{side}: {'; '.join(words)}")
    return lines


def _precision(comparison: Any) -> list:
    try:
        return list(getattr(comparison, "precision", []))
    except Exception:  # noqa: BLE001 - a duck-typed comparison: none
        return []


def _weights(comparison: Any) -> list:
    try:
        return list(getattr(comparison, "weights", []))
    except Exception:  # noqa: BLE001 - a duck-typed comparison without sidecars: no findings
        return []
