"""Attaching the recorder to a model for a ``with`` block, and restoring it exactly.

Every submodule's ``forward`` is wrapped (as transformers does, so direct
``module.forward(...)`` calls are seen too) for the duration of the block and
restored afterwards, whatever happens: ``forward`` goes back into a module's
``__dict__`` only if it was there before. Under ``torch.distributed`` only rank 0
records (``ranks=`` chooses others, see ``ranks.py``); other ranks only get the top-level
forward run under ``no_grad`` (with ``backward=True`` as it is, building its graph), followed by their part of
the float64 twin, which the ranks run together (``twin/ranks.py``).
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .backward import BackwardCapture
from .ranks import Ranks, plan_ranks
from .recorder import Recorder
from .rounding import RoundingMeter, check_mode
from .twin.padding import check_declared
from .speculate import Site, named_modules
from .transfer import HostBatch
from .twin.budget import twin_unfit
from .twin.ranks import RankTwin, decide_together, meet, several_ranks
from .twin.record import TwinRecorder
from .twin.copies import MISSING, mark_wrapper
from .debug_folder import prepare_debug_dir


class _Patch:
    """Wrapped forwards of one model, and exactly how to undo them."""

    def __init__(self) -> None:
        self._saved: list[tuple[nn.Module, Any]] = []

    def wrap(self, module: nn.Module, make: Callable[[Callable], Callable]) -> None:
        before = module.__dict__.get("forward", MISSING)
        wrapped = make(module.forward)
        mark_wrapper(wrapped, before)  # a float64 copy of the module runs its own forward (float64.py)
        self._saved.append((module, before))
        if _plain_setattr(module):
            module.__dict__["forward"] = wrapped  # what nn.Module.__setattr__ would do, without its checks
        else:
            module.forward = wrapped

    def restore(self) -> None:
        while self._saved:
            module, before = self._saved.pop()
            if before is MISSING:
                module.__dict__.pop("forward", None)
            else:
                module.__dict__["forward"] = before


def _plain_setattr(module: nn.Module) -> bool:
    """True when ``module.forward = f`` only stores ``f`` in the module's ``__dict__``."""
    cls = type(module)
    return (
        cls.__setattr__ is nn.Module.__setattr__
        and not hasattr(type(getattr(cls, "forward", None)), "__set__")  # no property or other data descriptor
        and "forward" not in module._parameters
        and "forward" not in module._buffers
        and "forward" not in module._modules
    )


