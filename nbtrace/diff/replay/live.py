"""``compare`` with live modules: the port alone (replay), or the reference and the port (both live).

``compare(reference, port_module)``: the port runs on the reference trace's recorded top-level
inputs (the reference must hold full tensors: ``use_repr=False``), traced into a temporary folder
that lives as long as the comparison. The comparison of the two traces gives the verdict from files;
then every aligned port module is run again on the inputs the reference recorded for that call
(``replay.py``), and the verdict from replay (``replay_verdict.py``) replaces it, except where the
call the files name could not be replayed (the notes say so).

``compare(reference_module, port_module, inputs=...)``: both are traced on the same inputs
(``(args, kwargs)``, a dict of keywords, or one tensor), aligned, and each aligned pair is run in
float64 on the reference's recorded inputs, so what is left between them is semantic.

The tracer's wrappers are removed when tracing ends, also when a module raises; replay adds none.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...capture.context import trace
from ...core.kept_inputs import kept_inputs
from ...core.load import load_trace
from ...core.trace import Trace
from ..verdict.born import apply_verdict, replay_divergence
from .callargs import Unreplayable, bind, rebuild
from ...capture.twin.values import cast, device_of
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
    both_live: bool = False  # the reference module was live too


def top_level_inputs(reference: Trace, port: nn.Module, inputs_map: Mapping[str, str] | None = None,
                     bound: bool = True) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The reference's recorded top-level arguments, on the port's device (``device_of``: a reference traced on
    a GPU and a port on the CPU, or the other way round, both work), bound to the
    port's forward (``callargs.bind``: by name, by position, ``inputs_map``), or as recorded when ``bound`` is
    False."""
    device = device_of(port)
    kept = kept_inputs(reference)

    def load(arg: str, tensor) -> torch.Tensor:
        if tensor.ref is not None:
            loaded = tensor.load()
        elif arg in kept:
            loaded = kept[arg]
        else:
            raise ValueError(f"the reference's top-level input {arg} was recorded without its values: trace the "
                             "reference with nbtrace.trace (it keeps the top-level inputs with its float64 twin) or "
                             "use_repr=False to run a port on its inputs")
        return loaded.clone() if loaded.device == device else loaded.to(device)

    try:
        args, kwargs = rebuild(reference.root.inputs, load)
    except Unreplayable as exc:
        raise ValueError(f"the reference's top-level inputs cannot be rebuilt: {exc}") from None
    args, kwargs = _in_port_dtype(port, args, kwargs)
    return bind(port.forward, args, kwargs, inputs_map) if bound else (args, kwargs)


