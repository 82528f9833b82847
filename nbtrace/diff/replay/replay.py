"""Replay: each aligned port module run again on the inputs the REFERENCE recorded for that call.

Nothing is inherited then: whatever the port's output differs by is its own doing. Per call, on
the reference's recorded inputs ``x`` (moved to the port module's device; results brought back to
the host once per call):

- ``p = F_b(x)``, the port in its own dtype and kernels;
- ``T_b = F_b64(x)``, the same module copied to float64, TF32 off, the math attention backend
  (``exact.py``): the port's function without rounding;
- with the reference live too (``compare(reference_module, port_module, inputs)``): ``T_a =
  F_a64(x)`` and each side's float32 result, whose distance from its float64 one is the precision of
  the truths themselves.

The numbers are RMS norms (``Replayed``); ``replay_verdict.py`` applies the measured rules.
Arguments are rebuilt from the port's own recorded call (names, printed non-tensor values;
``callargs.py``), each tensor replaced by the reference's tensor the comparison paired with it; a
float tensor without a partner stays the port's own (and is noted). A call whose arguments cannot be
rebuilt, whose module is not found, or that raises, is listed with the reason. The reference's
output of a call with children is not recorded: it is the tensor handed on right after it, or its
last child's output, whichever is closest to ``T_b`` (``Flow.call_output``); none right before layer
blocks that pruning removed (what follows there is what they made).

Speed and memory: each module is copied to float64 once per comparison and its copy serves the
calls inside it (``copies.py``: one copy per side and dtype held at a time, that of the outermost
module being replayed, dropped when replay leaves it: the peak is the float64 copy of the largest
replayed module); a recorded tensor that is a repeat of an earlier one (a layer's output read as the
next layer's input) is loaded once, from where it first appeared; a call's four tensor pairs are
measured in one pass (``measure/pair_sums.py``). ``scope`` limits what is replayed: ``"auto"`` every call
whose module holds at most as many parameters as the largest layer block, ``"leaves"`` calls without
children, ``"all"`` everything. The random number generators' states are restored afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ...core.collector import older_objects_frozen
from ...core.dtypes import is_float, short_dtype
from ...core.node import Node
from ...core.tensor import TensorValue
from .callargs import Unreplayable, rebuild, tensors_of
from ..align.flow import Flow
from ..measure import measured
from ..measure.noise import DiffStats, as_matrix, unit_roundoff
from .copies import Copies
from ...capture.twin.numerics import exact_numerics, float64_twin
from ...capture.twin.values import cast, device_of, to_device
from ..measure.pair_sums import PairSums, Rows
from ..measure.metrics import same_shape

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
    # the measured rules' numbers (RMS norms, absolute)
    difference: float = 0.0  # ‖y_a − T_b‖
    port_own: float = 0.0  # ‖p − T_b‖
    one: float = 0.0  # ‖T_b − T_b rounded to the dtype‖
    scale: float = 0.0  # RMS of T_b
    reference_own: float | None = None  # ‖y_a − T_a‖: measured by the reference's trace, or live
    live: tuple[float, float, float] | None = None  # both live: (‖T_a − T_b‖, r_a, r_b)
    device: str = "cpu"
    ambiguous: bool = False  # a call with children whose possible recorded outputs disagree (the closest was used)
    output_tensor: torch.Tensor | None = None  # that tensor
    output: str = ""  # which recorded tensor of a stood for the reference's output
    numbers: tuple[float, float, float | None] = (0.0, 0.0, None)  # max_abs, max_rel, cosine of port(x) vs ref
    notes: list[str] = field(default_factory=list)


def submodule_name(path: str) -> str:
    """The name under the root of the module a trace path names ("" for the root: the path starts with the
    root's class name; a call's " @n" suffix is left out)."""
    path = path.split(" ", 1)[0]
    return path.split(".", 1)[1] if "." in path else ""


def find_module(model: nn.Module, path: str) -> nn.Module | None:
    """The submodule a trace path names (the path starts with the root's class name)."""
    try:
        return model.get_submodule(submodule_name(path))
    except AttributeError:
        return None


class Replayer:
    """Replays the aligned calls of a live port against the reference's trace."""

    def __init__(self, port: nn.Module, flows: tuple[Flow, Flow], matches: list[Match],
                 valid: torch.Tensor | None, scope: str = "auto", reference: nn.Module | None = None) -> None:
        if scope not in SCOPES:
            raise ValueError(f"replay must be True, False or one of {SCOPES}; got {scope!r}")
        self.port, self.matches, self.valid, self.scope = port, matches, valid, scope
        self.reference = reference
        self.flow_a, self.flow_b = flows
        self._modules: dict[int, dict[str, nn.Module]] = {}  # id(model) -> its submodules by name
        self._sizes: dict[int, int] = {}
        self._devices: dict[int, torch.device] = {}
        self._within: set[int] = set()  # modules inside one that is within the budget
        self.rows = Rows(valid)  # the positions measured (padding rows left out), per shape
        self.budget = _budget(self, [m.b for m in matches]) if scope == "auto" else math.inf
        self.copies: dict[tuple[str, torch.dtype], Copies] = {}  # (side, dtype): made anew by each run()

    def run(self) -> list[Replayed]:
        state = torch.random.get_rng_state()
        devices = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        self.copies = {(side, dtype): Copies(dtype) for side in ("port", "reference")
                       for dtype in (torch.float64, torch.float32)}
        try:
            with torch.no_grad(), older_objects_frozen():
                return [self.replay(match) for match in self.matches]
        finally:
            for copies in self.copies.values():
                copies.clear()
            torch.random.set_rng_state(state)
            if devices is not None:
                torch.cuda.set_rng_state_all(devices)

    def module(self, model: nn.Module, path: str) -> nn.Module | None:
        """``find_module``, from one walk of ``model``'s submodules (by every name they are registered under)."""
        if id(model) not in self._modules:
            self._modules[id(model)] = {name: m for name, m in model.named_modules(remove_duplicate=False)}
        return self._modules[id(model)].get(submodule_name(path))

    def size(self, module: nn.Module) -> int:
        """How many parameters ``module`` holds, counted once."""
        if id(module) not in self._sizes:
            self._sizes[id(module)] = sum(p.numel() for p in module.parameters())
        return self._sizes[id(module)]

    def device(self, module: nn.Module) -> torch.device:
        """``device_of``, looked up once per module."""
        if id(module) not in self._devices:
            self._devices[id(module)] = device_of(module)
        return self._devices[id(module)]

    # -- one call -----------------------------------------------------------------------
    def replay(self, match: Match) -> Replayed:
        result = Replayed(match.a, match.b)
        module = self.module(self.port, match.b.module_path)
        if module is None:
            result.problem = f"the port has no module {match.b.module_path}"
            return result
        if self.scope == "leaves" and match.b.children:
            result.problem = "not a leaf (replay='leaves')"
            return result
        if self.budget != math.inf and id(module) not in self._within:  # a submodule holds no more than it
            size = self.size(module)
            if size > self.budget:
                result.problem = f"too large to copy to float64 ({size:,} parameters; replay='all' replays it)"
                return result
            self._within.update(id(m) for m in module.modules())
        try:
            args, kwargs = rebuild(match.b.inputs, self._substitute(match, result))
        except Unreplayable as exc:
            result.problem = str(exc)
            return result
        device = self.device(module)
        result.device = str(device)
        args, kwargs = to_device(args, device), to_device(kwargs, device)
        try:
            with _as_recorded(match.b.autocast):  # a port run under autocast is replayed under it
                out = _host(module(*args, **kwargs))
            out64 = _host(_exact(self.copies["port", torch.float64], module, args, kwargs))
        except Exception as exc:  # noqa: BLE001  (a module that cannot run on these inputs)
            result.problem = f"raised {type(exc).__name__}: {str(exc)[:120]}"
            return result
        self._judge(result, out, out64)
        if self.reference is not None and result.problem is None:
            self._live(match, result, module, args, kwargs, out64)
        return result

    def _live(self, match: Match, result: Replayed, port_module: nn.Module, args: Any, kwargs: Any,
              out64: list[torch.Tensor]) -> None:
        """Both live: the reference's module in float64 and float32 on its own recorded inputs; the port's in
        float32 on the same values."""
        assert self.reference is not None
        module = self.module(self.reference, match.a.module_path)
        if module is None:
            result.notes.append(f"the reference has no module {match.a.module_path}: replayed from its files")
            return
        try:
            a_args, a_kwargs = rebuild(match.a.inputs, self._own(match))
            device = self.device(module)
            a_args, a_kwargs = to_device(a_args, device), to_device(a_kwargs, device)
            ref64 = _first_float(_host(_exact(self.copies["reference", torch.float64], module, a_args, a_kwargs)))
            ref32 = _first_float(_host(_exact(self.copies["reference", torch.float32], module, a_args, a_kwargs)))
            port32 = _first_float(_host(_exact(self.copies["port", torch.float32], port_module, args, kwargs)))
        except (Unreplayable, Exception) as exc:  # noqa: BLE001
            result.notes.append(f"the reference's module could not run: {type(exc).__name__}: {str(exc)[:120]}")
            return
        port64 = _first_float(out64)
        if ref64 is None or port64 is None or ref32 is None or port32 is None or ref64.shape != port64.shape:
            result.notes.append("the reference's and the port's float64 results do not pair")
            return
        result.live = (_rms(ref64, port64, self.valid), _rms(ref32, ref64, self.valid),
                       _rms(port32, port64, self.valid))
        if result.reference_own is None and result.output_tensor is not None:
            result.reference_own = _rms(result.output_tensor, ref64, self.valid)

    def _own(self, match: Match):
        def own(arg: str, tensor: TensorValue) -> torch.Tensor:
            loaded = _load(self.flow_a, match.a, arg, tensor)
            if loaded is None:
                raise Unreplayable(f"argument {arg} has no full tensor in the trace (use_repr=False)")
            return loaded.clone()

        return own

    def _substitute(self, match: Match, result: Replayed):
        partner = {d.b_arg: d.arg for d in match.diffs if d.io == "input" and same_shape(d.shape, d.b_shape)}
        mine = {arg: t for io, arg, t in match.a.tensors() if io == "input"}

        def substitute(arg: str, tensor: TensorValue) -> torch.Tensor:
            ref = mine.get(partner.get(arg, ""))
            if ref is not None:
                loaded = _load(self.flow_a, match.a, partner[arg], ref)
            else:
                loaded = _load(self.flow_b, match.b, arg, tensor)
                if is_float(tensor.dtype):
                    result.notes.append(f"{arg} has no partner in the reference: the port's own value was used")
            if loaded is None:
                raise Unreplayable(f"argument {arg} has no full tensor in the trace (use_repr=False)")
            wanted = getattr(torch, short_dtype(tensor.dtype), None) if is_float(tensor.dtype) else None
            if isinstance(wanted, torch.dtype) and loaded.is_floating_point() and loaded.dtype != wanted:
                loaded = loaded.to(wanted)  # a bfloat16 port fed a float32 reference's values: rounded into its dtype
            return loaded.reshape(tensor.shape).clone()  # the port's shape: they may differ by leading 1s

        return substitute

    def _judge(self, result: Replayed, out: list[torch.Tensor], out64: list[torch.Tensor]) -> None:
        floats = [(o, w) for o, w in zip(out, out64) if o.is_floating_point()]
        if not floats:
            result.problem = "returned no float tensor"
            return
        port_out, port64 = floats[0]
        shape = tuple(port_out.shape)
        candidates = [s for s in self.flow_a.call_output(result.a) if same_shape(s.tensor.shape, shape)]
        loaded = [(s, t.reshape(shape)) for s in candidates
                  if (t := self.flow_a.cache.load(s.source.tensor)) is not None]
        if not loaded:
            result.problem = "the reference recorded no output of this shape for this call"
            return
        slot, ref = loaded[0]
        if len(loaded) > 1:  # the closest to port64(x): relative(candidate, port64) of each, in one pass
            near = PairSums([port64, *(t for _, t in loaded)], [(i, 0) for i in range(1, len(loaded) + 1)], self.rows)
            slot, ref = loaded[min(range(len(loaded)), key=lambda i: near.stats(i, 0.0).rel)]
        result.ambiguous = any(t is not ref and not torch.equal(t, ref) for _, t in loaded)
        u = _unit(ref.dtype, port_out.dtype)
        # (ref, port), (ref, port64), (port64, port), (port64, port64 rounded to the port's dtype)
        sums = PairSums([ref, port_out, port64, port64.to(port_out.dtype)], [(0, 1), (0, 2), (2, 1), (2, 3)],
                        self.rows)
        result.math = sums.stats(1, u)
        if result.a.children and result.math.rel > _FAR:
            result.problem = "its output matches none of the reference's recorded tensors"
            return
        result.output = f"{slot.node.module_path} {slot.io} {slot.arg}"
        result.output_tensor = ref
        result.own = sums.stats(0, u)
        result.rounding = sums.stats(2, u)
        one = sums.stats(3, u)
        result.ideal = one.rel
        result.numbers = sums.numbers(0)
        result.difference = result.math.rms
        result.port_own = result.rounding.rms
        result.one = one.rms
        result.scale = result.math.norm if result.math.norm else _rms(port64, torch.zeros_like(port64), self.valid)
        if slot.io == "output" and slot.node is result.a:
            result.reference_own = getattr(measured.measured_of(result.a).get(slot.arg), "own", None)


def _as_recorded(autocast: tuple[str, torch.dtype] | None) -> contextlib.AbstractContextManager[Any]:
    """The autocast a call ran under when it was traced (``Node.autocast``), or nothing."""
    if autocast is None:
        return contextlib.nullcontext()
    return torch.autocast(autocast[0], dtype=autocast[1])


def _exact(copies: Copies, module: nn.Module, args: Any, kwargs: Any) -> Any:
    """``module``'s copy in ``copies.dtype`` run on ``args`` cast to it, with exact numerics; a float64 copy as the
    float64 twin (``capture/twin/numerics.py``: float64 through the module's own casts)."""
    copied = copies.of(module)
    numerics = float64_twin() if copies.dtype == torch.float64 else exact_numerics()
    with numerics:
        return copied(*cast(args, copies.dtype), **cast(kwargs, copies.dtype))


@functools.lru_cache(maxsize=64)
def _unit(a: torch.dtype, b: torch.dtype) -> float:
    return unit_roundoff(a, b)


def _load(flow: Flow, node: Node, arg: str, tensor: TensorValue) -> torch.Tensor | None:
    """A recorded input, loaded from where its values first appeared in the trace (one load for every repeat)."""
    slot = flow.slot(node, "input", arg)
    return flow.cache.load(slot.source.tensor if slot is not None and slot.tensor is tensor else tensor)


def _host(value: Any) -> list[torch.Tensor]:
    """The tensors of a module's return value, brought to the host once."""
    return [t.detach().cpu() for t in tensors_of(value)]


def _first_float(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    return next((t for t in tensors if t.is_floating_point()), None)


def _rms(x: torch.Tensor, y: torch.Tensor, valid: torch.Tensor | None) -> float:
    """RMS of ``y − x`` over finite, non-padding elements."""
    a, b = as_matrix(x, valid), as_matrix(y, valid)
    finite = torch.isfinite(a) & torch.isfinite(b)
    count = int(finite.sum())
    return float(torch.where(finite, b - a, 0.0).norm()) / math.sqrt(count) if count else 0.0


def _budget(replayer: Replayer, nodes: list[Node]) -> float:
    """The most parameters a replayed module may hold: the largest layer block's (no limit without blocks)."""
    sizes = [replayer.size(m) for node in nodes if node.is_layer_block
             and (m := replayer.module(replayer.port, node.module_path)) is not None]
    return max(sizes) if sizes else math.inf
