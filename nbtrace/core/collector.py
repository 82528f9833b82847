"""Keeping Python's cyclic garbage collector from scanning a trace's millions of objects over and over.

Building a 20,000-call trace, or comparing two, makes ~10^6 objects; every so many
allocations the collector scans all of them, a third of the time of a comparison. Two policies,
by what runs inside:

- ``collector_paused``: only nbtrace's own code, which makes no cycles (loading, comparing): the
  collector is off;
- ``older_objects_frozen``: the user's modules run (replay), which may leave cyclic garbage that must
  still be collected: the collector stays on, but the objects older than the block are left out of it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector inside the block (restored as it was, also on an exception).

    Objects made while it is paused all sit in the youngest generation, and the first collection after it
    would scan every one of them (1.4 s after comparing two 20,000-call traces). So they are moved to the
    oldest generation as the block ends (``gc.freeze()`` then ``gc.unfreeze()``, which scan nothing), where
    they wait for a full collection as any long-lived object does. Not when the process froze objects
    itself: unfreezing would undo that.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if not _FROZEN and gc.get_freeze_count() == 0:  # counting the frozen walks them all: asked only here
                gc.freeze()
                gc.unfreeze()
            gc.enable()


@contextmanager
def older_objects_frozen() -> Iterator[None]:
    """The objects that exist when the block starts (two traces and their data flows: millions) left out of the
    collector's scans inside it (``gc.freeze``; undone afterwards, also on an exception): each full collection
    walked them all, some 3 s of a 20,000-call replay. A process that froze objects itself is left as it is."""
    if _FROZEN or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    _FROZEN.append(True)
    try:
        yield
    finally:
        _FROZEN.clear()
        gc.unfreeze()


#: non-empty while ``older_objects_frozen`` holds objects frozen: ``gc.get_freeze_count`` walks every frozen object
#: (a million in a large trace: 30 ms a call), so the blocks inside it ask this instead
_FROZEN: list[bool] = []
