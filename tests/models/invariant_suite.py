"""Running one case of the invariant suite by one method, graded (shared by the tests and the benchmark).

Methods, one per path a user takes:

- ``default``: two folders traced with ``nbtrace.trace``'s defaults (printed values, pruned layers, the float64
  twin recorded): what a user of transformers' debugger has on disk, plus nbtrace's twin;
- ``port``: such a default folder of the reference against the live port (its twin run on the inputs the folder
  kept);
- ``files``: two full-tensor folders traced without the twin (``measure_rounding=False``): nothing measured;
- ``plain``: two folders with the defaults but the twin (printed values, pruned layers, ``measure_rounding=False``):
  what transformers' debugger and the drop-in write;
- ``measured``: two full-tensor folders traced with ``measure_rounding=True`` (the twin, and every call's rounding);
- ``replay``: a full-tensor folder without the twin against the live port, replayed call by call;
- ``live``: both modules live.

Grades: ``ok`` (agrees where there is no bug; names the bug's module), ``unresolved`` (files without measurements
may say so), ``FALSE ALARM`` (a module named where there is no bug), ``WRONG`` (another module named), ``miss`` (no
module named where there is a bug).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch

import nbtrace
from tests.models import invariant_ports as ip

METHODS = ("default", "port", "files", "plain", "measured", "replay", "live")
#: how each folder-based method traces: (use_repr, do_prune_layers, measure_rounding)
_TRACING = {"default": (True, True, "auto"), "port": (True, True, "auto"), "files": (False, False, False),
            "plain": (True, True, False), "measured": (False, False, True), "replay": (False, False, False)}


@dataclass
class Outcome:
    method: str
    verdict: str
    named: str | None
    expected: str | None
    ratio: float  # the largest decisive score over the calls (difference / allowed)
    seconds: float

    @property
    def grade(self) -> str:
        if self.named is None:
            if self.expected is None:
                return "ok" if self.verdict == "agree" else ("unresolved" if self.verdict == "unresolved" else "?")
            return "miss"
        if self.expected is None:
            return "FALSE ALARM"
        return "ok" if self.named == self.expected else "WRONG"


def _trace(model: torch.nn.Module, x: dict, folder: Path, method: str) -> None:
    use_repr, prune, measure = _TRACING[method]
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder, use_repr=use_repr, do_prune_layers=prune,
                                        measure_rounding=measure):
        model(**x)


def _ratio(comparison) -> float:
    scores = [m.difference.score for m in comparison.matches if m.difference is not None
              and m.difference.score is not None and m.difference.score < float("inf")]
    return max(scores, default=0.0)


def run_case(tmp: Path, dtype: str, variant: str, bug: str | None, method: str, width: int = 256, seed: int = 0,
             layers: int = 2, length: int = 70, rename: dict | None = None, device: str = "cpu") -> Outcome:
    """One case (``variant`` and at most one ``bug``), judged by ``method``, with the models on ``device``."""
    reference = ip.build(width, ip.DTYPES[dtype], seed, layers).to(device)
    port = ip.port(reference, variant, bug)
    x = {key: value.to(device) for key, value in ip.inputs(seed, length).items()}
    expected = ip.BUGS[bug][1] if bug else None
    start = time.perf_counter()
    if method == "live":
        comparison = nbtrace.compare(reference, port, inputs=x, rename=rename)
    else:
        folder = Path(tmp) / f"{dtype}-{variant}-{bug}-{method}-{width}-{seed}"
        _trace(reference, x, folder / "a", method)
        start = time.perf_counter()
        if method in ("replay", "port"):
            comparison = nbtrace.compare(folder / "a", port, rename=rename)
        else:
            _trace(port, x, folder / "b", method)
            start = time.perf_counter()
            comparison = nbtrace.compare(folder / "a", folder / "b", rename=rename)
    seconds = time.perf_counter() - start
    divergence = comparison.first_divergence
    named = divergence.module_path if divergence is not None else None
    return Outcome(method, comparison.verdict, named, expected, _ratio(comparison), seconds)
