"""Copies of a live module in another dtype, made once per replay and shared by the calls inside it.

Replay runs every aligned module in float64 (and, with both sides live, in float32). Copying a
module for each call copies a layer block once for the block and again for each of its children:
on a 1,540-layer model most of replay's time. ``Copies`` instead copies the module of a call once
and, while the calls that follow run its submodules (call order visits a module's children right
after it), serves each of them the matching submodule of that copy: the same parameters, buffers
and attributes that a copy of the submodule alone would hold.

Memory: one copy is held at a time, that of the outermost module being replayed; it is dropped when
replay reaches a module outside it (and when the replay ends), so the peak is the float64 copy of the
largest replayed module, as with a copy per call. A ``Copies`` lives for one comparison: a weight the
user changes between two comparisons is copied afresh by the next one. (A module whose forward changes
its own buffers, a step counter, is copied as it was when the outermost call inside it was replayed.)
"""

from __future__ import annotations

import torch
from torch import nn

from ...capture.twin.copies import copy_in


class Copies:
    """The modules of one replay in ``dtype``: ``of(module)`` is a copy made once for the outermost module."""

    def __init__(self, dtype: torch.dtype) -> None:
        self.dtype = dtype
        self._held: dict[int, tuple[nn.Module, nn.Module]] = {}  # id(live module) -> (live module, its copy)
        self.made = 0  # how many copies were made (for tests and benchmarks)

    def of(self, module: nn.Module) -> nn.Module:
        """``module`` in ``dtype``: a submodule of the held copy when it holds ``module``, else a new copy."""
        held = self._held.get(id(module))
        if held is not None and held[0] is module:
            return held[1]
        self._held = {}  # drop the previous copy before making the next: one at a time
        copied = copy_in(module, self.dtype)
        self.made += 1
        self._held = {id(live): (live, twin) for live, twin in zip(module.modules(), copied.modules())}
        return copied

    def clear(self) -> None:
        """Drop the held copy."""
        self._held = {}
