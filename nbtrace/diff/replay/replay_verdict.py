"""The verdict from replay: which port module, run on the reference's own inputs, is off beyond rounding.

For each replayed call (``replay.Replayed``), in units of the dtype's ``u``:

- math: ``port64(x)`` against the reference's output. For a correct port this is the
  reference's own rounding, about the port's own rounding (``port(x)`` vs ``port64(x)``) or
  one rounding of the exact result, whichever is larger;
- the same difference tested for a global scale or a dependence on the value (nothing is
  inherited: an approximation such as GELU tanh vs exact is smaller than one bf16 rounding,
  but systematic);
- lost precision: the port's own rounding far more coherent along rows than the
  reference's (a variance or maximum kept in the model dtype instead of float32: exact in
  float64, so invisible to the math test).

A call is flagged at a score >= 1. The difference is born in the first flagged call (in
call order) none of whose replayed descendants is flagged: its own code. Where a call
could not be replayed, the verdict from files answers for it (``with_fallback``).
"""

from __future__ import annotations

from ..verdict.findings import Finding, Verdict
from .replay import Replayed
from ..measure.rounding import coherence, replay_math, replay_precision


def judge(r: Replayed) -> Finding | None:
    """The finding of one replayed call (None when it was not replayed)."""
    if r.problem is not None or r.own is None or r.math is None or r.rounding is None or r.ideal is None:
        return None
    m, q, u = r.math, r.rounding, r.own.u or 1.0
    finding = Finding(r.a, r.own, 0.0, own=r.own.rel)
    finding.evidence.append(replay_math(m.rel, q.rel, r.ideal, u))
    if m.rel > 0:
        what = "replayed, the port's float64 output"
        finding.evidence.extend(coherence(m, [], what, "replay"))
    finding.evidence.append(replay_precision(q.row_z, m.row_z, r.own.rel / u))
    return finding


def replay_verdict(results: list[Replayed]) -> Verdict:
    """The first flagged replayed call with no flagged replayed call inside it, or "rounding"."""
    findings = {id(r.a): f for r in results if (f := judge(r)) is not None}
    flagged = {key for key, f in findings.items() if f.flagged}
    ordered = [findings[id(r.a)] for r in results if id(r.a) in findings]
    for r in results:  # call order
        if id(r.a) not in flagged or any(id(d) in flagged for d in r.a.walk() if d is not r.a):
            continue
        return Verdict("replay", "diverge", findings[id(r.a)], findings=ordered)
    if not findings:
        return Verdict("replay", "nothing", reason="no call could be replayed", findings=ordered)
    worst = max(findings.values(), key=lambda f: f.score)
    reason = (f"every replayed call matches the reference's output within rounding (closest to a flag: "
              f"{worst.node.module_path}, {worst.score:.2f} of its threshold)")
    return Verdict("replay", "rounding", reason=reason, findings=ordered)


def with_fallback(replayed: Verdict, results: list[Replayed], files: Verdict) -> tuple[Verdict, str | None]:
    """Replay's answer, or the files' where replay could not run the call the files name (or a call holding it)
    and replay found nothing earlier; returns the verdict and a note saying which answered, if the files did."""
    if files.state != "diverge" or files.finding is None:
        return replayed, None
    by_node = {id(r.a): r for r in results}
    node = files.finding.node
    chain = [node, *node.ancestors()]
    blocked = next((n for n in chain if id(n) in by_node and by_node[id(n)].problem is not None), None)
    blocked = blocked or (node if id(node) not in by_node else None)
    answer = replayed.finding.node if replayed.finding is not None else None
    if blocked is None or answer is node:
        return replayed, None  # replay ran it (and what holds it): trust replay
    order = {id(r.a): i for i, r in enumerate(results)}
    if answer is not None and answer not in chain and order.get(id(answer), -1) < order.get(id(node), 0):
        return replayed, None  # replay found something earlier
    why = by_node[id(blocked)].problem if id(blocked) in by_node else "it has no counterpart in the port"
    note = f"{blocked.module_path} could not be replayed ({why})"
    if answer is not None and answer in chain:
        note += f"; replay narrows the difference down to {answer.module_path}, the files name {node.module_path}"
    return files, note + ": this is the verdict from the trace files"
