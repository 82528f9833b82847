"""Does a block's output match the output a page shows? Normalisation and wildcards.

Both texts: line endings unified, trailing spaces of each line and blank lines at either end dropped.
In the expected text, a line that is only ``...`` matches any number of lines (none included), and ``...``
inside a line matches any text within that line (paths, timings, digits a page does not care about).
"""

from __future__ import annotations

import difflib
import re

ANY_LINES = "..."


def normalise(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def pattern(expected: str) -> re.Pattern:
    parts = []
    for line in normalise(expected):
        if line.strip() == ANY_LINES:
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(r"[^\n]*?".join(re.escape(piece) for piece in line.split("...")) + r"\n")
    return re.compile(r"\A" + "".join(parts) + r"\Z")


def matches(expected: str, actual: str) -> bool:
    text = "\n".join(normalise(actual)) + "\n"
    return pattern(expected).match(text) is not None


def explain(expected: str, actual: str) -> str:
    """A readable difference for a failure message."""
    diff = difflib.unified_diff(normalise(expected), normalise(actual), "page shows", "block printed", lineterm="")
    return "\n".join(diff)
