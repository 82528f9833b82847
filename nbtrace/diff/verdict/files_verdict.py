"""The verdict from two trace files: where is a difference born, beyond rounding?

Walk the producers of the reference's data flow (``flow.py``: leaves, a call's own code
between its children, the code after a call, pruned layer blocks) in call order. For each
tensor a producer made, compare b's counterpart with a's (padding rows left out):

- both traces measured their rounding (``measure_rounding``): ``‖a − b‖ > 2 (acc_a + acc_b)
  + floor`` PROVES the float64 truths differ there (``rounding.proven``); the difference is
  born at the first proven tensor (its inputs were not proven different: earlier ones would
  have been found first);
- nothing measured: where the operation is plain (``operation.py``: an elementwise function, a
  linear map, an embedding, a norm, an attention's core), a difference beyond the largest any
  correct implementation could make from the inputs it was handed (the ``bound`` test, derived
  by error analysis) names it; elsewhere a model of rounding (``rounding.magnitude``) points at
  the first call beyond it, but never names it: the verdict is "unresolved" there (a correct
  kernel may round that differently); replay or measured rounding decides;
- evidence no correct kernel produces names a module either way: another shape (not a
  broadcast), NaN/inf where the other side is finite, integers that differ on equal
  inputs, weights that the sidecar's fingerprints show converted wrongly.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...core.dtypes import is_float
from ...core.node import Node
from ...core.tensor import TensorValue
from .evidence import Evidence
from .findings import Finding, Verdict
from .operation import bound_evidence
from ..align.flow import Flow, Producer, Slot
from ..measure.metrics import TensorDiff, same_shape
from ..measure.noise import DiffStats, PairStats, diff_stats, dtype_name, padding_rows, unit_roundoff
from ..measure.layouts import in_a_layout, same_values
from ..measure.measured import accumulated
from ..measure.rounding import B_CODE, B_INPUTS, B_LEAF, CERTAIN, K_CODE, K_LEAF, accumulation, magnitude, proven
from .weighted import files_weighted
from .weights import WeightFinding, weight_evidence

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Match

UNKNOWN_INPUTS = "its inputs have no counterpart in b: what it inherited cannot be told from what it added"


class FileVerdict:
    """Judges every producer of a against b; ``verdict()`` is the answer, ``findings`` the details."""

    def __init__(self, flows: tuple[Flow, Flow], matches: dict[int, Match],
                 weights: list[WeightFinding] | None = None, measured: PairStats | None = None) -> None:
        self.flow_a, self.flow_b = flows
        self.matches = matches
        self.measured = measured
        self.valid = measured.valid_rows if measured else padding_rows(self.flow_a.trace, self.flow_a.cache)
        self.weights: dict[str, list[WeightFinding]] = {}
        for w in weights or []:
            if w.serious:
                self.weights.setdefault(w.module_path, []).append(w)
        self._stats: dict[int, DiffStats | None] = {}
        self._at: dict[int, DiffStats | None] = {}
        self._diffs: dict[tuple[int, str, str], TensorDiff] = {}  # (id(a's call), io, arg) -> its comparison
        for key, match in matches.items():
            for d in match.diffs:
                self._diffs.setdefault((key, d.io, d.arg), d)
        self._places: dict[int, tuple[Slot, TensorDiff | None]] = {}
        self.findings: list[Finding] = []
        self.measured_places = 0  # tensors judged on both sides' measured rounding
        self._wider: list[Finding] = []  # findings widened to a call holding unmeasured code (``_widened``)
        self._done = False

    # -- one tensor ----------------------------------------------------------------------
    def place(self, slot: Slot) -> tuple[Slot, TensorDiff | None]:
        """Where b's counterpart of ``slot`` is found, and the comparison's numbers there: the slot's own call,
        else the first call that recorded the same values and has a counterpart (a fused projection leaves a's
        gate_proj alone, but its output is act_fn's input)."""
        found = self._places.get(id(slot))
        if found is None:
            found = slot, None
            for place in (slot, *self.flow_a.copies(slot)):
                diff = self._diff(place)
                if diff is not None and diff.basis == "tensors":
                    found = place, diff
                    break
            self._places[id(slot)] = found
        return found

    def _diff(self, slot: Slot) -> TensorDiff | None:
        """The comparison of the tensor at exactly this place (None: its call or tensor has no counterpart)."""
        return self._diffs.get((id(slot.node), slot.io, slot.arg))

    def stats(self, slot: Slot) -> DiffStats | None:
        """How b's counterpart of ``slot`` (found as ``place`` finds it) differs (None: no counterpart with full
        values, or no elements)."""
        key = id(slot.source)
        if key not in self._stats:
            place, diff = self.place(slot)
            self._stats[key] = self.stats_at(place) if diff is not None else None
        return self._stats[key]

    def stats_at(self, place: Slot) -> DiffStats | None:
        """How b's counterpart of the tensor at exactly this place differs."""
        key = id(place)
        if self.measured is not None and key not in self._at:
            found = self.measured.found.get((id(place.node), place.io, place.arg))
            if found is not None:
                self._at[key] = found
        if key not in self._at:
            result = None
            other = self._b_tensor(place)
            if other is not None and len(other.shape) > 0 and (same_shape(other.shape, place.tensor.shape)
                                                               or same_values(place.tensor.shape, other.shape)):
                x, y = self.flow_a.cache.load(place.tensor), self.flow_b.cache.load(other)
                if x is not None and y is not None and x.numel() > 0:
                    y = in_a_layout(x, y)
                    floats = is_float(place.tensor.dtype) and is_float(other.dtype)
                    u = unit_roundoff(place.tensor.dtype, other.dtype) if floats else 0.0
                    result = diff_stats(x, y, self.valid, u)
            self._at[key] = result
        return self._at[key]

    def _b_tensor(self, place: Slot) -> TensorValue | None:
        diff = self._diff(place)
        if diff is None or diff.basis != "tensors":
            return None
        match = self.matches[id(place.node)]
        return next((t for io, arg, t in match.b.tensors() if io == place.io and arg == diff.b_arg), None)

    def _broken(self, slot: Slot) -> TensorDiff | None:
        """The comparison at this very place when it failed outright: another shape, NaN/inf elsewhere."""
        diff = self._diff(slot)
        return diff if diff is not None and diff.ok is False and diff.problem is not None else None

    def _broken_finding(self, producer: Producer, slot: Slot, diff: TensorDiff) -> Finding:
        """A shape or NaN/inf mismatch: born here unless a tensor it read already failed the same way."""
        handed = any(self._broken(copy) for s in producer.inputs for copy in self.flow_a.copies(s))
        u = unit_roundoff(diff.dtype, diff.b_dtype)
        stats = DiffStats(n=0, rel=math.inf, u=u, rms=math.inf)
        finding = Finding(producer.node, stats, math.inf if handed else 0.0, producer=producer, slot=slot)
        what = self._what(producer, slot)
        finding.evidence.append(Evidence(
            "broken", math.inf, 0.0, 0.0 if handed else math.inf,
            f"{what}: {diff.problem}" + (" (so does a tensor it reads)" if handed else "")))
        return finding

    # -- one producer --------------------------------------------------------------------
    def judge(self, producer: Producer, slot: Slot) -> Finding | None:
        """A fresh tensor of a: what its code added beyond what it was handed."""
        broken = self._broken(slot)
        if broken is not None:
            return self._broken_finding(producer, slot, broken)
        d = self.stats(slot)
        if d is None:
            return None
        return self._finding(producer, slot, d, [])

    def judge_passed(self, producer: Producer, slot: Slot) -> Finding | None:
        """A tensor a merely handed on (the same values as earlier): did b change it on the way?"""
        broken = self._broken(slot)
        if broken is not None and self._broken(slot.source) is None:
            return self._broken_finding(producer, slot, broken)
        earlier, diff = self.place(slot.source)
        if earlier is slot or diff is None:
            return None
        here, there = self._b_tensor(slot), self._b_tensor(earlier)
        if here is None or there is None:
            return None
        if self.flow_b.cache.fingerprint(here) == self.flow_b.cache.fingerprint(there):
            return None  # b handed on the same values too
        d, before = self.stats_at(slot), self.stats(slot.source)
        if d is None:
            return None
        return self._finding(producer, slot, d, [before] if before is not None else [])

    def _finding(self, producer: Producer, slot: Slot, d: DiffStats, handed: list[DiffStats]) -> Finding:
        readable = [s for s in producer.inputs if s.tensor.shape]
        known = handed + [x for x in (self.stats(s) for s in readable if is_float(s.tensor.dtype)) if x is not None]
        floats_read = any(is_float(s.tensor.dtype) for s in readable)
        e_in = max((x.rel for x in known), default=0.0)
        finding = Finding(producer.node, d, e_in, producer=producer, slot=slot)
        if floats_read and not known:
            finding.note = UNKNOWN_INPUTS
        what = self._what(producer, slot)
        if d.u == 0:  # integers and bools: equal, or made from inputs that already differ
            if d.rel > 0:
                score = 0.0 if self._inherits(handed, readable, what) else math.inf
                finding.evidence.append(Evidence(
                    "exact", d.rel, 0.0, score,
                    f"{what} differ (an integer or bool tensor)" + (", made from inputs that differ" if e_in else "")))
            return finding
        finding.own = math.sqrt(max(d.rel**2 - e_in**2, 0.0))  # beyond what it was handed, passed on as is
        both = self._accumulated(slot)
        if both is not None:
            (acc_a, scale), (acc_b, _) = both
            evidence = proven(d, acc_a, acc_b, scale or d.norm, what)
            finding.evidence.append(evidence)
            self.measured_places += 1
            if evidence.score >= 1:
                finding.evidence.extend(self._weight_evidence(producer))
                if any(e.test == "weights" and e.score >= 1 for e in finding.evidence):
                    return finding  # its own weights differ: the module itself, whatever it read
                return self._widened(finding, producer, readable)
        else:
            bound = bound_evidence(self, producer, slot, what) if d.rel > 0 else None
            if bound is not None:  # the operation is plain: beyond its bound, no correct implementation made it
                finding.evidence.append(bound)
                if bound.score >= 1:
                    finding.evidence.extend(self._weight_evidence(producer))
                    return finding
            k, b = self._allowance(producer)
            longest = max((s.tensor.shape[-1] for s in readable), default=1)
            finding.evidence.append(magnitude(d, e_in, k, b + accumulation(longest, d.u), what))
        if d.rel > 0 and producer.kind != "inputs":
            finding.evidence.extend(self._weight_evidence(producer))
        return finding

    def _widened(self, finding: Finding, producer: Producer, readable: list[Slot]) -> Finding:
        """A proven difference whose producer read a tensor that differs and was not measured (code between
        modules, e.g. attention's core inside ``self_attn``, made it): it was not proven right, so the difference
        is born in that code or here. The finding names the innermost call that holds both."""
        for s in readable:
            before = self.stats(s) if is_float(s.tensor.dtype) else None
            upstream = s.source.producer
            if before is None or before.rel == 0 or upstream is None or self._accumulated(s) is not None:
                continue
            node = _common(upstream.node, producer.node)
            if node is producer.node:
                continue
            widened = upstream if node is upstream.node else Producer(node, "glue", producer.event, [finding.slot],
                                                                     producer.inputs)
            note = f"{s.node.module_path}'s {s.io} {s.arg} differs and was not measured"
            # what the wider call inherited is what ITS inputs carry, not what the inner call was handed
            ins = [x for x in (self.stats(i) for i in self.flow_a.slots(node, "input") if is_float(i.tensor.dtype))
                   if x is not None]
            e_in = max((x.rel for x in ins), default=0.0) if ins else finding.inherited
            own = math.sqrt(max(finding.stats.rel**2 - e_in**2, 0.0)) if ins else finding.own
            self._wider.append(Finding(node, finding.stats, e_in, list(finding.evidence), widened,
                                       finding.slot, note, own))
            return finding
        return finding

    def _inherits(self, handed: list[DiffStats], readable: list[Slot], what: str) -> bool:
        """Whether an integer or bool tensor that differs could have been made from what already differed: a
        tensor handed on that differs, an integer or bool input that differs, or a float input that differs
        beyond rounding (where both traces measured theirs, proven; unmeasured, any difference at all). Positions
        made by ``arange`` beside an encoder's output that differs by rounding are made here."""
        if any(x.rel > 0 for x in handed):
            return True
        for slot in readable:
            found = self.stats(slot)
            if found is None or not found.rel > 0:
                continue
            if not is_float(slot.tensor.dtype):
                return True
            both = self._accumulated(slot)
            if both is None:
                return True
            (acc_a, scale), (acc_b, _) = both
            if proven(found, acc_a, acc_b, scale or found.norm, what).score >= 1:
                return True
        return False

    def _accumulated(self, slot: Slot) -> tuple[tuple[float, float], tuple[float, float]] | None:
        """``((acc_a, scale_a), (acc_b, scale_b))`` where both traces measured the rounding of this tensor."""
        place, diff = self.place(slot)
        match = self.matches.get(id(place.node))
        if diff is None or match is None:
            return None
        mine = accumulated(self.flow_a, place)
        other = self.flow_b.slot(match.b, place.io, diff.b_arg)
        theirs = accumulated(self.flow_b, other) if other is not None else None
        return (mine, theirs) if mine is not None and theirs is not None else None

    @staticmethod
    def _allowance(producer: Producer) -> tuple[float, float]:
        if producer.kind == "leaf":
            return K_LEAF, B_LEAF
        if producer.kind == "inputs":
            return 0.0, B_INPUTS
        if producer.kind == "pruned" and producer.gap is not None:
            return K_CODE, B_CODE * math.sqrt(producer.gap.last - producer.gap.first + 2)
        return K_CODE, B_CODE

    @staticmethod
    def _what(producer: Producer, slot: Slot) -> str:
        if slot.node is producer.node:
            return f"its {slot.io}s ({slot.arg})"
        return f"the {slot.io}s of {slot.node.module_path} ({slot.arg})"

    def _weight_evidence(self, producer: Producer) -> list[Evidence]:
        """Weights of the producer's module (of the pruned blocks, for pruned ones) that the fingerprints show
        converted wrongly."""
        if producer.kind in ("leaf", "glue"):
            held = self.weights.get(producer.node.module_path, [])
        elif producer.kind == "pruned" and producer.gap is not None:
            gap = producer.gap
            blocks = tuple(f"{gap.prefix}.{n}" for n in range(gap.first, gap.last + 1))
            held = [w for path, found in self.weights.items() for w in found
                    if path in blocks or path.startswith(tuple(b + "." for b in blocks))]
        else:
            return []
        return [weight_evidence(w) for w in held]

    # -- the whole trace -----------------------------------------------------------------
    def run(self) -> list[Finding]:
        if not self._done:
            stretches = [(p.event, 0, p) for p in self.flow_a.producers]
            stretches += [(p.event, 1, p) for p in self.flow_a.passers]
            for _, passed, producer in sorted(stretches, key=lambda item: item[:2]):
                for slot in producer.outputs:
                    finding = self.judge_passed(producer, slot) if passed else self.judge(producer, slot)
                    self.findings.extend(self._wider)  # the call holding it comes first: the verdict names it
                    self._wider.clear()
                    if finding is not None:
                        self.findings.append(finding)
            self._done = True
        return self.findings

    def _pruned_before(self, first: Finding) -> Finding | None:
        """A finding that is only likely, after layer blocks pruning removed: it may as well be a difference born
        in those blocks that stayed within their rounding and grew after them. The blocks are then named."""
        if first.score >= CERTAIN or first.producer is None:
            return None
        gaps = [f for f in self.findings if f.producer is not None and f.producer.kind == "pruned"
                and f.producer.event <= first.producer.event and f is not first]
        if not gaps:
            return None
        top = first.top()
        gaps[-1].note = (f"or in {first.node.module_path} after them, where a difference beyond rounding shows "
                         f"({top.test if top else 'a'} test, {first.score:.2f} of its threshold)")
        gaps[-1].evidence.extend(first.evidence)
        return gaps[-1]

    def verdict(self) -> Verdict:
        findings = self.run()
        first = next((f for f in findings if f.flagged), None)
        weighted = files_weighted(self)  # a changed weight whose module's outputs nothing compared
        if weighted is not None and weighted.flagged and (first is None or first.producer is None
                                                          or weighted.producer.event < first.producer.event):
            first = weighted
        if first is not None:
            return Verdict("files", "diverge", self._pruned_before(first) or first, findings=findings)
        if not findings:
            return Verdict("files", "nothing", reason="no aligned float tensors with full values on both sides")
        open_ = next((f for i, f in enumerate(findings) if f.unresolved and not _measured_inside(f, findings[i + 1:])),
                     None)
        if open_ is not None:
            d = open_.stats
            reason = (f"unresolved at {open_.node.module_path}: differs by {d.rms:.2g} (RMS, {d.ulps:.3g} u of "
                      f"{dtype_name(d.u)}) and nothing measured tells a correct kernel's rounding from a bug")
            return Verdict("files", "unresolved", open_, reason=reason, findings=findings)
        worst = max(findings, key=lambda f: f.stats.ulps if math.isfinite(f.stats.ulps) else 0.0)
        if all(f.stats.rel == 0 for f in findings):
            return Verdict("files", "equal", reason="every compared tensor is equal bit for bit", findings=findings)
        last = findings[-1].stats
        u = last.u or worst.stats.u
        reason = (
            f"the outputs differ by {last.ulps:.3g} u of {dtype_name(u)} (at most {worst.stats.ulps:.3g} u, at "
            f"{worst.node.module_path}), and call by call no difference grows beyond the rounding "
            + ("both traces measured" if self.measured_places else f"of {dtype_name(u)}")
        )
        return Verdict("files", "rounding", reason=reason, findings=findings)


def _measured_inside(open_: Finding, later: list[Finding]) -> bool:
    """Whether a tensor of ``open_``'s call, or of a call inside it, after ``open_`` was judged on both sides'
    measured rounding (and, the verdict having found nothing flagged, not proven different): an unmeasured
    tensor inside a call (its own code, e.g. attention's core) is then settled by the call's measured outputs,
    which a bug there would make differ beyond rounding."""
    return any(any(n is open_.node for n in (f.node, *f.node.ancestors()))
               for f in later if any(e.test == "proven" for e in f.evidence))


def _common(a: Node, b: Node):
    """The innermost call holding both ``a`` and ``b`` (one of them when it holds the other)."""
    held = {id(n) for n in (a, *a.ancestors())}
    return next((n for n in (b, *b.ancestors()) if id(n) in held), a)
