"""The Python source line that called a torch operation: the first frame outside torch and nbtrace, or, inside a
torch module recorded on its own (an ``nn.LayerNorm``), the line of that module's ``forward``."""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass
from types import FrameType

import torch

_TORCH_MODULES = os.path.join(os.path.dirname(torch.__file__), "nn", "modules") + os.sep
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


def caller_line(boundary: FrameType | None = None) -> SourceLine:
    """The innermost frame whose file lies outside torch and nbtrace, below ``boundary`` (the frame that started
    the recorded call) when given; where every frame below it is inside (a torch module recorded by itself), the
    innermost line of a torch module's code; UNKNOWN when there is neither."""
    frame = sys._getframe(1)
    in_torch_module = None
    while frame is not None and frame is not boundary:
        name = frame.f_code.co_filename
        if not name.startswith(_SKIP) and not name.startswith("<frozen"):
            return _line(frame)
        if in_torch_module is None and name.startswith(_TORCH_MODULES):
            in_torch_module = frame
        frame = frame.f_back
    return _line(in_torch_module) if in_torch_module is not None else UNKNOWN


def _line(frame: FrameType) -> SourceLine:
    name = frame.f_code.co_filename
    return SourceLine(name, frame.f_lineno, linecache.getline(name, frame.f_lineno).strip())
