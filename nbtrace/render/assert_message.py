"""The message a failed ``nbtrace.testing`` assertion carries: a few lines a CI log shows in full.

It is the verdict's own words (``verdict.py``), cut to what a reader of a failed test needs: where the two
implementations part ways (module, operation and line), the numbers and the rule that decided.
"""

from __future__ import annotations

import textwrap
from typing import Any

from .verdict import verdict_words
from .vocabulary import DECIDED_BY_LABEL, END_TO_END_LABEL, PRECISION_LABEL

#: the first line of each kind of failure
FAILURE_HEADLINES = {
    "diverge": "nbtrace: the port computes another function than the reference",
    "unresolved": "nbtrace: the comparison is unresolved (nothing decided either way)",
    "precision": "nbtrace: the port computes the same function but loses precision the reference keeps",
}
#: the width a message's lines are wrapped at (a CI log's, a terminal's)
WIDTH = 100


def failure_message(comparison: Any, kind: str) -> str:
    """The lines of a failure of ``kind`` ("diverge", "unresolved" or "precision") for ``comparison`` (a
    Comparison or a StepsComparison)."""
    inner, divergence, step = _inner(comparison)
    words = verdict_words(inner, divergence) if inner is not None else None
    lines = [FAILURE_HEADLINES[kind]]
    if kind == "diverge" and words is not None and words.divergence is not None:
        d = words.divergence
        lines.append(d.headline + (f" at step {step}" if step else ""))
        lines.append(f"  {d.reason}")
        if d.operation:
            lines.append(f"  {d.operation}")
        if d.evidence and d.evidence[0].sentence not in d.reason:
            lines.append(f"  evidence{f' ({d.confidence})' if d.confidence else ''}: {d.evidence[0].line}")
        elif not d.evidence and d.numbers:
            lines.append(f"  {d.numbers}")
    elif kind == "precision" and words is not None:
        lines.extend(f"  {PRECISION_LABEL}: {line}" for line in words.precision[:1])
    elif words is not None:
        lines.append(words.headline)
    elif kind == "diverge":
        lines.append(comparison.summary().splitlines()[0])
    if words is not None and words.end_to_end:  # right under the headline: the line porters check first
        lines.insert(min(2, len(lines)), f"  {END_TO_END_LABEL}: {words.end_to_end}")
    if words is not None and words.decided_by:
        lines.append(f"  {DECIDED_BY_LABEL}: {words.decided_by}")
    return "\n".join(_wrapped(line) for line in lines)


def _inner(comparison: Any) -> tuple[Any, Any, int]:
    """The Comparison that decided (a run's first diverging step, or its first unresolved one), the divergence
    to show and its step."""
    steps = getattr(comparison, "steps", None)
    if steps is None:
        return comparison, None, 0
    first = comparison.first_divergence
    if first is not None:
        return comparison.comparison(first.step), first, first.step
    for result in steps:
        if result.status != "match":
            return comparison.comparison(result.step), None, result.step
    return None, None, 0


def _wrapped(line: str) -> str:
    indent = " " * (len(line) - len(line.lstrip()))
    return textwrap.fill(line, WIDTH, subsequent_indent=indent + "  ", break_long_words=False,
                         break_on_hyphens=False)
