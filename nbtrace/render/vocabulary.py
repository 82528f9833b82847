"""One vocabulary for every view: how numbers, shapes, dtypes, pruned layers and statuses read.

The text tree, the static HTML, the tables, the plots, the CLI and the widget all
take their words from here; the widget's ES module gets ``widget_vocabulary()``
with its payload, so a status reads the same in Python and in the browser.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..core.dtypes import short_dtype

if TYPE_CHECKING:  # pragma: no cover
    from ..core.tensor import TensorValue

SIGNIFICANT_DIGITS = 3

#: status -> (words, colour, mark in the CLI table); the statuses of ``diff.report.STATUSES``.
STATUS_WORDS = {
    "match": "match",
    "diverged": "diverged",
    "first": "first divergence",
    "only_a": "only in a",
    "no_data": "no data",
}
STATUS_MARKS = {"match": "ok", "diverged": "DIFF", "first": ">>>", "only_a": "only a", "no_data": "-"}
GOOD, WARN, BAD, MUTED = "#2e7d32", "#e65100", "#c62828", "#757575"
STATUS_COLOURS = {"match": GOOD, "diverged": WARN, "first": BAD, "only_a": MUTED, "no_data": MUTED}


def format_number(value: float | None, missing: str = "-") -> str:
    """A compact number with three significant digits: ``1.23e-03``, ``0.512``, ``1.00``, ``nan``.

    ``missing`` (default ``-``) stands for a value that does not exist.
    """
    if value is None:
        return missing
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    size = abs(value)
    if 100 <= size < 1e4:
        return f"{value:.0f}"
    if 1 <= size < 100:
        return f"{value:#.3g}".rstrip(".")  # keeps trailing zeros: 1.00, 12.0
    if 1e-3 <= size < 1:
        return f"{value:.3f}"
    return f"{value:.2e}"


def round_number(value: float | None) -> float | str | None:
    """A number rounded to what a row shows (three significant digits), for compact payloads;
    ``"nan"``/``"inf"``/``"-inf"`` as text (JSON has no such numbers)."""
    if value is None:
        return None
    if not math.isfinite(value):
        return str(value)
    number = float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    return int(number) if number.is_integer() and abs(number) < 1e15 else number


def short_shape(shape: Sequence[int]) -> str:
    """``1×16×64``; ``scalar`` for a 0-d tensor."""
    return "×".join(str(d) for d in shape) if shape else "scalar"


def describe_tensor(tensor: TensorValue) -> str:
    """``[1, 16, 64] float32 mean=0.012 std=1.01``"""
    text = f"{list(tensor.shape)} {short_dtype(tensor.dtype)}"
    if tensor.mean is not None:
        text += f" mean={format_number(tensor.mean)} std={format_number(tensor.std)}"
    return text


def gap_label(prefix: str, first: int, last: int) -> str:
    """``layers 1–30 pruned`` (``layers 1 pruned`` for one layer)."""
    name = prefix.rsplit(".", 1)[-1]
    span = f"{first}" if first == last else f"{first}–{last}"
    return f"{name} {span} pruned"


def widget_vocabulary() -> dict[str, Any]:
    """What the widget's ES module needs to read like the other views.

    ``statuses`` lists the status names in the order of the payload's status codes (0: none).
    """
    from ..diff.report import STATUSES

    return {"statuses": ["", *STATUSES], "status_words": STATUS_WORDS, "status_colours": STATUS_COLOURS}
