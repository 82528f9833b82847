"""Where a difference is born, as the public objects say it: a verdict's finding made a ``FirstDivergence``,
every aligned call's ``CallDifference``, and which compared tensors carry the difference.

``apply_verdict`` is what a comparison of full tensors runs after the verdict from files
(``files_verdict.py``) or from replay (``replay_verdict.py``): it fills
``Comparison.first_divergence``, ``Comparison.suspects`` and each ``Match.difference``, and
sets ``TensorDiff.ok`` of full tensors to "carries no difference beyond rounding": False
from the call where the difference is born on, wherever the difference it handed on is
more than rounding, so the tree colours agree with the verdict.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...core.node import Node
from .divergence import FirstDivergence, b_only_between, unobserved_between
from .evidence import CallDifference
from .files_verdict import UNKNOWN_INPUTS, FileVerdict
from .findings import Finding, Verdict
from ..align.flow import Slot
from ..measure.metrics import TensorDiff
from ..measure.rounding import B_CODE, B_LEAF, DECISIVE, brief, confidence
from .weights import serious_inside

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison
    from ..replay.replay import Replayed


def judge_from_files(comparison: Comparison) -> FileVerdict:
    """Run the verdict from the two trace files and fill the comparison with it; returns the judge (replay
    reuses its data flows and per-tensor statistics)."""
    matches = {id(m.a): m for m in comparison.matches}
    judge = FileVerdict(comparison.flows, matches, comparison.weights, comparison._measured)
    verdict = judge.verdict()
    comparison._files_verdict = verdict
    apply_verdict(comparison, judge, verdict)
    return judge


def apply_verdict(comparison: Comparison, judge: FileVerdict, verdict: Verdict,
                  divergence: FirstDivergence | None = None) -> None:
    """Fill the comparison from ``verdict`` (``divergence``: one replay already made, else made from files)."""
    if divergence is None and verdict.state == "diverge" and verdict.finding is not None:
        divergence = file_divergence(comparison, judge, verdict.finding)
    comparison.first_divergence = divergence
    comparison.unresolved = None
    if verdict.state == "unresolved" and verdict.finding is not None:
        comparison.unresolved = (verdict.finding.node.module_path, verdict.reason)
    seen: set[str] = set()
    comparison.suspects = []
    for finding in verdict.suspects:
        if finding.node.module_path not in seen:
            seen.add(finding.node.module_path)
            comparison.suspects.append((finding.node.module_path, finding.score))
    fill_differences(comparison, judge, verdict)
    mark_carried(comparison, judge, divergence)
    comparison._report = None


# -- the first divergence --------------------------------------------------------------------
def file_divergence(comparison: Comparison, judge: FileVerdict, finding: Finding) -> FirstDivergence:
    """The FirstDivergence of a finding of the verdict from files."""
    producer, slot = finding.producer, finding.slot
    assert producer is not None and slot is not None
    place, diff = judge.place(slot)
    culprit, seen = producer.node, place.node
    events = judge.flow_a.events
    bad = producer.event
    good = next((i for i in range(bad - 1, -1, -1) if _compared(comparison, events[i].node, events[i].io)), -1)
    unobserved, _ = unobserved_between(comparison, events, good, bad, culprit, seen)
    pruned = None
    if producer.gap is not None:
        pruned = (f"{producer.gap.prefix}.{producer.gap.first}", f"{producer.gap.prefix}.{producer.gap.last}")
    seen_match = comparison.match_of(seen)
    top = finding.top()
    sure = confidence(finding.score) if finding.note != UNKNOWN_INPUTS else "likely"
    result = FirstDivergence.blaming(
        comparison, culprit,
        observed_path=seen.module_path,
        io=place.io,
        arg=place.arg,
        b_arg=diff.b_arg if diff else place.arg,
        basis=diff.basis if diff else "tensors",
        max_abs=diff.max_abs if diff else None,
        max_rel=diff.max_rel if diff else None,
        cosine=diff.cosine if diff else None,
        stat_diffs={},
        diffs=seen_match.diffs if seen_match else [],  # the match's own list: views find the call by it
        reason="",
        exact=pruned is None,
        unobserved=unobserved,
        pruned=pruned,
        b_only_between=b_only_between(comparison, events, good, bad),
        confidence=sure,
        evidence=_decisive_first(finding.evidence),
    )
    result.reason = _reason(result, finding, culprit, seen) + (f" ({sure}: {brief(top)})" if top else "")
    result.weights = serious_inside(comparison.weights, culprit.module_path)
    return result


def _compared(comparison: Comparison, node: Node, io: str) -> bool:
    match = comparison.match_of(node)
    return match is not None and any(d.io == io and d.ok is not None for d in match.diffs)


def _reason(div: FirstDivergence, finding: Finding, culprit: Node, seen: Node) -> str:
    kind = finding.producer.kind if finding.producer else "leaf"
    if kind == "inputs":
        return "the inputs given to the two models differ"
    if kind == "pruned" and div.pruned is not None:
        before = seen.previous_sibling()
        after = f"between {before.module_path} and {seen.module_path}" if before else f"before {seen.module_path}"
        also = f" ({finding.note})" if finding.note else ""
        return (f"born {after}: the layer blocks {div.pruned[0]} … {div.pruned[1]} in between were pruned{also}: "
                "trace with do_prune_layers=False to see which")
    if kind == "leaf":
        text = f"its inputs agree within rounding and its outputs ({div.arg}) differ beyond it"
    elif kind == "after":
        up = culprit.parent
        glue = f", or {up.label}'s own code between {culprit.label} and {seen.label} (e.g. a residual add)" if up else ""
        text = (f"everything recorded inside it agrees within rounding, but what it handed on — the inputs of "
                f"{seen.module_path} ({div.arg}) — differs beyond it: its own last step{glue}; the format keeps "
                "no outputs for calls with children")
    else:
        text = f"its inputs agree within rounding, but the {div.io}s of {div.observed_path} ({div.arg}) differ beyond " \
               "it: the difference comes from its own code"
        if seen is not culprit and seen.parent is culprit:
            text += f" before it calls {seen.name}"
        if div.unobserved:
            shown = ", ".join(p.rsplit(".", 1)[-1] for p in div.unobserved[:4])
            text += f" or from calls with nothing to compare ({shown}{'…' if len(div.unobserved) > 4 else ''})"
    if finding.note == UNKNOWN_INPUTS:
        text += f" ({UNKNOWN_INPUTS})"
    return text


# -- every call ------------------------------------------------------------------------------
def fill_differences(comparison: Comparison, judge: FileVerdict, verdict: Verdict) -> None:
    """``Match.difference`` of every aligned call: its replayed finding, else its best finding from files (the
    one the verdict chose for the first divergence), else the difference it was handed and returned."""
    best: dict[int, Finding] = {}
    chosen = verdict.finding
    for finding in judge.run() + (verdict.findings if verdict.method == "replay" else []):
        key = id(finding.node)
        held = best.get(key)
        replayed = finding.producer is None
        if held is None or held is not chosen and (finding is chosen or replayed or finding.score > held.score):
            best[key] = finding
    for match in comparison.matches:
        finding = best.get(id(match.a))
        if finding is not None:
            u = finding.stats.u or 1.0
            match.difference = CallDifference(
                unit=finding.stats.u, out=finding.stats.rel / u, inherited=finding.inherited / u,
                own=finding.own / u if finding.own is not None else None, score=finding.score,
                evidence=_decisive_first(finding.evidence), replayed=finding.producer is None)
            continue
        ins = _largest(judge, judge.flow_a.slots(match.a, "input"))
        outs = _largest(judge, judge.flow_a.slots(match.a, "output"))
        if ins is None and outs is None:
            match.difference = None
            continue
        u = next(x.u for x in (outs, ins) if x is not None) or 1.0
        match.difference = CallDifference(
            unit=u, out=outs.rel / u if outs is not None else None,
            inherited=ins.rel / u if ins is not None else None)


def _largest(judge: FileVerdict, slots: list[Slot]):
    found = [x for x in (judge.stats(s) for s in slots) if x is not None]
    return max(found, key=lambda x: x.rel if math.isfinite(x.rel) else math.inf) if found else None


def mark_carried(comparison: Comparison, judge: FileVerdict, divergence: FirstDivergence | None) -> None:
    """``TensorDiff.ok`` of full tensors: False where the tensor carries a difference beyond rounding.

    A tensor carries it when the call where the difference is born made it (or a later call flagged on
    its own), or when it was made from a tensor that carries it and differs by more than the rounding of
    the code that made it. Integer and bool tensors keep their exact comparison.
    """
    carried: set[int] = set()
    origin = divergence.node if divergence is not None else None
    started = False
    for finding in judge.run() if origin is not None else []:
        producer, slot = finding.producer, finding.slot
        if producer is None or slot is None:
            continue
        fresh = finding.node is origin or (started and finding.flagged)
        started = started or finding.node is origin
        reads = any(id(s) in carried or id(s.source) in carried for s in producer.inputs)
        allowance = (B_LEAF if producer.kind == "leaf" else B_CODE) * finding.stats.u
        if fresh or (reads and finding.stats.rel > allowance):
            carried.add(id(slot) if slot.origin is not None else id(slot.source))  # a handed-on copy: this place
    if origin is not None and not carried:
        carried.update(id(s.source) for s in judge.flow_a.call_output(origin))
    for match in comparison.matches:
        for d in match.diffs:
            if d.basis != "tensors" or d.ok is None or d.rtol == 0:
                continue  # integers and bools round nothing: equal or not, as measured
            slot = judge.flow_a.slot(match.a, d.io, d.arg)
            hit = slot is not None and (id(slot) in carried or id(slot.source) in carried)
            d.ok = not (hit and _differs(d)) and d.problem is None


def _differs(d: TensorDiff) -> bool:
    return d.max_abs is None or d.max_abs > 0


def replay_divergence(comparison: Comparison, finding: Finding, result: Replayed) -> FirstDivergence:
    """The FirstDivergence of a call flagged by replay (its numbers: the port's output on the reference's inputs
    against the reference's recorded output)."""
    node = finding.node
    match = comparison.match_of(node)
    max_abs, max_rel, cosine = result.numbers
    top = finding.top()
    own = "its own code (its replayed calls agree)" if node.children else "it"
    inside = [d for d in node.walk() if d is not node]
    skipped = [d for d in inside if d.module_path in comparison.replay.skipped] if comparison.replay else []
    if skipped:
        own = f"its own code or one of {len(skipped)} call(s) inside it that could not be replayed"
    reason = f"run on the reference's recorded inputs, {own} differs beyond rounding"
    result_div = FirstDivergence.blaming(
        comparison, node,
        observed_path=node.module_path,
        io="output",
        arg=result.output.rsplit(" ", 1)[-1] if result.output else "out",
        b_arg="out",
        basis="tensors",
        max_abs=max_abs,
        max_rel=max_rel,
        cosine=cosine,
        stat_diffs={},
        diffs=match.diffs if match else [],
        reason=reason + (f" ({confidence(finding.score)}: {brief(top)})" if top else ""),
        confidence=confidence(finding.score),
        evidence=_decisive_first(finding.evidence),
        replayed=True,
    )
    result_div.weights = serious_inside(comparison.weights, node.module_path)
    return result_div


def _decisive_first(evidence: list) -> list:
    """Evidence as every view lists it: the decisive rules first (a model of rounding never decides), by score."""
    return sorted(evidence, key=lambda e: (e.test not in DECISIVE, -e.score))
