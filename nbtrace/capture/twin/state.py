"""What a model carries from one forward to the next in its own attributes, carried in float64 by the twin too.

A port often keeps its KV cache itself (``self.past = key, value``, or a ``cache_k`` tensor written in place,
as Meta's Llama does) where transformers passes a cache object in and out (``values.remember`` carries those).
Copied afresh at every forward, the twin would start a decode step from the run's *rounded* cache while the
reference's twin starts from its own float64 one: a difference of the dtype's rounding that is no difference of
function. So the twin keeps what a forward changed:

- at a forward's start, every tensor attribute and buffer (a tensor, or a tuple or list of tensors) is noted by
  reference, with each tensor's version counter, and every plain number or None by value: nothing is copied;
- after each twin run, the attributes the *run* changed during its forward (reassigned, or written in place) are
  paired with the twin's own values at the same names (``keep``);
- at the next forward, an attribute still holding the object the last forward left, unchanged since, starts the
  twin from its float64 counterpart; one reassigned during the forward starts it from the value it had before, a
  number (a count of cached positions) from its value then (``restore``). Anything else, constants among them, is
  the copy's conversion of the run's value, as before.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .values import upcast

#: the longest tuple or list of tensors taken for a model's state (a (key, value) pair, a layer's few caches)
_MOST = 8


@dataclass
class Held:
    """One attribute or buffer of the run's model at a forward's start."""

    module: str
    name: str
    buffer: bool
    value: Any
    versions: tuple[int, ...]


@dataclass
class CarriedState:
    """A forward's start (``held``) and, per twin run, what the last forward left in float64 (``known``)."""

    known: dict[str | None, dict[int, tuple[Any, Any, tuple[int, ...]]]] = field(default_factory=dict)
    held: list[Held] = field(default_factory=list)
    #: the model's state once its forward has returned (``_state``), read at the first run's ``restore`` and kept
    #: for the others and their ``keep``: the twin runs change nothing of the model (a walk of every module each)
    after: tuple[nn.Module, list[tuple[str, str, bool, Any]]] | None = None

    def snapshot(self, model: nn.Module) -> None:
        """Note the model's state at a forward's start (references and version counters only)."""
        self.held = [Held(m, k, b, v, _versions(v)) for m, k, b, v in _state(model, empty=True)]
        self.after = None

    def _after(self, model: nn.Module) -> list[tuple[str, str, bool, Any]]:
        """``_state(model)`` since the forward returned (once per forward: see ``after``)."""
        if self.after is None or self.after[0] is not model:
            self.after = (model, _state(model))
        return self.after[1]

    def restore(self, model: nn.Module, wide: nn.Module, kind: str | None) -> None:
        """Give the copy ``wide`` the state the forward started from, in float64, before the run ``kind``."""
        known = self.known.get(kind, {})
        now = {(m, k): (b, v) for m, k, b, v in self._after(model)}
        wide = _Modules(wide)
        for held in self.held:
            entry = known.get(id(held.value))
            if entry is not None and entry[0] is held.value and entry[2] == held.versions:
                _set(wide, held.module, held.name, held.buffer, entry[1])  # the twin's own from the last forward
            elif type(held.value) in _SCALARS:
                if held.value is not None or now.get((held.module, held.name), (None, None))[1] is not None:
                    _set(wide, held.module, held.name, held.buffer, held.value)  # a count, or nothing cached yet
            elif now.get((held.module, held.name), (None, None))[1] is not held.value:
                _set(wide, held.module, held.name, held.buffer, upcast(held.value))  # reassigned by the forward
        started = {(h.module, h.name) for h in self.held}
        for (module, name), (buffer, _) in now.items():
            if (module, name) not in started:  # made by the forward itself: the twin's forward makes its own
                _set(wide, module, name, buffer, _ABSENT)

    def keep(self, model: nn.Module, wide: nn.Module, kind: str | None) -> None:
        """After the run ``kind``: pair what the forward changed with the twin's values at the same names."""
        started = {(h.module, h.name): h for h in self.held}
        wide = _Modules(wide)
        taken = {id(value) for other, entries in self.known.items() if other != kind
                 for _, value, _ in entries.values()}
        fresh: dict[int, tuple[Any, Any, tuple[int, ...]]] = {}
        for module, name, buffer, value in self._after(model):
            before = started.get((module, name))
            versions = _versions(value)
            if before is not None and before.value is value and before.versions == versions:
                continue  # not changed by the forward: a constant, converted afresh by the next copy
            twin = _get(wide, module, name, buffer)
            if twin is None or not _alike(value, twin):
                continue
            if id(twin) in taken:  # another run of this forward keeps the same object: each its own
                twin = _clone(twin)
            fresh[id(value)] = (value, twin, versions)
        self.known[kind] = fresh


