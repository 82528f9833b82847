"""The verdict of the float64 twins, as the public objects say it (``twin_verdict.py`` decides).

``apply_twin`` fills a comparison whose two sides hold float64 twins: ``first_divergence`` (the call where the two
functions part ways, with the twin's evidence, and the recorded tensors' numbers where the files hold them),
``suspects``, each ``Match.difference`` (its best twin score; the difference in units of float64) and
``TensorDiff.ok`` of every recorded tensor whose twin was compared (False where it carries a difference of
function). Where the twins could not decide (``open``), the comparison keeps what the other rules said and a note
says why the twins stopped.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...core.node import Node
from ...core.dtypes import is_float
from ...core.structure import shows_pruning
from ..measure.metrics import TensorDiff
from ..measure.noise import dtype_name, unit_roundoff
from ..measure.rounding import SUSPECT, brief, confidence
from ..ranks.twin_shards import reading_words
from .divergence import FirstDivergence, b_only_between
from .evidence import CallDifference, Evidence
from .twin_calls import Counterparts, HiddenCall
from .twin_pairs import CONSTANT_ROUNDINGS
from .twin_verdict import TwinVerdict
from .weights import serious_inside

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison

DECIDED = ("diverge", "agree", "inputs")


def apply_twin(comparison: Comparison, verdict: TwinVerdict) -> None:
    """Make ``verdict`` the comparison's answer (``method == "twin"``)."""
    comparison.method = "twin"
    comparison.twin = verdict
    comparison.unresolved = None
    comparison.first_divergence = _divergence(comparison, verdict) if verdict.state != "agree" else None
    scores = verdict.scores()
    comparison.suspects = []
    for event in verdict.events:
        if event is verdict.event:
            break
        best = event.worst
        if best is not None and SUSPECT <= best.score < 1.0 and all(p != event.node.module_path
                                                                    for p, _ in comparison.suspects):
            comparison.suspects.append((event.node.module_path, best.score))
    by_place = {(id(e.node), p.io, p.arg): p for e in verdict.events for p in e.decided}
    by_call: dict[int, list] = {}
    for e in verdict.events:
        by_call.setdefault(id(e.node), []).extend(e.decided)
    first = comparison.first_divergence
    for match in comparison.matches:
        score = scores.get(id(match.a))
        pairs = by_call.get(id(match.a), [])
        if score is None:
            match.difference = None
        else:  # the twins' difference in units of the run's own rounding: what it is beside the dtype's rounding
            unit = max((unit_roundoff(d.dtype, d.b_dtype) for d in match.diffs if is_float(d.dtype)
                        and is_float(d.b_dtype)), default=2.0**-24)
            outs = [_relative(p) for p in pairs if p.io == "output" and p.a.rms]
            ins = [_relative(p) for p in pairs if p.io == "input" and p.a.rms]
            out, inherited = (max(outs) if outs else None), (max(ins) if ins else None)
            own = math.sqrt(max(out**2 - (inherited or 0.0) ** 2, 0.0)) if out is not None else None
            evidence = sorted((p.evidence for p in pairs if p.evidence is not None), key=lambda e: -e.score)[:1]
            if first is not None and first.node is match.a:
                evidence = list(first.evidence)  # the blamed call's evidence is the verdict's: shown once
            match.difference = CallDifference(unit=unit, out=out / unit if out is not None else None,
                                              inherited=inherited / unit if inherited is not None else None,
                                              own=own / unit if own is not None else None, score=score,
                                              evidence=evidence)
        for d in match.diffs:
            pair = by_place.get((id(match.a), d.io, d.arg))
            if pair is not None and d.ok is not None and d.problem is None:
                d.ok = pair.score < 1.0
    comparison._report = None


def _relative(pair) -> float:
    """A compared tensor's twin difference relative to its size; 0 within the twins' own precision (float64
    noise is no difference of function)."""
    return pair.difference / pair.a.rms if pair.score >= 1.0 and pair.a.rms else 0.0


