"""Inside one module call: record its torch operations beside their float64 twins, align a reference's
with a port's, and name the first operation (and source line) where they part ways."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..measure.noise import UNIT_ROUNDOFF
from .align import align_operations
from .narrow import OperationDiff, OperationDivergence, narrow_records
from .record import Operation, OperationRecord, record_operations

__all__ = ["Operation", "OperationDiff", "OperationDivergence", "OperationRecord", "narrow", "narrow_modules",
           "record_operations"]


def _cast(value: Any, dtype: torch.dtype) -> Any:
    from torch.utils._pytree import tree_map

    return tree_map(lambda x: x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x, value)


def _in_dtype(module: nn.Module, dtype: torch.dtype | None) -> nn.Module:
    """``module`` itself, or a copy in ``dtype`` (the user's module is never converted)."""
    if dtype is None or all(p.dtype == dtype for p in module.parameters() if p.is_floating_point()):
        return module
    return copy.deepcopy(module).to(dtype)


def narrow_modules(reference: nn.Module, port: nn.Module, args: tuple = (), kwargs: dict | None = None, *,
                   port_args: tuple | None = None, port_kwargs: dict | None = None,
                   inputs_map: Mapping[str, str] | None = None,
                   dtype: torch.dtype | None = None, full: bool = False) -> OperationDiff:
    """Run ``reference(*args, **kwargs)`` and ``port`` on the same inputs, each beside its float64 twin, and name
    the first operation where they differ. Where the port takes its inputs differently, ``inputs_map`` (the
    reference's argument -> the port's parameter, as in ``compare``) binds the reference's arguments to the port's
    ``forward``, or ``port_args``/``port_kwargs`` give the port its own. ``dtype`` runs copies of both (and the
    inputs) in that dtype instead of their own; ``full`` keeps every operation's output tensors
    (``Operation.low``, ``.truth``), else their summaries only."""
    for name, module in (("reference", reference), ("port", port)):
        if not isinstance(module, nn.Module):
            raise TypeError(f"narrow: {name} must be a torch.nn.Module, got {type(module).__name__}")
    kwargs = dict(kwargs or {})
    if inputs_map is not None and (port_args is not None or port_kwargs is not None):
        raise ValueError("narrow: give inputs_map or port_args/port_kwargs, not both: each says on its own how the "
                         "port is called")
    p_args = args if port_args is None else port_args
    p_kwargs = dict(port_kwargs) if port_kwargs is not None else ({} if port_args is not None else kwargs)
    if inputs_map is not None:
        from ..replay.callargs import bind

        p_args, p_kwargs = bind(port.forward, tuple(args), kwargs, inputs_map)
    if dtype is not None:
        args, kwargs, p_args, p_kwargs = (_cast(v, dtype) for v in (args, kwargs, p_args, p_kwargs))
    ref = record_operations(_in_dtype(reference, dtype), tuple(args), kwargs)
    got = record_operations(_in_dtype(port, dtype), tuple(p_args), p_kwargs)
    u = max(UNIT_ROUNDOFF.get(ref.dtype, 0.0), UNIT_ROUNDOFF.get(got.dtype, 0.0)) or UNIT_ROUNDOFF["float64"]
    return keep(narrow_records(ref, got, align_operations(ref, got, u)), full)


def keep(diff: OperationDiff, full: bool) -> OperationDiff:
    """``diff`` with its operations' tensors released unless ``full``."""
    if not full:
        for record in (diff.reference, diff.port):
            for op in record.operations if record is not None else []:
                op.release()
    return diff




def narrow(subject: Any, port: nn.Module | None = None, args: tuple = (), kwargs: dict | None = None, *,
           reference: nn.Module | None = None, port_args: tuple | None = None, port_kwargs: dict | None = None,
           inputs_map: Mapping[str, str] | None = None,
           dtype: torch.dtype | None = None, full: bool = False) -> OperationDiff | None:
    """The first operation (and source line) where a port differs from the reference, inside one call.

    ``narrow(reference_module, port_module, args, kwargs)``: both modules run on the reference's inputs
    (``inputs_map``, or ``port_args``/``port_kwargs``, where the port takes them differently; ``dtype``: run
    copies in it).
    ``narrow(comparison, reference=original_model)``: the call the comparison blames, on its recorded inputs;
    the port is the live module of ``compare(a, port)`` (or ``port=``); without ``reference`` only the port's
    side is re-run. Sets ``comparison.first_divergence.operation``; None when nothing diverges. ``full`` keeps
    each operation's output tensors (``Operation.low`` as run, ``Operation.truth`` in float64), else summaries."""
    from ..comparison import Comparison
    from .from_comparison import narrow_comparison

    if isinstance(subject, Comparison):
        given = [name for name, value in (("args", args or None), ("kwargs", kwargs), ("port_args", port_args),
                                          ("port_kwargs", port_kwargs), ("inputs_map", inputs_map), ("dtype", dtype))
                 if value is not None]
        if given:
            raise ValueError(f"narrow: {given[0]} does not apply to narrow(comparison): the blamed call runs on the "
                             "inputs its trace recorded, in its own dtype (it applies to narrow(reference_module, "
                             "port_module, ...))")
        found = narrow_comparison(subject, reference=reference, port=port)
        return keep(found, full) if found is not None else None
    if port is None:
        raise TypeError("narrow(reference, port, args, kwargs): the port module is missing")
    if reference is not None:
        raise ValueError("narrow: reference= does not apply to narrow(reference_module, port_module, ...): the first "
                         "argument is the reference (it applies to narrow(comparison, reference=...))")
    return narrow_modules(subject, port, args, kwargs, port_args=port_args, port_kwargs=port_kwargs,
                          inputs_map=inputs_map, dtype=dtype, full=full)
