"""Replay: each aligned port module run again on the inputs the REFERENCE recorded for that call.

Nothing is inherited then: whatever the port's output differs by is its own doing. Per
call, on the reference's recorded inputs ``x``:

- ``port(x)`` in the port's dtype, against the reference's recorded output ``ref``;
- ``port64(x)``: the same module copied to float64, inputs upcast — its math without rounding;
- so ``port(x) − ref`` splits into the port's rounding ``port(x) − port64(x)`` and a difference
  in the math (plus the reference's own rounding) ``port64(x) − ref``.

Arguments are rebuilt from the port's own recorded call (names, printed non-tensor values;
``callargs.py``), each tensor replaced by the reference's tensor the comparison paired with
it; a float tensor without a partner stays the port's own (and is noted: it may carry an
inherited difference). A call whose arguments cannot be rebuilt, whose module is not found,
or that raises, is listed with the reason. The reference's output of a call with children
is not recorded: it is the tensor handed on right after it, or its last child's output,
whichever is closest to ``port64(x)`` (``Flow.call_output``).

Memory: one module is copied to float64 at a time and dropped after its call. ``scope``
limits what is replayed: ``"auto"`` every call whose module holds at most as many
parameters as the largest layer block, ``"leaves"`` calls without children, ``"all"``
everything. The random number generators' states are restored afterwards.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from itertools import chain
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ...core.dtypes import is_float
from ...core.node import Node
from ...core.tensor import TensorValue
from .callargs import Unreplayable, rebuild, tensors_of
from ..align.flow import Flow
from ..measure.noise import DiffStats, as_matrix, diff_stats, relative, unit_roundoff

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Match

SCOPES = ("auto", "leaves", "all")
_FAR = 0.5  # a candidate output farther than this (relative) from port64(x) is not the call's output


@dataclass
class Replayed:
    """One replayed call: its own difference, split, or why it could not be replayed."""

    a: Node
    b: Node
    problem: str | None = None
    own: DiffStats | None = None  # port(x) vs ref
    math: DiffStats | None = None  # port64(x) vs ref
    rounding: DiffStats | None = None  # port(x) vs port64(x)
    ideal: float | None = None  # one rounding of port64(x) to the dtype, relative
    output: str = ""  # which recorded tensor of a stood for the reference's output
    numbers: tuple[float, float, float | None] = (0.0, 0.0, None)  # max_abs, max_rel, cosine of port(x) vs ref
    notes: list[str] = field(default_factory=list)


def find_module(model: nn.Module, path: str) -> nn.Module | None:
    """The submodule a trace path names (the path starts with the root's class name)."""
    path = path.split(" ", 1)[0]
    if "." not in path:
        return model
    try:
        return model.get_submodule(path.split(".", 1)[1])
    except AttributeError:
        return None


def float64_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` with its float parameters and buffers in float64 (no copy in its own dtype first)."""
    memo: dict[int, Any] = {}
    for tensor in chain(module.parameters(), module.buffers()):
        if tensor.is_floating_point():
            wide = tensor.detach().to(torch.float64)
            memo[id(tensor)] = nn.Parameter(wide, requires_grad=False) if isinstance(tensor, nn.Parameter) else wide
    return copy.deepcopy(module, memo)


class Replayer:
    """Replays the aligned calls of a live port against the reference's trace."""

    def __init__(self, port: nn.Module, flows: tuple[Flow, Flow], matches: list[Match],
                 valid: torch.Tensor | None, scope: str = "auto") -> None:
        if scope not in SCOPES:
            raise ValueError(f"replay must be True, False or one of {SCOPES}; got {scope!r}")
        self.port, self.matches, self.valid, self.scope = port, matches, valid, scope
        self.flow_a, self.flow_b = flows
        self.budget = _budget(port, [m.b for m in matches]) if scope == "auto" else math.inf

    def run(self) -> list[Replayed]:
        state = torch.random.get_rng_state()
        devices = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        try:
            with torch.no_grad():
                return [self.replay(match) for match in self.matches]
        finally:
            torch.random.set_rng_state(state)
            if devices is not None:
                torch.cuda.set_rng_state_all(devices)

    # -- one call -----------------------------------------------------------------------
    def replay(self, match: Match) -> Replayed:
        result = Replayed(match.a, match.b)
        module = find_module(self.port, match.b.module_path)
        if module is None:
            result.problem = f"the port has no module {match.b.module_path}"
            return result
        if self.scope == "leaves" and match.b.children:
            result.problem = "not a leaf (replay='leaves')"
            return result
        size = sum(p.numel() for p in module.parameters())
        if size > self.budget:
            result.problem = f"too large to copy to float64 ({size:,} parameters; replay='all' replays it)"
            return result
        try:
            args, kwargs = rebuild(match.b.inputs, self._substitute(match, result))
        except Unreplayable as exc:
            result.problem = str(exc)
            return result
        try:
            out = tensors_of(module(*args, **kwargs))
            wide = float64_copy(module)
            out64 = tensors_of(wide(*_up(args), **_up(kwargs)))
            del wide
        except Exception as exc:  # noqa: BLE001  (a module that cannot run on these inputs)
            result.problem = f"raised {type(exc).__name__}: {str(exc)[:120]}"
            return result
        self._judge(result, out, out64)
        return result

    def _substitute(self, match: Match, result: Replayed):
        partner = {d.b_arg: d.arg for d in match.diffs if d.io == "input" and d.shape == d.b_shape}
        mine = {arg: t for io, arg, t in match.a.tensors() if io == "input"}

        def substitute(arg: str, tensor: TensorValue) -> torch.Tensor:
            ref = mine.get(partner.get(arg, ""))
            if ref is not None:
                loaded = self.flow_a.cache.load(ref)
            else:
                loaded = self.flow_b.cache.load(tensor)
                if is_float(tensor.dtype):
                    result.notes.append(f"{arg} has no partner in the reference: the port's own value was used")
            if loaded is None:
                raise Unreplayable(f"argument {arg} has no full tensor in the trace (use_repr=False)")
            return loaded.clone()

        return substitute

    def _judge(self, result: Replayed, out: list[torch.Tensor], out64: list[torch.Tensor]) -> None:
        floats = [(o, w) for o, w in zip(out, out64) if o.is_floating_point()]
        if not floats:
            result.problem = "returned no float tensor"
            return
        port_out, port64 = floats[0]
        shape = tuple(port_out.shape)
        candidates = [s for s in self.flow_a.call_output(result.a) if s.tensor.shape == shape]
        loaded = [(s, t) for s in candidates if (t := self.flow_a.cache.load(s.tensor)) is not None]
        if not loaded:
            result.problem = "the reference recorded no output of this shape for this call"
            return
        slot, ref = min(loaded, key=lambda item: relative(item[1], port64, self.valid))
        if result.a.children and relative(ref, port64, self.valid) > _FAR:
            result.problem = "its output matches none of the reference's recorded tensors"
            return
        result.output = f"{slot.node.module_path} {slot.io} {slot.arg}"
        u = unit_roundoff(ref.dtype, port_out.dtype)
        result.own = diff_stats(ref, port_out, self.valid, u)
        result.math = diff_stats(ref, port64, self.valid, u)
        result.rounding = diff_stats(port64, port_out, self.valid, u)
        result.ideal = relative(port64, port64.to(port_out.dtype), self.valid)
        result.numbers = _numbers(ref, port_out, self.valid)


def _numbers(ref: torch.Tensor, out: torch.Tensor, valid: torch.Tensor | None) -> tuple[float, float, float | None]:
    x, y = as_matrix(ref, valid).reshape(-1), as_matrix(out, valid).reshape(-1)
    finite = torch.isfinite(x) & torch.isfinite(y)
    x, y = x[finite], y[finite]
    if x.numel() == 0:
        return 0.0, 0.0, None
    delta, scale = float((x - y).abs().max()), float(x.abs().max())
    norms = float(x.norm() * y.norm())
    cosine = max(-1.0, min(1.0, float(x @ y) / norms)) if norms > 0 else None
    return delta, (delta / scale if scale > 0 else (0.0 if delta == 0 else math.inf)), cosine


def _budget(port: nn.Module, nodes: list[Node]) -> float:
    """The most parameters a replayed module may hold: the largest layer block's (no limit without blocks)."""
    sizes = [sum(p.numel() for p in m.parameters()) for node in nodes if node.is_layer_block
             and (m := find_module(port, node.module_path)) is not None]
    return max(sizes) if sizes else math.inf


def _up(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(torch.float64) if value.is_floating_point() else value
    if isinstance(value, tuple):
        return tuple(_up(v) for v in value)
    if isinstance(value, list):
        return [_up(v) for v in value]
    if isinstance(value, dict):
        return {k: _up(v) for k, v in value.items()}
    return value
