"""A step-by-step comparison as text: its summary and the per-step table (``nbtrace diff`` on two runs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .text import comparison_summary
from .vocabulary import STATUS_WORDS, format_number

if TYPE_CHECKING:  # pragma: no cover
    from ..diff.steps.steps import StepResult, StepsComparison, Tokens


def format_count(value: int | None) -> str:
    """An integer count, ``-`` when unknown."""
    return "-" if value is None else str(value)


def step_where(step: StepResult) -> str:
    """Where a step diverges, for a table cell: the module (without the root), or why it differs."""
    if step.kind == "inputs":
        return "(fed other inputs)"
    where = step.module_path or ""
    where = where.split(".", 1)[1] if "." in where else where
    return f"{where} (KV cache)" if step.kind == "cache" else where


def format_tokens(tokens: Tokens) -> str:
    """``42``, ``42,7`` for a batch, ``?`` when unknown."""
    return "?" if tokens is None else ",".join(str(t) for t in tokens)


def step_kind(step: StepResult) -> str:
    """What kind of forward a step is: the prefill (several positions) or a one-token step."""
    length = step.input_length[0]
    if length is None:
        return f"forward {step.step}"
    return f"{length} position{'s' if length != 1 else ''} fed" + (
        f", {step.past_length[0]} in the KV cache" if step.past_length[0] else ""
    )


def _token_line(comparison: StepsComparison) -> str:
    first = comparison.first_token_step
    if first is not None:
        step = comparison.steps[first]
        return (
            f"tokens: first differ at step {first}: a picked {format_tokens(step.tokens[0])}, "
            f"b picked {format_tokens(step.tokens[1])}"
        )
    unknown = [s.step for s in comparison.steps if s.tokens_differ is None]
    if not unknown:
        return "tokens: the same at every step"
    shown = ", ".join(str(s) for s in unknown[:8]) + ("…" if len(unknown) > 8 else "")
    return f"tokens: the same where known; unknown at step(s) {shown} (trace with use_repr=False to keep the logits)"


def steps_summary(comparison: StepsComparison) -> str:
    """The verdict in a few lines: forwards, tokens, the first diverging step and module, and why."""
    count_a, count_b = comparison.counts
    lines = [f"a: {count_a} forwards  b: {count_b} forwards  (compared step by step: {len(comparison)} pairs)"]
    if comparison.steps:
        lines.append(_token_line(comparison))
    first = comparison.first_divergence
    if first is not None:
        step = comparison.steps[first.step]
        lines.append(f"first diverging step: {first.step} ({step_kind(step)})")
        if step.kind == "cache":
            lines.append(str(first))
            lines.append("  (seen in the KV cache update recorded in the sidecar; the step's tensors agree)")
        else:  # the step's own comparison, in full: weights, numbers, hints
            lines.append(comparison_summary(comparison.comparison(first.step), first))
            if step.cache:
                lines.append(f"  also: {step.cache}")
    elif comparison.first_token_step is not None:
        step = comparison.steps[comparison.first_token_step]
        known = [m for side in step.margins if side for m in side]
        margins = f" (gap {format_number(min(known))})" if known else ""
        lines.append(
            f"every compared tensor agrees, yet the picked tokens differ at step {step.step}: the top two logits "
            f"were within noise of each other{margins}"
        )
    elif comparison.agree:
        lines.append("agree: every step's tensors are within tolerance")
    elif not comparison.steps:
        lines.append("nothing to compare: one side holds no forward")
    else:
        lines.append("nothing could be compared at some steps (no aligned tensors with data on both sides)")
    lines.extend(f"note: {note}" for note in comparison.notes)
    return "\n".join(lines)


def format_steps_table(comparison: StepsComparison, rows: int = 30) -> str:
    """One line per paired step: step, input length, cache length, tokens a/b, verdict, where it diverges.

    At most ``rows`` lines, starting a few steps before the first divergence.
    """
    header = ("step", "input", "cache", "token a", "token b", "verdict", "first divergence in the step")
    first = comparison.first_step if comparison.first_step is not None else comparison.first_token_step
    start = max(0, (first or 0) - 3)
    shown = comparison.steps[start : start + max(rows, 1)]
    table = [header]
    for step in shown:
        where = step_where(step)
        mark = "≠" if step.tokens_differ else ""
        table.append(
            (
                str(step.step),
                format_count(step.input_length[0]),
                format_count(step.past_length[0]),
                format_tokens(step.tokens[0]),
                format_tokens(step.tokens[1]) + mark,
                STATUS_WORDS.get(step.status, step.status),
                where,
            )
        )
    widths = [max(len(r[k]) for r in table) for k in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(r, widths)).rstrip() for r in table]
    if start > 0:
        lines.insert(1, f"… {start} steps before")
    after = len(comparison.steps) - (start + len(shown))
    if after > 0:
        lines.append(f"… {after} more steps (--rows N shows more)")
    return "\n".join(lines)
