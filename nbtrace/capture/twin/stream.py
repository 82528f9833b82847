"""A twin that never holds a whole float64 copy of the model's weights: each module's made as it runs, then dropped.

``copy_in(model, float64, stream=True)`` (``copies.py``) builds the twin's copy with a *placeholder* for every float
parameter: a float64 tensor of the parameter's shape and device whose elements all share one zero (eight bytes,
whatever the shape), so the copy's code sees the dtype, shape and device it would see in a whole copy.
``Streamed`` knows where each placeholder's values live (the live parameter, or an offloaded one's values where its
hook reads them, ``offload.py``) and makes them: while a module's ``forward`` runs (``around``) its own parameters are
float64 tensors made from the live values for the run under way (``kind``: as they are; ``"float64"`` and
``"constants"`` each element moved by one float64 rounding, the noise of ``noise.scale_by_noise`` drawn from the
parameter's name, so a tied parameter moves alike wherever it is used; a rounded run, ``forward.ROUNDED``, rounded
into that dtype first), and when it returns they are dropped. A parameter an operation reads outside its module's
forward (a parent's ``F.linear(x, self.embed.weight)``) is made for that operation by the twin's ``Widen`` mode
(``resolve``). The peak is the float64 weights of the largest single module and the float64 activations of one
forward; buffers and tensor attributes (small: rotary tables, scalars) are converted whole, as before. Tensors made
for one module are reused for the next of the same shape (``Streamed.pool``, at most ``POOL_MODULES`` times the
largest module's weights): the allocator's heap then stays at a few modules' worth instead of growing layer by layer.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .noise import scale_by_noise
from .offload import offloaded_values

_SEQUENCES = frozenset({list, tuple})
#: the pool of made float64 weights holds at most this many times the largest module's
POOL_MODULES = 4
#: attribute set on a placeholder parameter (``is_streamed``)
MARK = "_nbtrace_streamed"


def placeholder(value: torch.Tensor, device: torch.device | str | None) -> nn.Parameter:
    """A float64 stand-in of ``value``'s shape on ``device`` (its own where None) that holds one element."""
    zero = torch.zeros((), dtype=torch.float64, device=device if device is not None else value.device)
    made = nn.Parameter(zero.expand(value.shape), requires_grad=False)
    setattr(made, MARK, True)
    return made


def is_streamed(tensor: Any) -> bool:
    """True for a placeholder of a streamed twin (no values of its own: never perturbed or written in place)."""
    return type(tensor) is nn.Parameter and getattr(tensor, MARK, False)


@dataclass
class _Source:
    key: str  # the name in its module's ``_parameters``
    name: str  # the parameter's name in the model (the first, for a tied one): its noise is drawn from it
    value: torch.Tensor  # the live values (an offloaded one's where its hook reads them)
    device: torch.device | str | None  # where its module runs (an offloaded one's), else None: the value's own
    weight: bool  # in the ``state_dict``: a rounded run rounds it

    def __post_init__(self) -> None:
        self.start = zlib.crc32(self.name.encode())  # where its noise starts (``noise.scale_by_noise``)


