"""``compare(reference, port)`` with a live port module: trace it on the reference's inputs, then replay.

The port runs on the reference trace's recorded top-level inputs (the reference must hold
full tensors: ``use_repr=False``), traced into a temporary folder that lives as long as the
comparison. The comparison of the two traces gives the verdict from files; then every
aligned port module is run again on the inputs the reference recorded for that call
(``replay.py``), and the verdict from replay (``replay_verdict.py``) replaces it, except
where the call the files name could not be replayed (the notes say so). The tracer's
wrappers are removed when tracing ends, also when the port raises; replay adds none.
"""

from __future__ import annotations

import inspect
import shutil
import tempfile
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...capture.context import trace
from ...core.load import load_trace
from ...core.trace import Trace
from ..verdict.born import apply_verdict, replay_divergence
from .callargs import Unreplayable, rebuild
from ..comparison import Comparison, compare
from ..measure.noise import padding_rows
from .replay import Replayer
from .replay_verdict import replay_verdict, with_fallback


@dataclass
class ReplayReport:
    """What replay did: the calls replayed (a's paths), those that were not and why, who answered."""

    scope: str
    replayed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    answered_by: str = "replay"  # "replay", or "files" where the call the files name could not be replayed
    note: str | None = None
    seconds: float = 0.0


def top_level_inputs(reference: Trace, port: nn.Module) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The reference's recorded top-level arguments, as values the port's forward accepts (keywords it does not
    take are left out)."""
    def load(arg: str, tensor) -> torch.Tensor:
        if tensor.ref is None:
            raise ValueError(f"the reference's top-level input {arg} was recorded without its values: trace the "
                             "reference with use_repr=False to run a port on its inputs")
        return tensor.load().clone()

    try:
        args, kwargs = rebuild(reference.root.inputs, load)
    except Unreplayable as exc:
        raise ValueError(f"the reference's top-level inputs cannot be rebuilt: {exc}") from None
    parameters = inspect.signature(port.forward).parameters.values()
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        names = {p.name for p in parameters}
        kwargs = {key: value for key, value in kwargs.items() if key in names}
    return args, kwargs


def compare_live(reference: Any, port: nn.Module, *, replay: bool | str = True,
                 rename: Mapping[str, str] | None = None, **options: Any) -> Comparison:
    """Trace ``port`` on the reference's top-level inputs, compare, and replay (``replay``: True or "auto",
    "leaves", "all", or False for the verdict from files alone)."""
    a = load_trace(reference)
    args, kwargs = top_level_inputs(a, port)
    folder = tempfile.mkdtemp(prefix="nbtrace-port-")
    try:
        with torch.no_grad(), trace(port, debug_path=folder, use_repr=False, do_prune_layers=False) as recorder:
            port(*args, **kwargs)
    except Exception as exc:
        shutil.rmtree(folder, ignore_errors=True)
        shown = ", ".join([f"args.{i}" for i in range(len(args))] + list(kwargs))
        raise RuntimeError(f"running the port {type(port).__name__} on the reference's recorded inputs ({shown}) "
                           f"raised {type(exc).__name__}: {exc}") from exc
    b = recorder.trace
    assert b is not None
    comparison = compare(a, b, rename=rename, **options)
    weakref.finalize(comparison, shutil.rmtree, folder, True)
    if replay is False:
        return comparison
    scope = "auto" if replay is True else str(replay)
    report = ReplayReport(scope)
    comparison.replay = report
    if comparison.method != "files" or comparison._judge is None or comparison._files_verdict is None:
        report.answered_by = "files"
        report.note = "not replayed: replay needs full tensors on both sides and no rtol/atol"
        return comparison
    start = time.perf_counter()
    valid = padding_rows(a, comparison.flows[0].cache)
    results = Replayer(port, comparison.flows, comparison.matches, valid, scope).run()
    report.seconds = time.perf_counter() - start
    report.replayed = [r.a.module_path for r in results if r.problem is None]
    report.skipped = {r.a.module_path: r.problem for r in results if r.problem is not None}
    verdict, note = with_fallback(replay_verdict(results), results, comparison._files_verdict)
    report.note = note
    if verdict.state == "nothing":
        report.note = "no call could be replayed: this is the verdict from the trace files"
    if verdict.method != "replay" or verdict.state == "nothing":
        report.answered_by = "files"
        return comparison
    comparison.method = "replay"
    divergence = None
    if verdict.state == "diverge" and verdict.finding is not None:
        result = next(r for r in results if r.a is verdict.finding.node)
        divergence = replay_divergence(comparison, verdict.finding, result)
    apply_verdict(comparison, comparison._judge, verdict, divergence)
    return comparison
