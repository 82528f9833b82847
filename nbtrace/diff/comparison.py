"""Comparing two traces of the same computation: ``compare(a, b)`` and the Comparison it returns.

``compare`` aligns the calls of ``b`` with those of ``a`` (the reference; see
``align.py``), compares every aligned tensor pair (``pairing.py``, ``metrics.py``)
and finds where a difference is born: with full tensors on both sides, by separating
each call's own difference from what it inherited and judging it against rounding
(``files_verdict.py``, ``born.py``; ``method == "files"``); with printed values or stats,
a tensor-parallel side, or an explicit ``rtol``/``atol``, by the per-element tolerance
(``divergence.py``; ``method == "tolerance"``). ``b`` may also be a live ``nn.Module``:
then it is traced and replayed on the reference's inputs (``live.py``; ``method == "replay"``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.collector import collector_paused
from ..core.load import load_trace
from ..core.node import Node
from ..core.trace import Trace
from .align.align import Alignment, align
from .backward.side import BackwardSide
from .verdict.divergence import FirstDivergence, first_divergence
from .verdict.evidence import CallDifference
from .align.flow import Flow, TensorCache
from .measure.end_to_end import end_to_end
from .measure.full_pairs import FullPairs
from .measure.metrics import TensorDiff
from .measure.noise import PairStats, dtype_name, padding_rows
from .verdict.notes import MIN_COVERAGE, comparison_notes
from .align.pairing import compile_ignore
from .ranks.ranked import call_comparer, ranked_rename
from .verdict.report import node_report
from .verdict.weight_findings import weight_findings
from .verdict.weights import WeightFinding
from .verdict.sketch_verdict import plain_divergence

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .verdict.files_verdict import FileVerdict
    from .verdict.findings import Verdict


@dataclass
class Match:
    """One call of ``a`` and its counterpart in ``b``, with the comparison of their tensors."""

    a: Node
    b: Node
    diffs: list[TensorDiff]
    #: own vs inherited difference and the tests' evidence (None where the verdict measured nothing)
    difference: CallDifference | None = None

    def __iter__(self):  # ``for node_a, node_b in comparison.matches``
        yield self.a
        yield self.b

    def verdict(self, io: str | None = None) -> bool | None:
        """False if some tensor (of ``io``) disagrees, True if all compared agree, None if none compared."""
        seen = [d.ok for d in self.diffs if (io is None or d.io == io) and d.ok is not None]
        if not seen:
            return None
        return all(seen)

    @property
    def score(self) -> float | None:
        """The largest relative difference over this call's tensors."""
        scores = [d.score for d in self.diffs if d.score is not None]
        return max(scores, key=lambda v: (math.isnan(v), v)) if scores else None


