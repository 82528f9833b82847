"""What limits a comparison, said up front: pruned or printed traces, an alignment that covers little."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.structure import has_pruning_gaps
from ..measure.noise import dtype_name

if TYPE_CHECKING:  # pragma: no cover
    from ...core.trace import Trace
    from ..comparison import Comparison

#: Below this share of a's calls aligned with b, "agree" is not said: the verdict is "unresolved".
MIN_COVERAGE = 0.5


def comparison_notes(comparison: Comparison) -> list[str]:
    """Sentences for the top of every view of ``comparison``; empty when nothing limits it."""
    notes = []
    pruned = [name for name, trace in (("a", comparison.a), ("b", comparison.b)) if has_pruning_gaps(trace)]
    if pruned:
        seen = comparison.method == "twin" and all(t.twin is not None and t.twin.events
                                                   for t in (comparison.a, comparison.b))
        notes.append(
            f"{' and '.join(pruned)} {'was' if len(pruned) == 1 else 'were'} traced with do_prune_layers=True: "
            + ("the files hold no pruned layer block, their float64 twins hold every call: a difference born "
               "inside one is named there, the tree marking the call that holds it" if seen else
               "a difference born inside a pruned layer block can only be blamed on its parent "
               "(trace with do_prune_layers=False to see every layer)")
        )
    bases = {d.basis for m in comparison.matches for d in m.diffs if d.basis}
    if comparison.method == "twin":
        pass  # the float64 twins decided: how values were recorded limits nothing
    elif bases & {"printed", "stats"} and "tensors" not in bases:
        notes.append(
            "values were compared as printed (use_repr=True: 5 significant digits, the edges of big tensors), "
            "each against a per-element tolerance, which cannot tell what a call added from what it inherited: "
            "trace with use_repr=False for full tensors, exact numbers and own vs inherited differences"
        )
    elif comparison.method == "tolerance" and (comparison.rtol is not None or comparison.atol is not None):
        notes.append("rtol/atol given: each tensor is judged against that per-element tolerance, which cannot tell "
                     "what a call added from what it inherited (leave them out for the noise-aware verdict)")
    sides = twin_sides_note(comparison)
    if sides:
        notes.append(sides)
    twin = getattr(comparison, "twin", None)
    if twin is not None:
        from .twin_born import constants_note, twin_note

        note = twin_note(twin) if comparison.method != "twin" else constants_note(twin)
        if note:
            notes.append(note)
    if comparison.method != "twin" and comparison.a.twin is not None and comparison.b.twin is not None:
        from .twin_verdict import padding_mismatch

        why = padding_mismatch(comparison.a.twin, comparison.b.twin)
        if why:  # never silently: which side left out what, and how to declare it
            notes.append(f"not decided by the float64 twins: {why}")
    if comparison.method == "twin":
        from ..ranks.twin_shards import ranks_note

        notes.extend(n for n in (ranks_note(s, t) for s, t in (("a", comparison.a), ("b", comparison.b))) if n)
    notes.extend(verdict_notes(comparison))
    coverage = comparison.coverage
    if coverage < MIN_COVERAGE:
        notes.append(
            f"only {coverage:.0%} of a's calls could be aligned with b: too little to say that they agree "
            "(pass rename={regex: replacement} to pair calls by module path)"
        )
    ambiguous = comparison.alignment.ambiguous
    if ambiguous:
        shown = ", ".join(f"{x.module_path} ↔ {y.module_path}" for x, y in ambiguous[:3])
        notes.append(f"{len(ambiguous)} pair(s) of calls could not be told apart by structure and were paired by "
                     f"their values ({shown}{'…' if len(ambiguous) > 3 else ''}): pass rename= to pair them by path")
    if comparison.rename is not None and comparison.alignment.method == "rename":
        from ..align.align import align

        without = len(align(comparison.a, comparison.b, None, comparison.flows).pairs)
        if without > len(comparison.matches):
            notes.append(
                f"rename aligned {len(comparison.matches)} calls, fewer than the {without} aligned without it: "
                "check its patterns against b's module paths"
            )
    return notes


def twin_presence(trace: Trace) -> str:
    """Whether ``trace`` holds its float64 twin, in a few words: ``nbtrace show`` prints them, and a comparison's
    notes where the two sides differ in it or one's was left out (then with the one line that says why)."""
    twin = trace.twin
    if twin is None:
        return "none: traced with measure_rounding=False, or not by nbtrace.trace"
    if twin.skipped or not twin.calls:
        return f"none: {twin.skipped or 'no call was recorded'}"
    return f"recorded at {len(twin.calls)} calls"


def twin_sides_note(comparison: Comparison) -> str | None:
    """Which side holds its float64 twin, where the sides differ in it or one's was left out (a live port, re-run
    call by call, needs none)."""
    if comparison.replay is not None:
        return None
    twins = [comparison.a.twin, comparison.b.twin]
    has = [t is not None and not t.skipped and bool(t.calls) for t in twins]
    if has[0] == has[1] and not any(t is not None and t.skipped for t in twins):
        return None
    return (f"the float64 twin: a {twin_presence(comparison.a)}; b {twin_presence(comparison.b)}"
            + ("" if all(has) else " (without both twins the verdict decides from the files alone)"))


def verdict_notes(comparison: Comparison) -> list[str]:
    """What the noise-aware verdict could not settle: replay's limits, an agreement only within rounding."""
    notes = []
    replay = comparison.replay
    if replay is not None:
        if replay.skipped:
            path, why = next(iter(replay.skipped.items()))
            notes.append(f"replayed {len(replay.replayed)} of {len(replay.replayed) + len(replay.skipped)} aligned "
                         f"calls; not replayed: {len(replay.skipped)} (e.g. {path}: {why})")
        if replay.note:
            notes.append(replay.note)
    if comparison.method == "tolerance" or comparison.first_divergence is not None or not comparison.matches:
        return notes
    if getattr(comparison, "unresolved", None) is not None:
        return notes
    units = [m.difference.unit for m in comparison.matches if m.difference is not None and m.difference.out]
    if not units:
        return notes
    name = dtype_name(max(units))
    reasons = []
    if comparison.suspects:  # each view lists them (Comparison.suspects, "close to a flag")
        reasons.append(f"{len(comparison.suspects)} call(s) came close to a flag")
    if comparison.method == "files" and name in ("bfloat16", "float16") and comparison.decided_by != "measured rounding":
        reasons.append(f"an error smaller than one {name} rounding per element (an activation approximation such as "
                       "GELU tanh vs exact) is not resolved from files without measured rounding: compare(a, "
                       "port_module) replays each module on a's inputs")
    if reasons:
        notes.append(f"agree within what {name} resolves ({'; '.join(reasons)})")
    return notes