def _in_port_dtype(port: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The recorded float inputs in the dtype the port holds all its float parameters in, where that differs (a
    bfloat16 port run on a float32 original's inputs: rounded into its dtype, as its user would feed it)."""
    dtypes = {p.dtype for p in port.parameters() if p.is_floating_point()}
    return cast((args, kwargs), dtypes.pop()) if len(dtypes) == 1 else (args, kwargs)


def as_call(inputs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``inputs`` of ``compare(..., inputs=)`` as ``(args, kwargs)``: a tensor, a dict of keywords, a pair
    ``(args, kwargs)``, or a tuple of positional arguments (none of them a dict: ``(mel, tokens)``)."""
    if isinstance(inputs, torch.Tensor):
        return (inputs,), {}
    if isinstance(inputs, Mapping):
        return (), dict(inputs)
    if isinstance(inputs, tuple) and len(inputs) == 2 and isinstance(inputs[1], Mapping):
        return tuple(inputs[0]), dict(inputs[1])
    if isinstance(inputs, tuple) and not any(isinstance(item, Mapping) for item in inputs):
        return inputs, {}
    raise TypeError(f"inputs must be a tensor, a dict of keyword arguments, (args, kwargs) or a tuple of positional "
                    f"arguments; got {type(inputs).__name__}")


def _traced(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], who: str,
            call: Callable[..., Any] | None = None, padding_mask: str | None = None) -> tuple[Trace, str]:
    """``module`` traced with full tensors into a temporary folder (removed if it raises); ``call(module, *args,
    **kwargs)`` runs it when given; ``padding_mask`` declares the argument that holds its padding mask."""
    folder = tempfile.mkdtemp(prefix=f"nbtrace-{who}-")
    try:
        with torch.no_grad(), trace(module, debug_path=folder, use_repr=False, do_prune_layers=False,
                                    padding_mask=padding_mask) as recorder:
            if call is None:
                module(*args, **kwargs)
            else:
                call(module, *args, **kwargs)
    except Exception as exc:
        shutil.rmtree(folder, ignore_errors=True)
        shown = ", ".join([f"args.{i}" for i in range(len(args))] + list(kwargs))
        raise RuntimeError(f"running the {who} {type(module).__name__} on the reference's recorded inputs "
                           f"({shown}) raised {type(exc).__name__}: {exc}") from exc
    assert recorder.trace is not None
    return recorder.trace, folder


def _port_padding(a: Trace, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    """The port's argument that holds the reference's padding mask (the same values), to declare to the port's
    trace: both twins then leave out the same positions, whatever the port calls its mask or puts before it."""
    twin = a.twin
    if twin is None or twin.padded is None or not twin.padding_from:
        return None
    recorded = next((t for io, arg, t in a.root.tensors() if io == "input" and arg == twin.padding_from), None)
    if recorded is None:
        return None
    mask = recorded.load() if recorded.ref is not None else kept_inputs(a).get(twin.padding_from)
    if mask is None:
        return None
    given = [(f"args.{i}", v) for i, v in enumerate(args)] + [(f"kwargs.{k}", v) for k, v in kwargs.items()]
    return next((place for place, v in given if isinstance(v, torch.Tensor) and v.ndim == 2
                 and not v.is_floating_point() and v.shape == mask.shape and torch.equal(v.detach().cpu(), mask)),
                None)


def compare_both_live(reference: nn.Module, port: nn.Module, inputs: Any, *,
                      rename: Mapping[str, str] | None = None, inputs_map: Mapping[str, str] | None = None,
                      call: Callable[..., Any] | None = None, port_inputs: Any = None,
                      **options: Any) -> Comparison:
    """Trace the reference and the port on the same ``inputs``, align them, and run each aligned pair in
    float64 on the reference's recorded inputs (``method == "replay"``, ``decided_by == "both live"``).
    ``inputs_map``/``call`` say how the reference's arguments reach a port with another signature;
    ``port_inputs`` gives the port its own arguments (the same forms as ``inputs``)."""
    args, kwargs = as_call(inputs)
    a, folder = _traced(reference, args, kwargs, "reference")
    try:
        comparison = _compare_replayed(a, port, options.pop("replay", True), rename, options, reference=reference,
                                       inputs_map=inputs_map, call=call,
                                       port_call=as_call(port_inputs) if port_inputs is not None else None)
    except Exception:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    weakref.finalize(comparison, shutil.rmtree, folder, True)
    return comparison


def compare_live(reference: Any, port: nn.Module, *, replay: bool | str = True,
                 rename: Mapping[str, str] | None = None, inputs_map: Mapping[str, str] | None = None,
                 call: Callable[..., Any] | None = None, **options: Any) -> Comparison:
    """Trace ``port`` on the reference's top-level inputs, compare, and replay (``replay``: True or "auto",
    "leaves", "all", or False for the verdict from files alone). ``inputs_map`` renames the recorded
    arguments to the port's parameters; ``call(port, *args, **kwargs)``, given the arguments as recorded,
    runs the port instead."""
    a = load_trace(reference)
    return _compare_replayed(a, port, replay, rename, options, inputs_map=inputs_map, call=call)


def _compare_replayed(a: Trace, port: nn.Module, replay: bool | str, rename: Mapping[str, str] | None,
                      options: dict[str, Any], reference: nn.Module | None = None,
                      inputs_map: Mapping[str, str] | None = None,
                      call: Callable[..., Any] | None = None,
                      port_call: tuple[tuple[Any, ...], dict[str, Any]] | None = None) -> Comparison:
    args, kwargs = port_call if port_call is not None else top_level_inputs(a, port, inputs_map, bound=call is None)
    declared = _port_padding(a, args, kwargs) if call is None else None
    b, folder = _traced(port, args, kwargs, "port", call=call, padding_mask=declared)
    comparison = compare(a, b, rename=rename, **options)
    comparison.live_port = port  # narrow(comparison) runs the blamed call's module again
    if reference is not None:
        comparison.live_reference = reference  # ... on both sides, when the reference is live too
    weakref.finalize(comparison, shutil.rmtree, folder, True)
    if replay is False:
        return comparison
    scope = "auto" if replay is True else str(replay)
    report = ReplayReport(scope, both_live=reference is not None)
    comparison.replay = report
    if comparison.method == "twin" or comparison.misaligned:
        report.answered_by = "twin"
        return comparison
    if comparison.method != "files" or comparison._judge is None or comparison._files_verdict is None:
        report.answered_by = "files"
        report.note = "not replayed: replay needs full tensors on both sides and no rtol/atol"
        return comparison
    start = time.perf_counter()
    valid = padding_rows(a, comparison.flows[0].cache)
    results = Replayer(port, comparison.flows, comparison.matches, valid, scope, reference=reference).run()
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
