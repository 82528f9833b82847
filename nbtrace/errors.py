"""The one exception every trace-file problem raises."""

from __future__ import annotations


class TraceFormatError(ValueError):
    """A trace file or folder is missing, truncated, malformed or wrongly shaped.

    The message always names the file and says what is wrong with it, so a user
    can act on it without reading a traceback.
    """

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