def _state(model: nn.Module, empty: bool = False) -> list[tuple[str, str, bool, Any]]:
    """``(module, name, is a buffer, value)`` of every state a model holds; ``empty``: attributes holding None too
    (a cache not filled yet). A module's own dictionaries (its hooks, parameters) are passed over first: every
    module holds some twenty attributes, and this reads them all at each forward."""
    found = []
    for prefix, sub in model.named_modules():
        buffers = sub._buffers
        if buffers:
            for name, value in buffers.items():
                if isinstance(value, torch.Tensor):
                    found.append((prefix, name, True, value))
        for name, value in vars(sub).items():
            kind = type(value)
            if kind in _NEVER or name.startswith("_"):
                continue
            if kind in _SCALARS:
                if empty:
                    found.append((prefix, name, False, value))
            elif _is_state(value):
                found.append((prefix, name, False, value))
    return found


#: attribute types that are never a state (``_is_state``) nor a plain value: a module's hook dictionaries
_NEVER = frozenset({dict, OrderedDict, set})
#: plain values a forward may change too (a count of cached positions): restored to their value at the start
_SCALARS = (type(None), int, float, bool)


def _is_state(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return not isinstance(value, nn.Parameter)
    return (isinstance(value, (tuple, list)) and 0 < len(value) <= _MOST
            and all(isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter) for v in value))


def _versions(value: Any) -> tuple[int, ...]:
    if type(value) in _SCALARS:
        return ()
    tensors = [value] if isinstance(value, torch.Tensor) else list(value)
    return tuple(t._version for t in tensors)


def _alike(value: Any, twin: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return isinstance(twin, torch.Tensor) and twin.shape == value.shape
    return (type(twin) is type(value) and len(twin) == len(value)
            and all(isinstance(t, torch.Tensor) and t.shape == v.shape for t, v in zip(twin, value)))


def _clone(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.clone()
    return type(value)(t.clone() for t in value)


class _Modules:
    """The copy's submodules by name, listed once (``get_submodule`` walks the path at every call: restoring the
    demo model's 6,000 attributes per run that way cost more than its float64 forward)."""

    def __init__(self, wide: nn.Module) -> None:
        self.wide = wide
        self.found: dict[str, nn.Module | None] = dict(wide.named_modules())

    def get_submodule(self, name: str) -> nn.Module:
        if name not in self.found:  # a module shared under a second name
            try:
                self.found[name] = self.wide.get_submodule(name)
            except AttributeError:
                self.found[name] = None
        sub = self.found[name]
        if sub is None:
            raise AttributeError(name)
        return sub


def _get(wide: nn.Module | _Modules, module: str, name: str, buffer: bool) -> Any:
    try:
        sub = wide.get_submodule(module)
    except AttributeError:
        return None
    return sub._buffers.get(name) if buffer else vars(sub).get(name)


_ABSENT = object()


def _set(wide: nn.Module | _Modules, module: str, name: str, buffer: bool, value: Any) -> None:
    """Set (or, given ``_ABSENT``, remove) a state of the copy."""
    try:
        sub = wide.get_submodule(module)
    except AttributeError:
        return
    place = sub._buffers if buffer else sub.__dict__
    if value is _ABSENT:
        place.pop(name, None)
    else:
        place[name] = value