def _wrap_module(recorder: Recorder, site: Site) -> Callable[[Callable], Callable]:
    call = recorder.call_module

    def make(forward: Callable) -> Callable:
        @functools.wraps(forward)
        def traced_forward(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True  # IPython and pytest leave these frames out of tracebacks
            return call(site, forward, args, kwargs)

        return traced_forward

    return make


def _wrap_measured(meter: RoundingMeter, site: Site, module: nn.Module) -> Callable[[Callable], Callable]:
    call = meter.call_module

    def make(forward: Callable) -> Callable:
        @functools.wraps(forward)
        def traced_forward(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            return call(site, module, forward, args, kwargs)

        return traced_forward

    return make


def _wrap_top(recorder: Recorder) -> Callable[[Callable], Callable]:
    def make(forward: Callable) -> Callable:
        @functools.wraps(forward)
        def traced_top_forward(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            return recorder.call_top(forward, args, kwargs)

        return traced_top_forward

    return make


def _wrap_top_no_grad(forward: Callable) -> Callable:
    @functools.wraps(forward)
    def untraced_top_forward(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        with torch.no_grad():
            return forward(*args, **kwargs)

    return untraced_top_forward


def _unfit(model: nn.Module) -> str | None:
    """``twin_unfit``, never raising: under several ranks the others wait for this rank's answer."""
    try:
        return twin_unfit(model)
    except Exception as exc:  # noqa: BLE001 - what cannot be told is not run
        return f"what its float64 twin would take could not be told ({type(exc).__name__}: {exc})"


def _wrap_top_twin(twin: TwinRecorder, backward: bool = False) -> Callable[[Callable], Callable]:
    """A rank that does not record, where the ranks run their twins together: its forward, then its twin. With
    ``backward`` its forward builds its graph, as the recording ranks' does (their backward's collectives need it)."""
    def make(forward: Callable) -> Callable:
        @functools.wraps(forward)
        def untraced_top_forward(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            with torch.no_grad():
                start = twin.start(args, kwargs)
            with torch.set_grad_enabled(backward and torch.is_grad_enabled()):
                out = forward(*args, **kwargs)
            with torch.no_grad():
                twin.done(start, out, HostBatch())  # its numbers are the recording ranks' to keep
            return out

        return untraced_top_forward

    return make


@contextmanager
def trace(
    model: nn.Module,
    debug_path: str | Path | None = None,
    do_prune_layers: bool = True,
    use_repr: bool = True,
    *,
    ranks: Ranks = 0,
    measure_rounding: bool | str = "auto",
    padding_mask: str | bool | None = None,
    backward: bool = False,
) -> Iterator[Recorder]:
    """Record every top-level forward of ``model`` inside the block; yields a Recorder.

    Writes the same files as transformers' ``model_addition_debugger_context`` into
    ``debug_path`` (the working folder when None) after each forward, and keeps
    each forward as a Trace in ``recorder.traces``. A second forward moves the
    previous one's files into ``debug_path/forward_<i>/``.

    Under torch.distributed, ``ranks`` says who records: rank 0 by default, into
    ``debug_path`` (transformers' behaviour); ``"all"`` or a list of ranks: each of
    them into ``debug_path/rank_<r>/``, loadable together with ``load_trace(debug_path)``.

    ``measure_rounding``: ``"auto"`` (the default) records each forward's float64 twin (``"twin"``: the whole
    model run once more in float64 from the same inputs, fingerprinted at every call, and the top-level inputs
    kept, so ``compare`` decides from two folders or a folder and a live port) where the model's float64 copy
    fits in half the free memory, and says why not where it does not; ``"twin"`` always; ``True`` also re-runs
    every call in float64 as it records and stores each output's own and accumulated rounding
    (``node.measured``); ``"leaves"`` the own rounding of the calls of modules without submodules, and the
    twin; ``False`` nothing. See ``capture/rounding.py``, ``capture/twin/`` and docs/format.md.

    ``padding_mask``: which argument of the model's forward holds its ``(batch, seq)`` padding mask, where the twin
    leaves out the padding: None (the default) finds it (a keyword named ``*mask*``, else a 0/1 input shaped like the
    token ids: ``capture/twin/padding.py``), a name (``"keep"``, or a place such as ``"args.1"``) declares it,
    ``False`` says there is none. A mask of all ones is no padding.

    ``backward``: the forward builds its graph (without it, the model's calls run under ``no_grad``, as
    transformers' debugger runs them) and every backward pass run inside the block is recorded beside the
    forward's files (``trace.backward``; ``capture/backward/``, docs/backward.md). The forward's files stay the same.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    mode = check_mode(measure_rounding)
    padding_mask = check_declared(padding_mask)
    plan = plan_ranks(ranks)
    records = plan.records
    folder = prepare_debug_dir(plan.debug_path(debug_path)) if records else None
    recorder = Recorder(model, folder, do_prune_layers, use_repr, plan if plan.describes else None)
    skipped = None
    together = mode is not None and several_ranks()  # every rank runs its twin, or none does (twin/ranks.py)
    apart = meet() if together else None
    if apart is not None:  # nothing that runs the model again: its collectives would wait for the other ranks
        together, mode, skipped = False, "twin", apart
    elif together and mode in ("all", "leaves"):
        warnings.warn(f"nbtrace: measure_rounding={measure_rounding!r} re-runs each call on the recording ranks alone, "
                      "where a tensor-parallel module's collectives would wait for the others: under several ranks "
                      "only the float64 twin is recorded", stacklevel=3)
        mode = "twin"
    elif mode == "auto":
        mode, skipped = "twin", _unfit(model) if records or together else None
        if together:
            skipped = decide_together(skipped)
    meter = recorder.rounding = RoundingMeter(recorder, mode, padding_mask) if mode is not None and records else None
    if meter is not None:
        meter.twin.skipped = skipped
        meter.twin.ranks = RankTwin() if together else None
    patch = _Patch()
    follower: TwinRecorder | None = None  # a rank that records nothing still runs its twin (below)
    if backward and records:
        recorder.backward = BackwardCapture(recorder)
    try:
        if records:
            class_name = recorder.class_name
            for name, module in named_modules(model):
                if name:
                    has_children = any(child is not None for child in module._modules.values())
                    site = Site(f"{class_name}.{name}", has_children)
                    make = _wrap_measured(meter, site, module) if meter is not None else _wrap_module(recorder, site)
                    patch.wrap(module, make)
            patch.wrap(model, _wrap_top(recorder))
        elif together:
            follower = TwinRecorder(model, recorder.class_name, keep_inputs=False, padding_mask=padding_mask)
            follower.skipped, follower.ranks = skipped, RankTwin()
            patch.wrap(model, _wrap_top_twin(follower, backward))
        elif not backward:  # with it, the forward builds its graph here too: the ranks' backward runs together
            patch.wrap(model, _wrap_top_no_grad)
        yield recorder
    finally:
        patch.restore()
        for twin in (meter.twin if meter is not None else None, follower):
            if twin is not None:
                twin.release()  # no forward of this block comes: its float64 caches are not kept with the Recorder
        if recorder.backward is not None:
            recorder.backward.close(clean=sys.exc_info()[0] is None)


@contextmanager
def model_addition_debugger_context(
    model: nn.Module,
    debug_path: str | Path | None = None,
    do_prune_layers: bool = True,
    use_repr: bool = True,
) -> Iterator[nn.Module]:
    """Drop-in for transformers' context of the same name: same signature, same files.

    Yields the model. Use ``nbtrace.trace`` to get the recorded Trace back.
    """
    with trace(model, debug_path, do_prune_layers, use_repr, measure_rounding=False) as recorder:
        recorder.record_outside = False  # transformers' debugger records only calls inside the model's forward
        recorder.sketch_runs = False  # nor sketches the run: the drop-in costs what transformers' files cost
        yield model
