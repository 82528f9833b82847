"""The ``run`` section of nbtrace's sidecar: which run a forward belongs to, its place in it, its call timings.

A ``with nbtrace.trace(...)`` block that records several top-level forwards (each step of
``generate``) is one *run*. Every forward of such a run carries::

    "run": {"id": "<hex>", "forward": <i>, "durations": [<seconds per call, in call order>]}

so a folder's ``forward_<i>/`` folders and its own last forward can be checked to come from
one run (``forwards.py``), and a forward read back from disk keeps the call timings it had
in memory. A block that records a single forward writes no ``run`` section.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .trace import Trace

RUN_SECTION = "run"


def run_section(run_id: str, forward: int, durations: list[float | None]) -> dict[str, Any]:
    """The ``run`` section of forward ``forward`` of run ``run_id``; ``durations`` in call order (None: unknown)."""
    return {
        "id": run_id,
        "forward": forward,
        "durations": [None if d is None or not math.isfinite(d) else round(d, 7) for d in durations],
    }


def run_identity(sidecar: dict[str, Any]) -> tuple[str, int] | None:
    """``(run id, forward index)`` from a forward's sidecar sections; None when it has no usable ``run`` section."""
    section = sidecar.get(RUN_SECTION)
    if not isinstance(section, dict):
        return None
    run_id, forward = section.get("id"), section.get("forward")
    if not isinstance(run_id, str) or not isinstance(forward, int) or isinstance(forward, bool):
        return None
    return run_id, forward


def restore_durations(trace: Trace) -> None:
    """Give each call of ``trace`` the duration its ``run`` section recorded (when the counts agree)."""
    section = trace.sidecar.get(RUN_SECTION)
    durations = section.get("durations") if isinstance(section, dict) else None
    if not isinstance(durations, list):
        return
    nodes = trace.nodes()
    if len(durations) != len(nodes):
        return
    for node, duration in zip(nodes, durations):
        if isinstance(duration, (int, float)) and not isinstance(duration, bool):
            node.duration = float(duration)