class Comparison(BackwardSide):
    """The comparison of trace ``b`` against the reference ``a``; see ``nbtrace.compare``."""

    def __init__(
        self, a: Trace, b: Trace, alignment: Alignment, matches: list[Match], rtol, atol, rename, ignore=None,
        flows: tuple[Flow, Flow] | None = None, measured: PairStats | None = None,
    ) -> None:
        self.a = a
        self.b = b
        self.alignment = alignment
        self.matches = matches
        self.rtol = rtol
        self.atol = atol
        self.rename = dict(rename) if rename is not None else None
        self.ignore = ignore
        self._by_a = {id(m.a): m for m in matches}
        self._pruned_a = {id(n) for n in alignment.pruned_a}
        self._idle_a = {id(n) for n in alignment.idle_a}
        self._report: list[dict[str, Any]] | None = None
        self._weights: list[WeightFinding] | None = None
        self._flows = flows
        self._measured = measured
        #: how the first divergence was found: "files" (full tensors: own vs inherited difference against
        #: rounding), "replay" (the port run on the reference's inputs), "live" (both modules run in float64 on
        #: the reference's inputs) or "tolerance" (per-element tolerance); ``decided_by`` says it in words
        self.method = "tolerance"
        #: calls that came close to a flag without reaching it: (module path in a, score), closest first
        self.suspects: list[tuple[str, float]] = []
        #: what replay did (``live.ReplayReport``), when b was a live module
        self.replay = None
        #: (a's module path, reason) where the verdict from files without measured rounding stops: a
        #: difference beyond a model of rounding that nothing measured proves (``verdict == "unresolved"``)
        self.unresolved: tuple[str, str] | None = None
        self.first_divergence: FirstDivergence | None = None
        self._judge: FileVerdict | None = None  # the verdict from files, kept for replay
        self._tolerance_finding: FirstDivergence | None = None  # what the default tolerance flagged, unresolved
        self._files_verdict: Verdict | None = None
        #: the verdict of the two float64 twins (``verdict/twin_verdict.py``), when both traces hold one
        self.twin = None
        if self._noise_aware():
            from .verdict.born import judge_from_files

            self.method = "files"
            self._judge = judge_from_files(self)
        else:
            self._by_tolerance(first_divergence(self))
        #: a call was flagged where the alignment paired little: none is named, replay is not run (``_little_aligned``)
        self.misaligned = False
        self._twin_decides()
        self._little_aligned()

    def _by_tolerance(self, found: FirstDivergence | None) -> None:
        """The per-element tolerance's finding names a module only on evidence no correct kernel produces (another
        shape, NaN/inf elsewhere, integers that differ, a wrongly converted weight, a call beyond the bound the runs'
        sketches give: ``sketch_verdict.py``) or by a tolerance the user gave;
        a printed value or a stat beyond the default tolerance leaves the comparison "unresolved" there."""
        if self.rtol is not None or self.atol is not None or found and found.basis not in ("printed", "stats"):
            self.first_divergence = found
            return
        if (named := plain_divergence(self, found)) is not None or found is None:  # a weight, a sketched bound
            self.first_divergence = named
            return
        size = found.max_rel if found.max_rel is not None else max(found.stat_diffs.values(), default=0.0)
        self.unresolved = (found.module_path, (
            f"unresolved at {found.module_path}: the {found.basis} values of {found.observed_path} ({found.io} "
            f"{found.arg}) differ by {size:.3g} relative, beyond the per-element tolerance, which a correct kernel's "
            "rounding can do"))
        self._tolerance_finding = found

    def _twin_decides(self) -> None:
        """Where both traces hold a float64 twin, the twins decide (``verdict/twin_born.py``), unless the caller
        asked for a per-element tolerance (``rtol``/``atol``)."""
        from .verdict.twin_born import DECIDED, apply_twin
        from .verdict.twin_verdict import twin_verdict

        if self.rtol is not None or self.atol is not None:
            return
        verdict = twin_verdict(self)
        if verdict is not None:
            self.twin = verdict
            if verdict.state in DECIDED:
                apply_twin(self, verdict)
        if self.unresolved is not None:
            from .verdict.twin_born import advice

            self.unresolved = (self.unresolved[0], f"{self.unresolved[1]}; {advice(self)}")

    def _little_aligned(self) -> None:
        """A call named where less than ``MIN_COVERAGE`` of a's calls aligned may be paired with the wrong call of b
        (a projection of one tower with the other's, an unrelated model's embedding): unless the float64 twins
        decided and the two models' outputs differ (the twins see pruned calls too, which coverage does not
        count), it is not named: where the two models' float64 outputs agree, the comparison agrees (a correct port
        of another house, however little aligned), else it is unresolved there and says to pass ``rename``
        (``misaligned``: replay is not run either)."""
        found = self.first_divergence
        if found is None or self.coverage >= MIN_COVERAGE:
            return
        twin = self.twin
        agree = twin is not None and twin.root_output_agrees
        if self.method == "twin" and not agree:
            return  # the twins see every call, pruned ones too, and the two models' outputs differ: it stands
        self.first_divergence, self.misaligned = None, True
        if agree:  # the two functions' outputs agree in float64: a correct port agrees, however little aligned
            return
        self.unresolved = (found.module_path, (
            f"unresolved at {found.module_path}: it differs, but only {self.coverage:.0%} of a's calls "
            "could be aligned: the call flagged there may be paired with the wrong call of b (pass rename={regex: "
            "replacement} to pair calls by module path)"))

    def _noise_aware(self) -> bool:
        """Full tensors on both sides, one rank each, no tolerance given: the verdict judges against rounding."""
        if self.rtol is not None or self.atol is not None or self.a.ranks or self.b.ranks:
            return False
        bases = {d.basis for m in self.matches for d in m.diffs if d.basis and d.basis not in ("shape", "mask")}
        return bases == {"tensors"}

    @property
    def flows(self) -> tuple[Flow, Flow]:
        """The data flow of each trace (``flow.py``), made on first use."""
        if self._flows is None:
            self._flows = (Flow(self.a), Flow(self.b))
        return self._flows

    # -- the public view ------------------------------------------------------------
    @property
    def unmatched_a(self) -> list[Node]:
        """Calls of a with no counterpart in b (structure, or layer blocks pruned from b); calls that compute
        nothing (an Identity, a Dropout in eval mode) are not among them: ``alignment.idle_a``."""
        return self.alignment.only_a + self.alignment.pruned_a

    @property
    def unmatched_b(self) -> list[Node]:
        """Calls of b with no counterpart in a."""
        return self.alignment.only_b + self.alignment.pruned_b

    @property
    def compared(self) -> int:
        """How many tensor pairs could be compared."""
        return sum(1 for m in self.matches for d in m.diffs if d.ok is not None)

    @property
    def agree(self) -> bool:
        """True when the verdict is "agree"."""
        return self.verdict == "agree"

    @property
    def verdict(self) -> str:
        """``"diverge"`` (``first_divergence`` says where), ``"agree"``, or ``"unresolved"``: too little
        could be aligned or compared to say either (see ``coverage`` and ``notes``)."""
        if self.first_divergence is not None:
            return "diverge"
        if self.unresolved is not None:
            return "unresolved"
        if self.method == "twin" and (self.twin.outputs_agree or self.misaligned and self.twin.root_output_agrees):
            return "agree"  # the two functions' outputs agree in float64: however little else could be aligned
        return "agree" if self.compared > 0 and self.coverage >= MIN_COVERAGE else "unresolved"

    @property
    def decided_by(self) -> str | None:
        """Which rule decided: "both live", "replayed", "measured rounding" (two trace folders that measured
        their rounding), "files, unmeasured", or None (a per-element tolerance, ``method == "tolerance"``)."""
        if self.method == "replay":
            return "both live" if getattr(self.replay, "both_live", False) else "replayed"
        if self.method == "files":
            measured = self._judge is not None and self._judge.measured_places > 0
            return "measured rounding" if measured else "files, unmeasured"
        if self.method == "twin":
            return "float64 twins"
        return None

    @property
    def numerics(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """What each side computed with (``trace.numerics``: TF32 flags, attention backends, device...)."""
        return getattr(self.a, "numerics", None) or {}, getattr(self.b, "numerics", None) or {}

    @property
    def resolution(self) -> str | None:
        """The dtype whose rounding bounds a noise-aware verdict (the coarsest compared: "bfloat16"), or
        None when each tensor was judged by a per-element tolerance (``method == "tolerance"``)."""
        if self.method == "tolerance":
            return None
        units = [u for m in self.matches if m.difference is not None and 0 < (u := m.difference.unit) < 1]
        return dtype_name(max(units)) if units else "float"  # a unit of 1 stands for "no dtype" (integers)

    @property
    def coverage(self) -> float:
        """The share of a's calls with a counterpart in b (pruned-away blocks, and calls that compute nothing and
        have no counterpart, not counted)."""
        total = len(self.a.nodes()) - len(self.alignment.pruned_a) - len(self.alignment.idle_a)
        return len(self.matches) / total if total > 0 else 0.0

    @property
    def notes(self) -> list[str]:
        """What limits this comparison, said up front (pruned or printed traces, a poor alignment)."""
        return comparison_notes(self)

    @property
    def weights(self) -> list[WeightFinding]:
        """Parameters and buffers of aligned modules that differ, from the traces' fingerprints
        (nbtrace's sidecar; empty when a trace has none). See ``nbtrace.diff.verdict.weights``."""
        if self._weights is None:
            self._weights = weight_findings(self)
        return list(self._weights)

    @property
    def end_to_end(self):
        """The final outputs' difference, whatever decided the verdict (``measure/end_to_end.py``)."""
        return end_to_end(self)

    @property
    def precision(self) -> list:
        """Where the port computes the same function but its run lost precision the reference kept (a NaN or an
        infinity the reference does not have): ``PrecisionFinding``s, beside the verdict, never changing it."""
        from .verdict.precision import precision_findings

        return precision_findings(self)

    def match_of(self, node: Node) -> Match | None:
        """The match of one of a's calls, or None."""
        return self._by_a.get(id(node))

    def node_report(self) -> list[dict[str, Any]]:
        """One dict per call of ``a.nodes()``: ``status``, ``b_path``, ``score`` (and ``module_path``).

        ``status`` is "first" (the first divergence), "diverged" (a tensor of this
        call disagrees, or a call inside it does), "match", "only_a" (no counterpart
        in b) or "no_data" (nothing to compare: no tensors on both sides, or b was
        pruned there). ``score`` is the largest relative difference on the call's
        own tensors (None when none was compared; inf for a shape mismatch).
        """
        if self._report is None:
            self._report = node_report(self)
        return [dict(row) for row in self._report]

    def to_dataframe(self, order: str = "calls") -> pandas.DataFrame:
        """One row per compared tensor pair, plus one per unmatched call (``io`` empty), in a's call
        order; ``order="difference"``: the rows that differ first."""
        from ..render.compare_frame import comparison_frame

        return comparison_frame(self, order)

    def to_dict(self) -> dict[str, Any]:
        """The verdict as plain data (JSON types only) for a port's CI: the verdict, the rule that decided, the
        first divergence, every unresolved call, precision findings, both runs' numerics and the versions; its
        layout is ``nbtrace.verdict_schema()`` (``schema_version``)."""
        from .verdict.as_dict import comparison_dict

        return comparison_dict(self)

    def summary(self) -> str:
        """A few lines for a terminal: the verdict, the first divergence, what is unmatched."""
        from ..render.text import comparison_summary

        return comparison_summary(self)

    def _repr_html_(self) -> str:
        from ..render.compare_html import comparison_html

        return comparison_html(self)

    def __repr__(self) -> str:
        verdict = self.verdict
        if verdict == "unresolved" and self.compared == 0:
            verdict = "nothing compared"
        where = f" at {self.first_divergence.module_path}" if self.first_divergence else ""
        if verdict == "unresolved" and self.unresolved is not None:
            where = f" at {self.unresolved[0]}"
        return f"<Comparison {self.a.model_name} vs {self.b.model_name}: {verdict}{where}>"


def compare(
    a: Trace | str | os.PathLike,
    b: Trace | str | os.PathLike,
    *,
    rename: Mapping[str, str] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    ignore: str | None = None,
) -> Comparison:
    """Compare trace ``b`` against the reference ``a``.

    ``a`` and ``b`` are Traces or anything ``load_trace`` reads. ``rename`` maps
    regular expressions to replacements applied to b's module paths (root class
    name included) to pair calls by path; without it calls pair up by call order,
    shapes and dtypes. ``rtol``/``atol`` override the per-dtype defaults of
    ``nbtrace.metrics`` (printed values and stats always allow one unit of their
    last digit). ``ignore`` is a regex: tensors whose argument name
    (``kwargs.attention_mask``, on either side) matches are not compared. Returns
    a Comparison; ``.first_divergence`` is None when they agree.

    A side loaded from a folder of ``rank_<r>/`` folders (a tensor-parallel run)
    has every tensor reassembled from its ranks' pieces first, and calls pair by
    module path unless ``rename`` is given (``ranked.py``).
    """
    with collector_paused():  # ~10^6 objects kept to the end: the collector's scans of them cost a third
        return _compare(load_trace(a), load_trace(b), rename, rtol, atol, ignore)


def _compare(a: Trace, b: Trace, rename: Mapping[str, str] | None, rtol: float | None, atol: float | None,
             ignore: str | None) -> Comparison:
    by_path = ranked_rename(a, b) if rename is None else None
    flows = (Flow(a), Flow(b)) if rename is None and by_path is None else None
    caches = (flows[0].cache, flows[1].cache) if flows else (TensorCache(), TensorCache())
    measured = None
    if rtol is None and atol is None and not (a.ranks or b.ranks):  # the noise-aware verdict may follow
        measured = PairStats(padding_rows(a, caches[0]), flows[0] if flows else None)
    compare_pair = call_comparer(a, b, rtol, atol, compile_ignore(ignore), FullPairs(*caches, measured))
    alignment = align(a, b, rename if by_path is None else by_path, flows, caches)
    if by_path is not None:
        alignment.method = "module path"
    matches = [Match(x, y, compare_pair(x, y)) for x, y in alignment.pairs]
    return Comparison(a, b, alignment, matches, rtol, atol, rename, ignore, flows, measured)
