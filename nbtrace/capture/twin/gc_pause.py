"""Python's cyclic garbage collector paused while the twin makes and drops many small objects.

A twin run makes a few Python objects per call (fingerprints, their slots, the records of each call) and drops most
of them as it goes; with the collector on, each of its passes walks every object the trace holds so far, and on a
model of 20,000 calls those passes cost more than the runs' float64 arithmetic. Nothing numeric changes: the
collector runs again as soon as the block ends (and reference counting frees what it always frees meanwhile).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector off inside the block, and back on after it if it was on before."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
