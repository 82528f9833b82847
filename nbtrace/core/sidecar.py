"""nbtrace's own sidecar file: what the transformers files cannot hold, beside them.

``<Class>_debug_tree_NBTRACE.json`` holds one JSON object::

    {"format": "nbtrace-sidecar", "version": 1, "sections": {"<name>": {...}, ...}}

Each feature owns one section (``parameters``: parameter fingerprints per module;
``distributed``: rank, world size and DTensor placements; ``numerics`` and ``rounding``: what the run
computed with and the rounding measured as it recorded, ``measured.py``). A trace without a
sidecar loads as before (``Trace.sidecar`` is an empty dict); a malformed sidecar
is a TraceFormatError naming it. docs/format.md documents every section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import TraceFormatError
from .json_text import parse_json

SIDECAR_SUFFIX = "_debug_tree_NBTRACE.json"
SIDECAR_FORMAT = "nbtrace-sidecar"
SIDECAR_VERSION = 1


def sidecar_path(trace_file: Path) -> Path:
    """The sidecar beside a FULL or SUMMARY trace file."""
    name = trace_file.name
    for suffix in ("_debug_tree_FULL_TENSORS.json", "_debug_tree_SUMMARY.json"):
        if name.endswith(suffix):
            return trace_file.with_name(name[: -len(suffix)] + SIDECAR_SUFFIX)
    return trace_file.with_name(trace_file.stem + SIDECAR_SUFFIX)


def sidecar_document(sections: dict[str, Any]) -> dict[str, Any]:
    """The whole sidecar object for ``sections``."""
    return {"format": SIDECAR_FORMAT, "version": SIDECAR_VERSION, "sections": sections}


def read_sidecar(trace_file: Path) -> dict[str, Any]:
    """The sections of the sidecar beside ``trace_file``; ``{}`` when there is none."""
    path = sidecar_path(trace_file)
    if not path.is_file():
        return {}
    if path.is_symlink():
        raise TraceFormatError(path, "is a link; a trace folder's files must be plain files in it")
    try:
        document = parse_json(path.read_bytes())
    except RecursionError:
        raise TraceFormatError(path, "nests too deeply to be a sidecar") from None
    except (OSError, ValueError) as exc:
        raise TraceFormatError(path, f"is not a readable sidecar: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != SIDECAR_FORMAT:
        raise TraceFormatError(path, f"is not an nbtrace sidecar (no 'format': {SIDECAR_FORMAT!r})")
    version = document.get("version")
    if not isinstance(version, int) or version > SIDECAR_VERSION:
        raise TraceFormatError(path, f"has sidecar version {version!r}; this nbtrace reads up to {SIDECAR_VERSION}")
    sections = document.get("sections")
    if not isinstance(sections, dict) or not all(isinstance(v, dict) for v in sections.values()):
        raise TraceFormatError(path, "'sections' must be an object of objects")
    return sections
