"""The operations inside a narrowed call, in words: the first diverging operation with both source lines
side by side, and a status word per operation. Text, the comparison's summary, static HTML, the table and the
widget all read these."""

from __future__ import annotations

from typing import Any

from .vocabulary import format_number

#: an operation's status inside a narrowed call -> the word a person sees
OPERATION_STATUS_WORDS = {
    "agrees": "agrees",
    "differs": "differs here",
    "uncertain": "alignment uncertain",
    "only": "no counterpart",
}
OPERATION_LABEL = "operation"
#: the widget's headings of the operations table (the ES module spells no word itself)
OPERATION_HEADINGS = {"title": "operations inside this call", "side": "side", "operation": "operation",
                      "module": "in", "line": "line", "code": "code", "status": "status",
                      "reference": "reference", "port": "port"}
NOTHING_NARROWED = "no operation differs beyond rounding ({ref} reference and {port} port operations recorded)"
NOT_NARROWED = "not narrowed: {why}"


def source_words(op: Any) -> str:
    """``ports.py:41 `gelu(x, approximate='tanh')```: where an operation was called, and the line."""
    if op is None:
        return "-"
    return f"{op.name} at {op.source.short} `{op.source.text}`" if op.source.text else f"{op.name} at {op.source.short}"


def divergence_sentence(first: Any) -> str:
    """One sentence for an ``OperationDivergence`` (the port's line first, then the reference's)."""
    port, ref = first.port, first.reference
    if first.kind == "precision":
        u = first.u or 1.0
        return (f"{source_words(port)} vs {source_words(ref)}: the same value, rounded "
                f"{format_number(first.difference / u)} u where rounding allows {format_number(first.allowed / u)} u "
                f"(the reference's rounding times 3 plus 2 u)")
    if port is not None and ref is not None:
        if first.difference is not None:
            return (f"{source_words(port)} vs {source_words(ref)}: differs by {format_number(first.difference)} "
                    f"(relative RMS in float64) where rounding allows {format_number(first.allowed)}")
        return (f"{source_words(port)} vs {source_words(ref)}: the reference's value has no counterpart "
                f"in the port, the port's none in the reference")
    if ref is not None:
        return f"{source_words(ref)}: the reference's value has no counterpart in the port"
    return f"{source_words(port)}: the port's value has no counterpart in the reference"


def diff_summary(diff: Any) -> str:
    """The one or two lines a narrowed call adds to a summary (``str(OperationDiff)``)."""
    where = f" in {diff.module_path}" if diff.module_path else ""
    if diff.note:
        return f"{OPERATION_LABEL}{where}: {NOT_NARROWED.format(why=diff.note)}"
    if diff.first is None:
        return f"{OPERATION_LABEL}{where}: " + NOTHING_NARROWED.format(
            ref=len(diff.reference or []), port=len(diff.port))
    return f"{OPERATION_LABEL}{where}: {divergence_sentence(diff.first)}"


def operation_line(diff: Any) -> str | None:
    """The line a FirstDivergence's summary shows for its ``operation`` (None when not narrowed)."""
    return None if diff is None else diff_summary(diff)
