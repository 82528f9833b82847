"""Parsing the JSON files of a trace: with orjson when it is installed (3-4x faster on a 20,000-call trace,
where the files hold tens of MiB), else, and for anything orjson refuses, the standard library.

orjson refuses what the standard library accepts and a trace file may hold (``NaN``), and its messages
differ: anything it refuses is parsed again with ``json``, so what is read and what a bad file's error
says are the standard library's. orjson reads an integer beyond 64 bits as the nearest float; a trace
holds none (the format writes every value as a string, the sidecar's numbers are sizes and measurements).
"""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson as _fast
except ImportError:  # pragma: no cover - orjson is a dependency, but a missing one only costs time
    _fast = None


def parse_json(data: bytes) -> Any:
    """The value of a JSON document (raises as ``json.loads`` does)."""
    if _fast is not None:
        try:
            return _fast.loads(data)
        except _fast.JSONDecodeError:
            pass
    return json.loads(data)
