"""The Python source line that called a torch operation: the first frame outside torch and nbtrace."""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

import torch

_SKIP = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep,
)


@dataclass(frozen=True)
class SourceLine:
    """Where an operation was called: ``file`` (full path), ``line`` (1-based) and the line's ``text``."""

    file: str
    line: int
    text: str

    @property
    def short(self) -> str:
        """``file.py:41``: the file's name and the line number."""
        return f"{os.path.basename(self.file)}:{self.line}"


UNKNOWN = SourceLine("?", 0, "")


def caller_line() -> SourceLine:
    """The innermost frame whose file lies outside torch and nbtrace (UNKNOWN when every frame is inside)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_SKIP) and not name.startswith("<frozen"):
            text = linecache.getline(name, frame.f_lineno).strip()
            return SourceLine(name, frame.f_lineno, text)
        frame = frame.f_back
    return UNKNOWN
