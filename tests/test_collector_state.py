"""A traced forward leaves Python's garbage collector as it found it: on or off, with the objects the process froze
itself still frozen, and the cycles the model made during the forward still collected (the trace only keeps the
objects older than the forward out of the collector's scans while it runs, ``core/collector.py``)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace.demo import build_demo


class _Cycle:
    def __init__(self) -> None:
        self.me = self


class _MakesCycles(nn.Module):
    """A module whose forward leaves a reference cycle behind (garbage only the cyclic collector frees)."""

    def __init__(self, made: list) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.made = made

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cycle = _Cycle()
        self.made.append(weakref.ref(cycle))
        if x.sum() > 1e9:
            raise RuntimeError("the forward raises")
        return self.linear(x)


@pytest.mark.parametrize("raises", [False, True])
def test_the_collector_is_left_as_it_was_and_the_models_cycles_are_collected(tmp_path, raises):
    made: list = []
    model = _MakesCycles(made)
    x = torch.full((2, 4), 1e9) if raises else torch.randn(2, 4)
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            with pytest.raises(RuntimeError) if raises else _nothing():
                with nbtrace.trace(model, debug_path=tmp_path / f"{enabled}"):
                    model(x)
            assert gc.isenabled() == enabled and gc.get_freeze_count() == 0
        finally:
            gc.enable()
    gc.collect()
    assert made and all(ref() is None for ref in made)  # the cycles made inside the traced forwards are gone


def test_objects_the_process_froze_stay_frozen(tmp_path):
    model, inputs = build_demo(num_layers=2)
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with nbtrace.trace(model, debug_path=tmp_path):
            model(**inputs)
        # not unfrozen (that would leave none): only those freed meanwhile are gone
        assert gc.get_freeze_count() > frozen // 2 > 0 and gc.isenabled()
    finally:
        gc.unfreeze()


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