def _divergence(comparison: Comparison, verdict: TwinVerdict) -> FirstDivergence:
    event = verdict.event
    assert event is not None and verdict.culprit is not None
    culprit, seen = verdict.culprit, event.node
    worst = event.worst
    unequal = event.unequal
    match = comparison.match_of(seen) if isinstance(seen, Node) else None
    if unequal:
        arg, b_arg = unequal[0].arg, unequal[0].b_arg
    elif worst is not None:
        arg, b_arg = worst.arg, worst.b_arg
    else:  # named by its weights alone
        arg = b_arg = "out"
    recorded = next((d for d in (match.diffs if match else []) if d.io == event.io and d.arg == arg), None)
    evidence = [_exact_evidence(d) for d in unequal] + list(event.weights)
    evidence += [p.evidence for p in sorted(event.decided, key=lambda p: -p.score) if p.evidence is not None]
    sure = confidence(max(e.score for e in evidence))
    if event.io == "output" and culprit is seen and not seen.children and (
            verdict.good is None or verdict.good.node is not seen):
        sure = "likely"  # its inputs were not compared
    unobserved = _unobserved(comparison, verdict, culprit, seen)
    events = verdict.events
    bad = event.index_in(events)
    good = verdict.good.index_in(events) if verdict.good is not None else -1
    pruned = None
    if not comparison.a.twin.events:  # pruned blocks the twin kept nothing of: they can only be bracketed
        gap = seen.gap_before() if event.io == "input" and isinstance(seen, Node) else None
        pruned = (f"{gap.prefix}.{gap.first}", f"{gap.prefix}.{gap.last}") if gap is not None else None
    holder = culprit.visible() if isinstance(culprit, HiddenCall) else culprit
    if pruned is None and isinstance(holder, Node):  # layer blocks b's trace pruned, which a holds, unseen
        set_aside = comparison._pruned_a  # ids of a's calls set aside as pruned from b
        b_pruned = shows_pruning(comparison.b) and not comparison.b.twin.events
        blocks = [n.module_path for n in holder.walk() if n.module_path in unobserved
                  and (id(n) in set_aside or b_pruned and n.is_layer_block)]
        pruned = (blocks[0], blocks[-1]) if blocks else None
    result = FirstDivergence.blaming(
        comparison, holder,
        observed_path=seen.module_path, io=event.io, arg=arg, b_arg=b_arg,
        basis=recorded.basis if recorded else "twin",
        max_abs=recorded.max_abs if recorded else None,
        max_rel=recorded.max_rel if recorded else None,
        cosine=recorded.cosine if recorded else None,
        stat_diffs=dict(recorded.stat_diffs) if recorded else {},
        diffs=match.diffs if match else [],
        reason="", unobserved=unobserved, confidence=sure, evidence=evidence[:3],
        exact=pruned is None, pruned=pruned, b_only_between=b_only_between(comparison, events, good, bad),
        rule=getattr(recorded, "rule", None),  # a side of rank folders: how the tensor was reassembled, whose piece
        wrong_ranks=dict(getattr(recorded, "wrong_ranks", {})),
    )
    if isinstance(culprit, HiddenCall):  # named from the twins inside layers the files do not hold
        result.module_path, result.call_index = culprit.module_path, culprit.call_index
    if isinstance(culprit, HiddenCall) or result.b_path is None:  # b's counterpart may be pruned from its files
        b_key, _ = Counterparts(comparison, comparison.b.twin).of(culprit)
        result.b_path = b_key.split("@", 1)[0] if b_key else None
    result.reason = _reason(verdict, culprit, seen, arg, unobserved, pruned) + f" ({sure}: {brief(evidence[0])})"
    if worst is not None and result.rule is None:  # a tensor-parallel twin's pieces, where no reassembly said how
        result.reason += reading_words(worst)
    if isinstance(culprit, HiddenCall):
        result.reason += (f"; pruning left {culprit.module_path} out of the files: the float64 twins kept it, and "
                          f"the tree marks {holder.module_path}, which holds it")
    result.weights = serious_inside(comparison.weights, culprit.module_path)
    return result


def _exact_evidence(d: TensorDiff) -> Evidence:
    if d.basis == "shape":  # from inputs that agree: no rounding makes another shape
        return Evidence("exact", math.inf, 0.0, math.inf, f"its {d.io} {d.arg} has another shape ({d.problem})",
                        "files")
    return Evidence("exact", math.inf, 0.0, math.inf, f"its {d.io} {d.arg} differs (an integer or bool tensor)",
                    "files")


def _reason(verdict: TwinVerdict, culprit: Node, seen: Node, arg: str, unobserved: list[str],
            pruned: tuple[str, str] | None) -> str:
    event = verdict.event
    assert event is not None
    if verdict.state == "inputs":
        return "the inputs given to the two models differ"
    if pruned is not None:
        before = seen.previous_sibling()
        while before is not None and before.module_path in unobserved:  # itself among the blocks left unseen
            before = before.previous_sibling()
        after = f"between {before.module_path} and {seen.module_path}" if before else f"before {seen.module_path}"
        return (f"born {after}: the layer blocks {pruned[0]} … {pruned[1]} in between were pruned from a trace "
                f"(trace with do_prune_layers=False to see which), or in {culprit.module_path}'s own code around them; "
                f"run in float64 from the same inputs, everything before agrees and the input {arg} of {seen.module_path} "
                "differs")
    if event.io == "output" and culprit is seen:
        if verdict.good is not None and verdict.good.node is seen:
            text = f"run in float64 from the same inputs, its inputs agree and its output ({arg}) differs"
        elif not seen.children:
            text = (f"run in float64 from the same inputs, everything before agrees and its output ({arg}) differs; "
                    "its inputs could not be compared (nothing of them is held on both sides), so the difference may "
                    "also come from the code that made them")
        else:
            text = (f"run in float64 from the same inputs, every call inside it agrees and its output ({arg}) "
                    "differs: its own code after them")
    elif verdict.handed:  # followed back through a's own twin (``twin_chain.py``)
        names = ", ".join(call.module_path for call in verdict.handed)
        return (f"run in float64 from the same inputs, everything before agrees and the input {arg} of "
                f"{seen.module_path} differs: it is, unchanged, what {names} made from tensors that agree, with "
                "nothing compared in between (the other side does that work inside another call)")
    elif not culprit.children and culprit is not seen:  # moved to a fused call (``twin_verdict._fused_inside``)
        where = "output" if event.io == "output" else "input"
        return (f"run in float64 from the same inputs, everything before agrees and the {where} {arg} of "
                f"{seen.module_path} differs; in between, {culprit.module_path} has no counterpart of its own (the "
                "other side splits it) and its fused weight is not what the other side's parts hold (weights that "
                "differ)")
    else:
        where = "output" if event.io == "output" else "input"
        text = (f"run in float64 from the same inputs, everything before agrees and the {where} {arg} of "
                f"{seen.module_path} differs: the difference comes from its own code")
        if seen.parent is culprit and event.io == "input":
            text += f" before it calls {seen.name}"
    if unobserved:
        shown = ", ".join(p.rsplit(".", 1)[-1] for p in unobserved[:4])
        text += f" or from calls with nothing to compare ({shown}{'…' if len(unobserved) > 4 else ''})"
    return text


