"""The verdict from replay: which port module, run on the reference's own inputs, computes another function.

For each replayed call (``replay.Replayed``), RMS norms against the port's float64 result ``T_b``:

- replayed (``rounding.replayed``): ``‖y_a − T_b‖ > k·e + floor``, with ``e`` the reference's own
  rounding where it was measured (its trace's ``measure_rounding``, or the reference live: ``‖y_a −
  T_a‖``), k = 2; else the port's own rounding ``‖p − T_b‖`` (at least one rounding of ``T_b`` to
  the dtype) standing in, k = 3;
- both live (``rounding.live``): ``‖T_a − T_b‖ > 2 (r_a + r_b) + floor``, r each side's float32
  result against its float64 one.

A port whose own output reproduces the reference's output exactly cannot be flagged (its float64
result is within its own rounding of it). The difference is born in the first flagged call (in
call order) none of whose replayed descendants is flagged: its own code. Where a call could not be
replayed, the verdict from files answers for it (``with_fallback``).
"""

from __future__ import annotations

from ..measure import rounding
from ..verdict.findings import Finding, Verdict
from .replay import Replayed


def judge(r: Replayed) -> Finding | None:
    """The finding of one replayed call (None when it was not replayed)."""
    if r.problem is not None or r.own is None or r.math is None or r.rounding is None:
        return None
    finding = Finding(r.a, r.own, 0.0, own=r.own.rel)
    if r.own.rms == 0:  # the port reproduces the reference's output bit for bit: nothing to flag
        return finding
    finding.evidence.append(rounding.replayed(r.difference, r.reference_own, r.port_own, r.one, r.scale))
    if r.live is not None:
        finding.evidence.append(rounding.live(*r.live, r.scale))
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
    by_node = {id(r.a): r for r in results}
    if files.state == "unresolved" and files.finding is not None and replayed.state in ("rounding", "diverge"):
        node = files.finding.node
        held = by_node.get(id(node))
        answer = replayed.finding.node if replayed.finding is not None else None
        later = answer is not None and not _inside(answer, node) and node.index < answer.index  # call order
        if (held is None or held.problem is not None or held.ambiguous) and (answer is None or later):
            why = ("its output was not recorded and the tensors that may be it disagree" if held is not None
                   and held.problem is None else (held.problem if held is not None else "it was not replayed"))
            note = f"replay cannot settle {node.module_path} ({why})"
            if later:  # what replay flags after it may be its own bug, or the same bug again: the earlier one first
                note += f"; replay flags {answer.module_path}, which runs after it"
            return files, note
    if files.state != "diverge" or files.finding is None:
        return replayed, None
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


def _inside(node, outer) -> bool:
    """True when ``node`` is ``outer`` or runs inside it."""
    return node is outer or any(a is outer for a in node.ancestors())

