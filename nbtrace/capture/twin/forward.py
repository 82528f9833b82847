"""The float64 twin of a whole forward, fingerprinted at every call, and how much it moves when perturbed.

``twin_runs(model, inputs, ...)`` copies the model to float64 (``copies.py``) and runs it on the
top-level inputs copied to float64 (``values.upcast``; a generation's float64 KV cache carries on from the previous
step through its ``known``) in ``float64_twin()`` numerics (``numerics.py``: exact, and float64 through the module's own casts).
Every submodule's ``forward`` of the copy is wrapped by a collector named like the recorder's calls (``<path>``,
``<path>@2``, ...), which fingerprints the call's float inputs (``args.0``, ``kwargs.hidden_states``, as the trace
names them) and outputs (``out``, ``out.0``, ``out.logits``) with ``fingerprint.py``, each tensor once.

The perturbed run (``"float64"``) moves the copy's stored float tensors by one rounding, all at once: every
parameter, buffer and tensor attribute by one float64 rounding (how far float64 rounding can carry the twin:
its own precision, measured), and the float tensors the model holds outside its ``state_dict`` then by one
rounding of their own dtype, of each value's size plus the table's RMS (rotary frequencies, sinusoid tables an
implementation computes for itself: computed in their dtype, they err near their zeros too). The difference of
the fingerprints of the perturbed run and of the twin measures each call's sensitivity to both: one run, where
there were two (a ``"constants"`` kind, moving only the constants, is still accepted). The rounded run
(``ROUNDED``, ``"bfloat16"``) is not a perturbation but a second function: the twin with its weights (the
``state_dict``'s float tensors) and every float top-level input rounded to bfloat16 (from the live model's own
values), as a port that stores the model in bfloat16 holds them. A bfloat16 port's twin is compared with it float64 against float64, so the weights'
rounding is the port's, accounted exactly, never an allowance that hides a semantic difference.

The caller keeps a generation's twin cache going with ``values.remember(known, output, twin output)``.
A run returns ``TwinRun``: per call, place -> (shape, dtype of the run, numbers on the device), and, from the
first operation that stayed narrower than float64 (``widen.py``), ``low``: that call and every later one is not
a float64 twin. Nothing of the user's model, inputs, flags or random state changes.
"""

from __future__ import annotations

import functools
import json
import weakref
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...core.collector import collector_paused
from .copies import copy_in, non_state_constants, unrounded_buffers
from .offload import offloaded_values
from .state import CarriedState
from .noise import noise as _noise, scale_by_noise as _scale_by_noise
from .stream import Streamed, is_streamed
from .fingerprint import fingerprint
from .numerics import float64_twin
from .padding import padding_candidates
from .ranks import RankTwin