def _unobserved(comparison: Comparison, verdict: TwinVerdict, culprit, seen) -> list[str]:
    """a's calls inside the blamed one, between the last agreeing event and the flagged one, that nothing
    compared (outermost ones); calls that compute nothing (an Identity, a Dropout in eval) are not among them."""
    compared = {id(e.node) for e in verdict.events if e.compared}
    start = verdict.good.node if verdict.good is not None else None
    found: list[str] = []
    began = start is None
    for node in culprit.walk():
        if node is start:
            began = True
            continue
        if node is seen:
            break
        idle = id(node) in comparison._idle_a
        if began and node is not culprit and id(node) not in compared and not idle and not any(
                a.module_path in found for a in node.ancestors()):
            found.append(node.module_path)
    return found


def advice(comparison: Comparison) -> str:
    """What would decide an unresolved comparison, given how its two sides were traced."""
    from .twin_verdict import padding_mismatch, usable

    missing = usable(comparison)
    if missing is not None and comparison.a.twin is not None and comparison.b.twin is not None \
            and padding_mismatch(comparison.a.twin, comparison.b.twin) is not None:
        return f"to decide, {missing}, or compare the reference's folder with the live port, compare(folder, port)"
    if missing is not None:
        return (f"to decide, {missing}: trace both with nbtrace.trace, which records each forward's float64 twin by "
                "default, or compare the reference's folder with the live port, compare(folder, port)")
    verdict = getattr(comparison, "twin", None)
    note = twin_note(verdict) if verdict is not None else None
    return (f"{note}; the live modules decide what the twins could not: compare(folder, port) or "
            "compare(reference, port, inputs=...)") if note else "compare the live port, compare(folder, port)"


def twin_note(verdict: TwinVerdict) -> str | None:
    """What a comparison's notes say of twins that could not decide."""
    if verdict.state != "open" or verdict.open_at is None:
        return None
    return f"the float64 twins decided nothing from {verdict.open_at.module_path} on: {verdict.note}"


def constants_note(verdict: TwinVerdict) -> str | None:
    """Where the two sides' float constants differ, or one side stores its weights in a narrower dtype, how much
    of a difference of function their rounding hides."""
    if verdict.rounded is not None and not verdict.constants_differ:
        side = "the reference's" if verdict.rounded == "a" else "the port's"
        return (f"one side stores its weights in bfloat16: its float64 twin was compared with {side} twin run with "
                "its weights and inputs rounded to bfloat16, so that rounding is accounted exactly and a difference "
                "of function smaller than it is still seen")
    if not verdict.constants_differ and not verdict.stored:
        return None
    last = next((e for e in reversed(verdict.events) if e.decided), None)
    pair = max(last.decided, key=lambda p: p.evidence.threshold) if last is not None else None
    size = pair.evidence.threshold / pair.a.rms if pair is not None and pair.a.rms else None
    hidden = f" (up to {size:.2g} relative at {last.node.module_path})" if size is not None else ""
    if verdict.stored:
        name = dtype_name(verdict.stored)
        return (f"one side stores its weights in {name} (a port's weights are the original's rounded into its dtype, "
                f"its inputs too): the twins allow what that rounding moves{hidden}, and a smaller difference of "
                f"function (an activation's approximation, a norm's eps) is not seen; compare the port with a {name} "
                f"copy of the original (original.to(torch.{name})) to see those")
    return ("the float constants each side computed for itself differ (a rotary or position table held by one side, "
            "computed in the forward by the other, or by other arithmetic): the twins allow up to "
            f"{CONSTANT_ROUNDINGS:g} of their roundings{hidden}, and a smaller difference of function is not seen")



