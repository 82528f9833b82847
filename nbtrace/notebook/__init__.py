"""In a notebook: the ``%%modeltrace`` magic and the TraceView widget (``pip install nbtrace[notebook]``).

``TraceView`` is imported on first use, so the pure helpers of this package
(``payload``, ``detail``) work without the notebook dependencies.
"""

from typing import Any

__all__ = ["TraceView"]


def __getattr__(name: str) -> Any:
    if name == "TraceView":
        from .view import TraceView

        return TraceView
    raise AttributeError(f"module 'nbtrace.notebook' has no attribute {name!r}")