PERTURBATIONS = ("float64", "constants")  # the twin's perturbed run is "float64" (it moves the constants too)
#: the narrower dtypes a port commonly stores a model in: the twin runs once more with the model rounded into each
ROUNDED = ("bfloat16",)
_UNIT = {torch.float64: 2.0**-53, torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


@dataclass
class TwinRun:
    """The fingerprints of one twin forward: call name -> place -> (shape, numbers)."""

    calls: dict[str, dict[str, tuple[tuple[int, ...], torch.Tensor]]] = field(default_factory=dict)
    #: call name -> the first operation that stayed narrower than float64 before the call ended
    low: dict[str, str] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # call names in the order they ended
    #: every call's start ("(" + name) and end (")" + name), in the order they happened
    events: list[str] = field(default_factory=list)


@dataclass
class Padding:
    """A forward's padding mask (``padding.py``): ``valid`` (True: a real token; None: no mask) and where it was
    found: ``places[0]`` where declared or named; where found by its values, the index of the candidate in
    ``places`` that holds it, ``chosen`` (on the device, -1 for none: ``valid`` then leaves nothing out)."""

    valid: torch.Tensor | None = None
    places: list[str] = field(default_factory=list)
    chosen: torch.Tensor | None = None


def find_valid(args: tuple, kwargs: dict[str, Any], declared: str | bool | None = None) -> Padding:
    """The padding mask of a model's top-level inputs by ``padding.py``'s rule, with no read of their values (on a GPU
    that would wait for the device): candidates found by their values are tested on the device, and the first that
    holds a mask chosen there. ``declared`` names an input that is not a ``(batch, seq)`` integer tensor: ValueError."""
    found = {f"args.{i}": v for i, v in enumerate(args) if isinstance(v, torch.Tensor)}
    found.update((f"kwargs.{k}", v) for k, v in kwargs.items() if isinstance(v, torch.Tensor))
    inputs = [(place, tuple(t.shape), not t.is_floating_point() and not t.is_complex()) for place, t in found.items()]
    places, named = padding_candidates(inputs, declared)
    if isinstance(declared, str):
        mask = found.get(places[0]) if places else None
        if mask is None or mask.ndim != 2 or mask.is_floating_point() or mask.is_complex():
            raise ValueError(f"padding_mask={declared!r} names no (batch, seq) integer or bool tensor among the "
                             f"forward's inputs ({', '.join(found) or 'none'})")
    if not places:
        return Padding()
    if named:
        return Padding(found[places[0]] != 0, places[:1])
    first = found[places[0]]
    places = [place for place in places if found[place].shape == first.shape and found[place].device == first.device]
    valid = torch.ones(first.shape, dtype=torch.bool, device=first.device)
    chosen = torch.tensor(-1, device=first.device)
    for index in reversed(range(len(places))):  # the first candidate that holds a mask wins
        candidate = found[places[index]]
        binary = ((candidate == 0) | (candidate == 1)).all()
        holds = binary & (candidate != 0).any(dim=1).all()  # ``padding.holds_mask``, on the device
        valid = torch.where(holds, candidate != 0, valid)
        chosen = torch.where(holds, index, chosen)
    return Padding(valid, places, chosen)


def constants_digest(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Per float constant ``model`` holds outside its ``state_dict``, as its twin holds it (a buffer rounded by
    ``model.to(torch.bfloat16)`` that the twin sees through, ``copies.unrounded_buffers``, as its wider value): its
    dtype and shape, and two wrapping sums of its bits (plain and weighted by position) as a 2-element int64 tensor
    on its device; two sides whose digests (``digest_text``) are equal computed the same constants bit for bit."""
    found = []
    seen_through = unrounded_buffers(model)
    for _, tensor in non_state_constants(model):
        tensor = seen_through.get(id(tensor), tensor)
        bits = tensor.detach().contiguous().reshape(-1).view(_INT_VIEW[tensor.element_size()]).to(torch.int64)
        weights = torch.arange(bits.numel(), device=bits.device) % 65521 + 1
        found.append((f"{str(tensor.dtype).replace('torch.', '')}:{list(tensor.shape)}",
                      torch.stack([bits.sum(), (bits * weights).sum()])))
    return found


def digest_text(head: str, sums: list[int]) -> str:
    """One constant's digest as the sidecar writes it."""
    return f"{head}:" + "".join(f"{v & 0xFFFFFFFFFFFFFFFF:016x}" for v in sums)


_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def twin_runs(model: nn.Module, inputs: dict[str | None, tuple[tuple, dict[str, Any]]], class_name: str,
              valid: torch.Tensor | None = None, observe: Callable[[str, Any], None] | None = None,
              run: Callable[..., Any] | None = None, carried: CarriedState | None = None,
              ranks: RankTwin | None = None, stream: bool = False,
              keep: Callable[[str | None, Any], None] | None = None) -> dict[str | None, tuple[TwinRun, Any]]:
    """Run ``model``'s float64 twin once per entry of ``inputs`` (kind -> its inputs already in float64,
    ``values.upcast``): ``None`` the twin, then the perturbed run (``"float64"``: the weights and the constants moved
    at once) and the rounded runs (``ROUNDED``) on the same copy, changed in place one after the other. Returns kind
    -> ``(TwinRun, its output)``. ``observe(call name, output)`` sees each call's float64 output in the twin;
    ``run(model, *args, **kwargs)`` calls the copy when given; ``carried`` starts each run from the state the model's
    attributes held when the forward began, in float64 (``state.py``); ``ranks``: this rank's part where several ranks
    run their twins together (``ranks.py``), every run finished on all of them; ``stream``: no whole float64 copy,
    each module's float64 weights made as it runs (``stream.py``); ``keep(kind, output)``: handed each run's output
    as the run ends, which is then not kept (the result holds None): a run's float64 logits and KV cache are not held
    while the next run makes its own."""
    with collector_paused():  # its passes over the whole trace's objects cost more than a run on a large model
        try:
            return _twin_runs(model, inputs, class_name, valid, observe, run, carried, ranks, stream, keep)
        finally:
            if carried is not None:
                carried.after = None  # the model's state after this forward (``state.py``): the next reads its own


def _twin_runs(model: nn.Module, inputs: dict[str | None, tuple[tuple, dict[str, Any]]], class_name: str,
               valid: torch.Tensor | None, observe: Callable[[str, Any], None] | None, run: Callable[..., Any] | None,
               carried: CarriedState | None, ranks: RankTwin | None, stream: bool,
               keep: Callable[[str | None, Any], None] | None = None) -> dict[str | None, tuple[TwinRun, Any]]:
    seen_through = unrounded_buffers(model)  # once per forward, for the copy and the constants' perturbation
    wide = copy_in(model, torch.float64, seen_through, stream=stream)
    streamed = Streamed(model, wide) if stream else None
    state = _State(valid, ranks)
    counts: dict[str, int] = {}
    for name, module in wide.named_modules():
        if not name or hasattr(type(getattr(type(module), "forward", None)), "__set__"):
            continue  # the root is run directly; a forward property cannot be wrapped (its calls stay unseen)
        inner = streamed.around(module, module.forward) if streamed is not None else module.forward
        module.__dict__["forward"] = _collector(f"{class_name}.{name}", inner, counts, state)
    call = (run or _call) if streamed is None else streamed.around(wide, functools.partial(run or _call, wide))
    results: dict[str | None, tuple[TwinRun, Any]] = {}
    try:
        for kind, (args, kwargs) in inputs.items():
            if carried is not None:
                carried.restore(model, wide, kind)
            if kind is not None:  # the constants move with the weights unless a run of their own follows
                _perturb(model, wide, kind, seen_through, with_constants="constants" not in inputs)
            counts.clear()
            state.begin(observe if kind is None else None)
            state.layout = kind is None or kind in ROUNDED  # a perturbed run's fingerprints meet only the twin's
            with float64_twin() as mode:
                state.mode = mode
                if streamed is not None:
                    streamed.kind, mode.resolve = kind, streamed.resolve
                state.result.events.append("(" + class_name)
                with torch._C.DisableTorchFunction():
                    root = _prints_of_inputs(args, kwargs, state)
                out = call(wide, *args, **kwargs) if streamed is None else call(*args, **kwargs)
                with torch._C.DisableTorchFunction():
                    root.update(_prints_of_output(out, state))
                    _note(state, class_name, root)
                    if state.observe is not None:
                        state.observe(class_name, out)
            if ranks is not None:
                ranks.finish(state.result, kind)
            if keep is not None:
                keep(kind, out)
                out = None
            results[kind] = state.result, out
            if carried is not None:
                carried.keep(model, wide, kind)
    finally:
        if streamed is not None:
            streamed.release()  # its arenas: the runs are over
    return results


def _call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    return module(*args, **kwargs)


class _State:
    """What the collectors of one copy share: the run being recorded, the tensors fingerprinted in it."""

    def __init__(self, valid: torch.Tensor | None, ranks: RankTwin | None = None) -> None:
        self.valid = valid
        self.fingerprint = ranks.fingerprint if ranks is not None else fingerprint
        self.result = TwinRun()
        self.seen: dict[int, tuple[Any, Any, int | None]] = {}
        self.observe: Callable[[str, Any], None] | None = None
        self.mode: Any = None
        self.layout = True  # the layout sums too (``fingerprint.py``)

    def begin(self, observe: Callable[[str, Any], None] | None) -> None:
        self.result, self.seen, self.observe = TwinRun(), {}, observe


def _collector(path: str, inner: Callable, counts: dict[str, int], state: _State) -> Callable:
    def collect(*args: Any, **kwargs: Any) -> Any:
        count = counts[path] = counts.get(path, 0) + 1
        key = path if count == 1 else f"{path}@{count}"
        state.result.events.append("(" + key)
        with torch._C.DisableTorchFunction():  # the collector's own operations are not the twin's (nor its cost)
            prints = _prints_of_inputs(args, kwargs, state)
        out = inner(*args, **kwargs)
        with torch._C.DisableTorchFunction():  # the observer's own operations are not the twin's either
            prints.update(_prints_of_output(out, state))
            _note(state, key, prints)
            if state.observe is not None:
                state.observe(key, out)
        return out

    return collect


def _note(state: _State, key: str, prints: dict[str, Any]) -> None:
    result = state.result
    result.calls[key] = prints
    result.order.append(key)
    result.events.append(")" + key)
    if state.mode is not None and state.mode.low:
        name, dtype = state.mode.low[0]
        result.low[key] = f"{name} returned {dtype}"


def _prints_of_inputs(args: tuple, kwargs: dict[str, Any], state: _State) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for i, value in enumerate(args):
        _walk(value, f"args.{i}", found, state, 0)
    for key, value in kwargs.items():
        _walk(value, f"kwargs.{key}", found, state, 0)
    return found


def _prints_of_output(out: Any, state: _State) -> dict[str, Any]:
    found: dict[str, Any] = {}
    _walk(out, "out", found, state, 0)
    return found


def _walk(value: Any, place: str, found: dict[str, Any], state: _State, depth: int) -> None:
    if depth > 16:
        return
    if isinstance(value, torch.Tensor):
        entry = state.seen.get(id(value))  # most are: a call's inputs are earlier calls' outputs
        if entry is not None and entry[0]() is value:
            try:
                version = value._version  # an in-place operation (ReLU(inplace=True)) changes a tensor it handed on
            except RuntimeError:  # an inference-mode tensor keeps none: fingerprinted again
                version = None
            if version is not None and entry[2] == version:
                found[place] = (tuple(value.shape), entry[1])
                return
        if (value.is_floating_point() or value.is_complex()) and value.numel() > 0 and _plain_data(value):
            entry = (weakref.ref(value), state.fingerprint(value, state.valid, state.layout), _version(value))
            state.seen[id(value)] = entry
            found[place] = (tuple(value.shape), entry[1])
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _walk(item, f"{place}.{i}", found, state, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{place}.{_key(key)}", found, state, depth + 1)


def _version(tensor: torch.Tensor) -> int | None:
    """The tensor's count of in-place changes, or None where it keeps none (a tensor made in inference mode)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


def _plain_data(tensor: torch.Tensor) -> bool:
    """A dense tensor with data of its own (not on the meta device, not sparse): one that can be fingerprinted."""
    return not tensor.is_meta and tensor.layout == torch.strided


def _key(key: Any) -> str:
    return json.dumps(key) if isinstance(key, (bool, float)) or key is None else str(key)


def _perturb(live: nn.Module, wide: nn.Module, kind: str, seen_through: dict[int, torch.Tensor],
             with_constants: bool = True) -> None:
    """Move the copy's stored float tensors by one rounding (``kind``: see the module docstring), in place: each
    element times ``1 + u·r``, ``r`` in [-1, 1) from a fixed pseudo-random sequence started at a place drawn from
    the tensor's name, so it is the same on every run. ``seen_through``: the live model's constants the copy holds
    at their wider values (``copies.unrounded_buffers``), moved by their wider dtype's rounding. ``with_constants``:
    the ``"float64"`` kind moves the constants too (False: a ``"constants"`` run of their own follows)."""
    if kind in ROUNDED:
        _round(live, wide, getattr(torch, kind))
        return
    if kind not in PERTURBATIONS:
        raise ValueError(f"perturb must be one of {PERTURBATIONS + ROUNDED}, got {kind!r}")
    units = {n: seen_through.get(id(t), t).dtype for n, t in non_state_constants(live)}  # seen through: wider
    constants = [(n, t, units[n]) for n, t in non_state_constants(wide)
                 if n in units and (with_constants or kind != "float64")]
    with torch.no_grad(), torch._C.DisableTorchFunction():
        if kind == "float64":  # every stored tensor by one float64 rounding, then the constants by their own
            for name, tensor in _stored(wide):
                _scale_by_noise(tensor, zlib.crc32(name.encode()))
        for name, tensor, dtype in constants:  # a table computed in its dtype errs by its values' scale, near its
            unit = _UNIT.get(dtype, 2.0**-53)  # zeros too (sin, cos); a zero is exact (a mask's, sin(0))
            noise = _noise(tensor.numel(), zlib.crc32(name.encode()), tensor.device).view(tensor.shape)
            tensor.add_(unit * noise * (tensor.abs() + tensor.square().mean().sqrt() * (tensor != 0)))


def _round(live: nn.Module, wide: nn.Module, dtype: torch.dtype) -> None:
    """Set the copy's weights (its ``state_dict``'s float tensors) to the live model's values rounded to ``dtype``,
    from the live values, not the perturbed copy's (a value on a rounding tie must round as the port's conversion
    rounds it), and its other float tensors (constants outside the ``state_dict``) back to the live values as they
    are: a port may compute those for itself or hold them rounded, and its twin's digests say which
    (``constants_digest``)."""
    offloaded = offloaded_values(live)  # an offloaded model's weights: where its hooks read them
    state = {id(t) for t in live.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor)}
    source = {name: (offloaded.get(id(t), (t, None))[0], id(t) in state) for name, t in _stored(live)}
    with torch.no_grad(), torch._C.DisableTorchFunction():
        for name, tensor in _stored(wide):
            value, weight = source.get(name, (None, False))
            if value is None or value.shape != tensor.shape or value.is_meta or value.layout != torch.strided:
                continue
            tensor.copy_(value.detach().to(dtype) if weight else value.detach())  # copy_ widens and moves it


def rounded_inputs(value: Any, dtype: torch.dtype, depth: int = 0) -> Any:
    """A forward's arguments with every float tensor (in plain lists, tuples and dicts) rounded to ``dtype``."""
    if isinstance(value, torch.Tensor):
        return value.detach().to(dtype) if value.is_floating_point() and value.dtype != dtype else value
    if depth > 8:
        return value
    if type(value) in (list, tuple):
        return type(value)(rounded_inputs(v, dtype, depth + 1) for v in value)
    if type(value) is dict:
        return {k: rounded_inputs(v, dtype, depth + 1) for k, v in value.items()}
    return value


def _stored(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Every float tensor ``module`` holds: parameters, buffers and tensor attributes, each once, by name (a DTensor
    as its local piece, which the perturbed and rounded runs change in place)."""
    found, seen = [], set()
    for prefix, sub in module.named_modules():
        for key, tensor in _held(sub):
            if tensor.is_floating_point() and id(tensor) not in seen and not is_streamed(tensor):
                seen.add(id(tensor))
                local = tensor.to_local() if hasattr(tensor, "to_local") else tensor  # a DTensor: this rank's piece
                found.append((f"{prefix}.{key}" if prefix else key, local))
    return found


def _held(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The tensors ``module`` holds itself: parameters, buffers and tensor attributes."""
    held = [*module._parameters.items(), *module._buffers.items()]
    held += [(k, v) for k, v in vars(module).items() if isinstance(v, torch.Tensor)]
    return [(k, t) for k, t in held if isinstance(t, torch.Tensor)]
