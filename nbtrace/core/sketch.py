"""The run's own sketch a trace recorded without its twin: the sidecar section ``sketch``, read as ``sketch_of``.

A trace of printed values recorded without the float64 twin (``measure_rounding=False``; transformers' drop-in)
keeps, at every leaf call that holds no matrix and that pruning keeps in the files, the fingerprint of each float
input and output *as the run computed it* (``capture/sketch.py``): 16 random-sign sums of its values, padding rows
left out. The section has the ``twin`` section's layout (``core/twin.py``)::

    {"version": 1, "sums": 16, "padding": "<digest of the padding mask>" | null,
     "calls": {"<call name>": {"<place>": {"shape": [..], "p": "<base64 of 16 float64>", "n": kept, "rms": x}}}}

``n`` elements were kept (padding rows left out; a tensor holding NaNs or sentinels is not sketched), ``rms`` is
their RMS (exact: their sum of squares in float64). A malformed section is a TraceFormatError naming the sidecar.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import TraceFormatError
from .sidecar import sidecar_path
from .twin import Twin, parse_twin

if TYPE_CHECKING:  # pragma: no cover
    from .trace import Trace

SKETCH_SECTION = "sketch"
SKETCH_VERSION = 1


def sketch_of(trace: Trace) -> Twin | None:
    """The trace's sketch (its calls' fingerprints of the run's own tensors), or None when it holds none; a malformed
    section is a TraceFormatError naming the sidecar."""
    section = trace.sidecar.get(SKETCH_SECTION)
    if section is None:
        return None
    try:
        if isinstance(section, dict) and isinstance(section.get("version"), int) \
                and section["version"] > SKETCH_VERSION:
            raise ValueError(f"has version {section['version']!r}; this nbtrace reads up to {SKETCH_VERSION}")
        return parse_twin(section)
    except ValueError as bad:
        where = sidecar_path(trace.source) if trace.source is not None else "<recorded trace>"
        raise TraceFormatError(where, f"bad '{SKETCH_SECTION}' section: {bad}") from None
