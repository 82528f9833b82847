"""The tensor-parallel runs the tests read: each world size launched once per test session.

``tp_run(world, tmp_path_factory)`` starts ``tests/tp_worker.py`` on ``world`` gloo ranks (real
processes, as torchrun would) the first time it is asked for, and returns where the traces are;
``single_traces`` records the same models in this process, without torch.distributed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import nbtrace
from tests.dist_launch import launch
from tests.models import tp_models as tm

WORKER = Path(__file__).with_name("tp_worker.py")
_RUNS: dict[int, TPRun] = {}
_SINGLE: dict[str, Path] = {}


@dataclass
class TPRun:
    world: int
    root: Path
    seconds: float
    results: list[dict]

    @property
    def damaged(self) -> int:
        return self.world // 2

    def __getitem__(self, variant: str) -> Path:
        return self.root / variant


def tp_run(world: int, factory: pytest.TempPathFactory) -> TPRun:
    if world not in _RUNS:
        root = factory.mktemp(f"tp{world}")
        seconds = launch(WORKER, [str(root)], world, root / "logs", timeout=400)
        results = [json.loads((root / f"result_rank{r}.json").read_text()) for r in range(world)]
        _RUNS[world] = TPRun(world, root, seconds, results)
    return _RUNS[world]


def single_traces(factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The single-process reference traces: ``decoder``, ``pair`` and ``probe``."""
    if not _SINGLE:
        root = factory.mktemp("single")
        x = tm.make_input()
        for name, model, given in (("decoder", tm.build_reference(), x), ("pair", tm.Pair(), x[0, :, :8]),
                                   ("probe", tm.LayoutProbe(), tm.probe_input())):
            with torch.no_grad(), nbtrace.trace(model, root / name, use_repr=False):
                model(given)
            _SINGLE[name] = root / name
    return _SINGLE