class Streamed:
    """The float64 parameters of a streamed copy (see the module docstring), made per module and per run."""

    def __init__(self, live: nn.Module, wide: nn.Module) -> None:
        from .forward import ROUNDED

        self.rounded = ROUNDED
        offloaded = offloaded_values(live)
        state = {id(t) for t in live.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor)}
        first: dict[int, str] = {}
        self.owned: dict[int, tuple[nn.Module, list[_Source]]] = {}
        self.by_placeholder: dict[int, _Source] = {}
        for (prefix, sub), (_, twin) in zip(live.named_modules(remove_duplicate=False),
                                           wide.named_modules(remove_duplicate=False)):
            sources = []
            for key, param in sub._parameters.items():
                held = twin._parameters.get(key)
                if param is None or not is_streamed(held):
                    continue
                name = first.setdefault(id(param), f"{prefix}.{key}" if prefix else key)
                value, device = offloaded.get(id(param), (param, None))
                source = _Source(key, name, value, device, id(param) in state)
                sources.append(source)
                self.by_placeholder[id(held)] = source
            if sources:
                self.owned[id(twin)] = (twin, sources)
        self.kind: str | None = None  # the run under way: None (the twin), a perturbation or a rounded run
        #: float64 tensors made before and free again, by shape and device: one module's made into what another's
        #: left (the same few shapes repeat in every layer), so the allocator's heap does not grow with each layer
        self.pool: dict[tuple[tuple[int, ...], torch.device], list[torch.Tensor]] = {}
        self.members: set[int] = set()
        self.kept = 0
        largest = max((sum(8 * s.value.numel() for s in sources) for _, sources in self.owned.values()), default=0)
        self.cap = POOL_MODULES * largest

    def make(self, source: _Source) -> torch.Tensor:
        """The float64 values of ``source``'s parameter for the run under way."""
        with torch._C.DisableTorchFunction():  # detached: nothing of this is recorded for autograd
            value = source.value.detach()
            if self.kind in self.rounded and source.weight:
                value = value.to(getattr(torch, self.kind))
            device = torch.device(source.device) if source.device is not None else value.device
            free = self.pool.get((tuple(value.shape), device))
            wide = free.pop() if free else torch.empty(value.shape, dtype=torch.float64, device=device)
            wide.copy_(value)  # widened exactly, and moved where the module runs
            if self.kind in ("float64", "constants"):
                scale_by_noise(wide, source.start)
        return wide

    def release(self, wide: torch.Tensor) -> None:
        """Give ``wide`` back to the pool, unless something still holds its storage (a module that returned a view
        of its weight: a position table's rows) or the pool holds ``POOL_MODULES`` modules' weights already."""
        size = 8 * wide.numel()
        if torch._C._storage_Use_Count(wide.untyped_storage()._cdata) > 2:  # 2: ``wide``, and this reading of it
            if id(wide) in self.members:
                self.members.discard(id(wide))
                self.kept -= size
            return
        if id(wide) not in self.members:
            if self.kept + size > self.cap:
                return
            self.members.add(id(wide))
            self.kept += size
        self.pool.setdefault((tuple(wide.shape), wide.device), []).append(wide)

    def around(self, module: nn.Module, inner: Callable[..., Any]) -> Callable[..., Any]:
        """``inner`` (the module's forward) run with the module's own parameters made, and dropped after."""
        owned = self.owned.get(id(module))
        if owned is None:
            return inner
        _, sources = owned

        def run(*args: Any, **kwargs: Any) -> Any:
            held = module._parameters
            before = {s.key: held[s.key] for s in sources}
            with torch._C.DisableTorchFunction():  # making the weights is not the twin's own work
                made = [self.make(source) for source in sources]
                for source, wide in zip(sources, made):
                    held[source.key] = nn.Parameter(wide, requires_grad=False)
            try:
                return inner(*args, **kwargs)
            finally:
                held.update(before)
                with torch._C.DisableTorchFunction():
                    for wide in made:
                        self.release(wide)

        return run

    def resolve(self, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """An operation's arguments with every placeholder (at the top, or in a list or tuple) made for it."""
        found = self.by_placeholder.keys()  # the checks run in C: this is every operation of the twin
        if not found.isdisjoint(map(id, args)) or not _SEQUENCES.isdisjoint(map(type, args)):
            args = tuple(self._made(a) for a in args)
        if kwargs and not found.isdisjoint(map(id, kwargs.values())):
            kwargs = {k: self._made(v) for k, v in kwargs.items()}
        return args, kwargs

    def _made(self, value: Any) -> Any:
        source = self.by_placeholder.get(id(value))
        if source is not None and is_streamed(value):
            return nn.Parameter(self.make(source), requires_grad=False)
        if type(value) in (list, tuple) and any(id(v) in self.by_placeholder for v in value):
            return type(value)(self._made(v) for v in value)
        return value


def streamed_cost(model: nn.Module) -> dict[torch.device, int]:
    """Bytes a streamed twin holds per device at most, activations aside: the float64 parameters of the largest single
    module, and every float buffer, tensor attribute and parameter that is not a plain tensor (a DTensor, counted
    whole) in float64 (converted whole)."""
    offloaded = offloaded_values(model)
    largest: dict[torch.device, int] = {}
    whole: dict[torch.device, int] = {}
    seen: set[int] = set()
    for sub in model.modules():
        own: dict[torch.device, int] = {}
        for param in sub._parameters.values():
            if param is None or not param.is_floating_point():
                continue
            value, device = offloaded.get(id(param), (param, None))
            where = torch.device(device) if device is not None else value.device
            if type(value) not in (torch.Tensor, nn.Parameter) and id(param) not in seen:  # a DTensor: copied whole
                seen.add(id(param))
                whole[where] = whole.get(where, 0) + 8 * param.numel()
                continue
            own[where] = own.get(where, 0) + 8 * param.numel()
        for where, size in own.items():
            largest[where] = max(largest.get(where, 0), size)
        held = [t for t in sub._buffers.values() if t is not None]
        held += [v for v in vars(sub).values() if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter)]
        for tensor in held:
            if tensor.is_floating_point() and id(tensor) not in seen:
                seen.add(id(tensor))
                whole[tensor.device] = whole.get(tensor.device, 0) + 8 * tensor.numel()
    return {d: largest.get(d, 0) + whole.get(d, 0) for d in set(largest) | set(whole)}
