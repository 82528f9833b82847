"""Narrowing the call a comparison blames: its recorded inputs, the live modules, and one side or two.

Both sides live (``reference=`` the original model, the port from ``compare(a, port)`` or ``port=``): each
module of the blamed call runs on the reference's recorded inputs (the port's arguments rebuilt from its own
recorded call, each tensor replaced by the reference's tensor the comparison paired with it), and their
operations are aligned (``narrow.py``). Only the port live: its operations are recorded beside their float64
twins and its float64 output is held against the reference's recorded output at the call's boundary; which
operation inside differs cannot be told without the reference's code, and the note says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..replay.callargs import Unreplayable, rebuild
from ...capture.twin.values import device_of, to_device
from ..measure.noise import UNIT_ROUNDOFF
from ..replay.replay import find_module
from .align import align_operations
from .narrow import PRECISION_FLOOR, PRECISION_K, OperationDiff, narrow_records
from .record import record_operations, relative_rms

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison


def _arguments(comparison: Comparison, node: Any, side: int, reference_node: Any = None) -> tuple[tuple, dict]:
    """The recorded arguments of ``node`` (a's call, or b's with ``side`` 1); b's are the reference call's
    (``reference_node``) wherever an argument has its partner there: both sides run on the same inputs."""
    flow_a, flow_b = comparison.flows
    if side == 0:
        def substitute(arg, tensor):
            return _loaded(flow_a.cache.load(tensor), arg)
    else:
        match = comparison.match_of(reference_node)
        partner = {d.b_arg: d.arg for d in match.diffs if d.io == "input" and d.shape == d.b_shape} if match else {}
        mine = {arg: t for io, arg, t in reference_node.tensors() if io == "input"}

        def substitute(arg, tensor):
            ref = mine.get(partner.get(arg, ""))
            return _loaded((flow_a if ref is not None else flow_b).cache.load(ref if ref is not None else tensor), arg)
    return rebuild(node.inputs, substitute)


def _loaded(tensor: torch.Tensor | None, arg: str) -> torch.Tensor:
    if tensor is None:
        raise Unreplayable(f"argument {arg} has no full tensor in the trace (use_repr=False)")
    return tensor.clone()


def narrow_comparison(comparison: Comparison, reference: nn.Module | None = None,
                      port: nn.Module | None = None) -> OperationDiff | None:
    """Narrow the call ``comparison`` blames to its first diverging operation and set
    ``first_divergence.operation``; None when nothing diverges."""
    first = comparison.first_divergence
    if first is None:
        return None
    port = port if port is not None else getattr(comparison, "live_port", None)
    if reference is None:  # compare(reference_module, port_module, inputs=...): the reference is live too
        reference = getattr(comparison, "live_reference", None)
    if port is None:
        raise ValueError("narrow: the port is not live: pass port=<the port module> (or compare(a, port_module))")
    node, b_node = _with_counterpart(comparison, first)
    if b_node is None:
        raise ValueError(f"narrow: {first.module_path} has no counterpart in the port to run")
    port_module = find_module(port, b_node.module_path)
    if port_module is None:
        raise ValueError(f"narrow: the port has no module {b_node.module_path}")
    try:  # the recorded tensors load on the CPU: each side's arguments go where its module lives
        p_args, p_kwargs = to_device(_arguments(comparison, b_node, 1, node), device_of(port_module))
        if reference is not None:
            ref_module = find_module(reference, node.module_path)
            if ref_module is None:
                raise ValueError(f"narrow: the reference has no module {node.module_path}")
            args, kwargs = to_device(_arguments(comparison, node, 0), device_of(ref_module))
    except Unreplayable as exc:
        raise ValueError(f"narrow: the inputs of {node.module_path} cannot be rebuilt: {exc}") from None
    if reference is None:
        result = narrow_port_only(port_module, p_args, p_kwargs, _recorded_outputs(comparison, node))
    else:
        ref = record_operations(ref_module, args, kwargs)
        got = record_operations(port_module, p_args, p_kwargs)
        result = narrow_records(ref, got, align_operations(ref, got, _u(ref.dtype, got.dtype)))
    result.module_path = node.module_path
    first.operation = result
    return result


def _with_counterpart(comparison: Comparison, first: Any) -> tuple[Any, Any]:
    """The blamed call and its counterpart in b; where the port has none (its code sits in a module that holds
    more), the nearest call holding the blamed one that has a counterpart: its operations include the blamed
    module's (``Operation.module`` names it)."""
    node, b_node = first.node, first.b_node
    while b_node is None and node.parent is not None:
        node = node.parent
        match = comparison.match_of(node)
        b_node = match.b if match is not None else None
    return node, b_node


def _u(*dtypes: str) -> float:
    return max(UNIT_ROUNDOFF.get(d, 0.0) for d in dtypes) or UNIT_ROUNDOFF["float64"]


def _recorded_outputs(comparison: Comparison, node: Any) -> list[torch.Tensor]:
    """What the reference's call returned, as recorded (for a call with children: ``Flow.call_output``)."""
    flow = comparison.flows[0]
    loaded = [flow.cache.load(slot.tensor) for slot in flow.call_output(node)]
    return [t for t in loaded if t is not None and t.is_floating_point()]


def narrow_port_only(port: nn.Module, args: tuple, kwargs: dict,
                     reference_outputs: list[torch.Tensor]) -> OperationDiff:
    """The port's operations against their own float64 run, and its float64 output against the reference's
    recorded output at the call's boundary (the candidate of its shape closest to it; ``note`` says how far
    that narrows it)."""
    got = record_operations(port, args, kwargs)
    u = _u(got.dtype)  # the call's dtype: its first floating parameter's
    last = got.operations[got.outputs[0]] if got.outputs else None
    same = [t for t in reference_outputs if last is not None and t.shape == last.low.shape]
    if last is None or last.truth is None or not same:
        note = "only the port is live and the reference recorded no output of its shape to hold it against"
        return OperationDiff(None, got, None, None, note=note)
    difference = min(relative_rms(last.truth, t) for t in same)  # t brought to truth's device, in float64
    allowed = PRECISION_K * (last.error or 0.0) + PRECISION_FLOOR * u
    verdict = "differs" if not difference <= allowed else "agrees"
    note = (f"only the port is live: its {len(got)} operations ran beside their float64 twins; at the call's "
            f"boundary its float64 output {verdict} from the reference's recorded output ({difference:.3g} relative "
            f"where rounding allows {allowed:.3g}); which operation inside differs needs the reference's code: "
            f"narrow(comparison, reference=<the original model>)")
    coarser = [op for op in got.operations if op.reaches_output and UNIT_ROUNDOFF.get(op.dtype, 0.0) > u]
    if coarser:
        shown = ", ".join(f"{op.name} to {op.dtype} at {op.source.short}" for op in coarser[:3])
        note += f"; the port rounds to a coarser dtype than the call's: {shown}"
    return OperationDiff(None, got, None, None, note=note)
