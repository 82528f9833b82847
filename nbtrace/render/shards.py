"""The words for comparisons with a tensor-parallel side: how tensors were reassembled, which rank differs.

Every view (the text summary and table, the static HTML, the DataFrame, the widget's detail pane)
takes these phrases from here, so a rule and a rank read the same everywhere.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ..core.ranks import distributed_info
from ..diff.ranks.ranked import ShardedDiff
from .vocabulary import format_number

if TYPE_CHECKING:  # pragma: no cover
    from ..core.trace import Trace
    from ..diff.comparison import Comparison
    from ..diff.verdict.divergence import FirstDivergence
    from ..diff.measure.metrics import TensorDiff


def is_ranked(comparison: Comparison) -> bool:
    """True when a side of the comparison is a tensor-parallel run (its tensors were reassembled)."""
    return bool(comparison.a.ranks or comparison.b.ranks)


def rule_label(diff: TensorDiff) -> str:
    """``Shard(2) (DTensor)``, ``Replicate() (inferred)``; empty for a tensor not reassembled."""
    if not isinstance(diff, ShardedDiff) or diff.rule is None:
        return ""
    return f"{diff.rule} ({'inferred' if diff.inferred else 'DTensor'})"


def _piece(rule: str | None) -> str:
    return "copy" if rule == "Replicate()" else "shard"


def ranks_phrase(wrong: dict[int, float], rule: str | None, world: int | None = None) -> str:
    """``only rank 1's shard differs (max_abs 1.85)``; ``ranks 0, 2's copies differ …``; empty when none."""
    if not wrong:
        return ""
    numbers = ", ".join(f"{format_number(d)}" for _, d in sorted(wrong.items()))
    if len(wrong) == 1:
        (rank, _), = wrong.items()
        return f"only rank {rank}'s {_piece(rule)} differs (max_abs {numbers})"
    ranks = ", ".join(map(str, sorted(wrong)))
    every = world is not None and len(wrong) == world
    return f"{'every rank' if every else 'ranks ' + ranks}'s {_piece(rule)}s differ (max_abs {numbers})"


def cell(diff: TensorDiff) -> str:
    """A table cell: the rule and the ranks whose piece differs (``Shard(2) (DTensor) r1``)."""
    label = rule_label(diff)
    if isinstance(diff, ShardedDiff) and diff.wrong_ranks:
        label += " r" + ",".join(map(str, sorted(diff.wrong_ranks)))
    return label


def call_note(diffs: list[TensorDiff]) -> str:
    """One line per reassembled tensor of a call, for the widget's detail pane."""
    lines = []
    for d in diffs:
        if not isinstance(d, ShardedDiff):
            continue
        what = rule_label(d) or "not reassembled"
        extra = ranks_phrase(d.wrong_ranks, d.rule) or d.note or (d.problem if d.ok is None else "")
        lines.append(f"{d.io} {d.arg}: {what}" + (f"; {extra}" if extra else ""))
    return "\n".join(lines)


def divergence_line(first: FirstDivergence) -> str:
    """What the first divergence says about ranks, or empty for a comparison without a ranked side."""
    if first.rule is None and not first.wrong_ranks:
        return ""
    diff = next((d for d in first.diffs if d.io == first.io and d.arg == first.arg), None)
    layout = rule_label(diff) if diff is not None else (first.rule or "")
    phrase = ranks_phrase(first.wrong_ranks, first.rule)
    if not phrase:
        phrase = ("no single rank to blame: the pieces of a Partial cannot be checked alone"
                  if first.rule and first.rule.startswith("Partial") else "no single rank's piece stands out")
    return f"{phrase}; reassembled by {layout}" if layout else phrase


def reassembly_line(comparison: Comparison) -> str:
    """How the ranked side's tensors were reassembled, counted by rule; empty without a ranked side."""
    if not is_ranked(comparison):
        return ""
    side = "b" if comparison.b.ranks else "a"
    ranked = comparison.b if comparison.b.ranks else comparison.a
    counts: Counter[str] = Counter()
    missing = 0
    for match in comparison.matches:
        for d in match.diffs:
            if isinstance(d, ShardedDiff):
                if d.rule is None or d.ok is None:
                    missing += 1
                else:
                    counts[rule_label(d)] += 1
    info = distributed_info(ranked)
    world = f" of {info.world_size}" if info is not None else ""
    rules = ", ".join(f"{label} ×{n}" for label, n in sorted(counts.items())) or "none"
    tail = f"; {missing} not reassembled" if missing else ""
    return f"{side}: {len(ranked.ranks)} ranks{world} reassembled: {rules}{tail}"


def one_rank_hint(trace: Trace, side: str) -> str:
    """A note when a side is one rank's trace of a multi-rank run (its sharded tensors are local shards)."""
    if trace.ranks:
        return ""
    info = distributed_info(trace)
    if info is None or info.world_size < 2 or not info.layouts:
        return ""
    return (f"{side} is rank {info.rank}'s trace of a {info.world_size}-rank run, and its DTensors are local shards: "
            f"trace with ranks='all' and compare the folder to compare whole tensors")
