"""What limits a comparison, said up front: pruned or printed traces, an alignment that covers little."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.structure import has_pruning_gaps

if TYPE_CHECKING:  # pragma: no cover
    from .comparison import Comparison

#: Below this share of a's calls aligned with b, "agree" is not said: the verdict is "unresolved".
MIN_COVERAGE = 0.5


def comparison_notes(comparison: Comparison) -> list[str]:
    """Sentences for the top of every view of ``comparison``; empty when nothing limits it."""
    notes = []
    pruned = [name for name, trace in (("a", comparison.a), ("b", comparison.b)) if has_pruning_gaps(trace)]
    if pruned:
        notes.append(
            f"{' and '.join(pruned)} {'was' if len(pruned) == 1 else 'were'} traced with do_prune_layers=True: "
            "a difference born inside a pruned layer block can only be blamed on its parent "
            "(trace with do_prune_layers=False to see every layer)"
        )
    bases = {d.basis for m in comparison.matches for d in m.diffs if d.basis}
    if bases & {"printed", "stats"} and "tensors" not in bases:
        notes.append(
            "values were compared as printed (use_repr=True: 5 significant digits, the edges of big tensors): "
            "trace with use_repr=False for full tensors, exact numbers and own vs inherited differences"
        )
    coverage = comparison.coverage
    if coverage < MIN_COVERAGE:
        notes.append(
            f"only {coverage:.0%} of a's calls could be aligned with b: too little to say that they agree "
            "(pass rename={regex: replacement} to pair calls by module path)"
        )
    if comparison.rename is not None and comparison.alignment.method == "rename":
        from .align import align

        without = len(align(comparison.a, comparison.b, None).pairs)
        if without > len(comparison.matches):
            notes.append(
                f"rename aligned {len(comparison.matches)} calls, fewer than the {without} aligned without it: "
                "check its patterns against b's module paths"
            )
    return notes
