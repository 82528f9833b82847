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
(``resolve``). The peak is the float64 weights of the modules running inside each other (the largest single
module, mostly) and the float64 activations of one forward; buffers and tensor attributes (small: rotary tables,
scalars) are converted whole, as before. A module's weights are carved from one float64 buffer per device
(``_Arena``), made once per twin and given back last-made-first as modules return, so making and dropping weights
allocates nothing; a module whose weight outlives its forward (it returned a view of it) leaves that buffer to what
holds it, and its weights are made on their own from then on. On the host, the heap's free pages are given back
whenever the resident memory grew by a 32nd of the model's weights (16 MiB at least: a trim walks the heap, and
trims every few MiB cost a small model's twin a twentieth of its time), and when the forward's runs are over
(``host_memory.HeapTrim``, ``Streamed.release``).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from .host_memory import HeapTrim
from .noise import _NOISE_LENGTH as NOISE_LENGTH, noise, scale_by_noise
from .offload import offloaded_values

_SEQUENCES = frozenset({list, tuple})
#: float64 elements each arena tensor is aligned to: 512 bytes, as torch's CUDA allocator aligns a tensor of its own
#: (64 on the host): a kernel that chooses its path by alignment chooses it as for a weight made on its own
_ALIGN = 64
#: the host heap is trimmed whenever the resident memory grew by this share of the model's weights on the host,
#: or by ``TRIM_LEAST`` bytes where that is more
TRIM_SHARE, TRIM_LEAST = 32, 16 * 2**20
#: a ``Linear``'s or an ``Embedding``'s weight of more elements than this is never made whole (a vocabulary's
#: embedding or output head, often a fifth of a model's weights and four times that in float64): the embedding makes
#: the rows its ids pick, the linear layer its output features in pieces of at most this many weights. By shape
#: alone, so that two sides of a comparison cut alike
PIECE = 2**22
#: bytes an arena on the host has at least: above glibc's largest dynamic mmap threshold (32 MiB on 64 bits)
_HOST_FLOOR = 32 * 2**20 + 2**16
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


class _Arena:
    """One float64 buffer on one device that modules' weights are carved from, the last made given back first
    (modules' forwards nest). Made once per twin and kept while it runs, so making and dropping each module's weights
    allocates nothing: the host allocator's heap does not fill with freed layers' weights (glibc raises its mmap
    threshold after the first large free, and a heap keeps what is freed inside it). On the host it is made larger
    than glibc's largest dynamic mmap threshold (``_HOST_FLOOR``): always mapped on its own, given back to the system
    when freed, and its free changes no threshold; pages never written take no memory."""

    def __init__(self, device: torch.device, elements: int) -> None:
        if device.type == "cpu":
            elements = max(elements, _HOST_FLOOR // 8)
        self.buffer = torch.empty(elements, dtype=torch.float64, device=device)
        self.top = 0  # elements in use, from the start

    def take(self, shape: torch.Size) -> torch.Tensor | None:
        """A contiguous float64 tensor of ``shape`` from the free part (None: it does not fit)."""
        count = shape.numel()
        if self.top + count > self.buffer.numel():
            return None
        made = self.buffer[self.top:self.top + count].view(shape)
        self.top += -(-count // _ALIGN) * _ALIGN  # each tensor aligned as the allocator aligns its own
        return made

    def uses(self) -> int:
        """How many tensors share the buffer's storage now (itself included)."""
        return torch._C._storage_Use_Count(self.buffer.untyped_storage()._cdata)


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
        self.wide = wide
        self.kind: str | None = None  # the run under way: None (the twin), a perturbation or a rounded run
        #: elements per device the arenas hold: the most that modules nested in the module tree hold at once
        self.needed = _nested(wide, lambda m: {d: n // 8 for d, n in _own_bytes(self.owned, m).items()})
        self.arenas: dict[torch.device, _Arena] = {}
        host = sum(s.value.numel() * s.value.element_size() for _, sources in self.owned.values() for s in sources
                   if (torch.device(s.device) if s.device is not None else s.value.device).type == "cpu")
        #: what the host heap could not reuse, given back whenever it grew by a 32nd of the model's weights there
        self.trim = HeapTrim(max(host // TRIM_SHARE, TRIM_LEAST))
        #: modules whose weights outlived their forward once (a view of a weight returned): made on their own since
        self.escaped: set[int] = set()

    def make(self, source: _Source, arena: bool = False, rows: tuple[int, int] | None = None,
             index: torch.Tensor | None = None) -> torch.Tensor:
        """The float64 values of ``source``'s parameter for the run under way: from the device's arena where
        ``arena`` and it fits, else a tensor of its own; only its rows ``rows[0]:rows[1]``, or the rows ``index``
        picks (an embedding's lookup), where given, each moved as it is moved in the whole parameter."""
        with torch._C.DisableTorchFunction():  # detached: nothing of this is recorded for autograd
            value = source.value.detach()
            offset = 0
            if rows is not None:
                offset = rows[0] * value[0].numel() if value.shape[0] else 0
                value = value[rows[0]:rows[1]]
            elif index is not None:
                value = value[index.to(value.device)]
            if self.kind in self.rounded and source.weight:
                value = value.to(getattr(torch, self.kind))
            device = torch.device(source.device) if source.device is not None else value.device
            wide = self._arena(device).take(value.shape) if arena else None
            if wide is None:
                wide = torch.empty(value.shape, dtype=torch.float64, device=device)
            wide.copy_(value)  # widened exactly, and moved where the module runs
            if self.kind in ("float64", "constants") and index is not None:  # each element's place in the whole
                width = source.value[0].numel()
                places = index.to(device).unsqueeze(-1) * width + torch.arange(width, device=device)
                wide.mul_(_factors(device)[(places + source.start) % NOISE_LENGTH])
            elif self.kind in ("float64", "constants"):
                scale_by_noise(wide, source.start + offset)
        return wide

    def _arena(self, device: torch.device) -> _Arena:
        found = self.arenas.get(device)
        if found is None:
            found = self.arenas[device] = _Arena(device, self.needed.get(device, 0))
        return found

    def around(self, module: nn.Module, inner: Callable[..., Any]) -> Callable[..., Any]:
        """``inner`` (the module's forward) run with the module's own parameters made, and dropped after."""
        return self._around(module, inner)

    def _around(self, module: nn.Module, inner: Callable[..., Any]) -> Callable[..., Any]:
        owned = self.owned.get(id(module))
        if owned is None:
            return inner
        _, sources = owned
        kind = _piecewise(module, _weight(sources), getattr(inner, "__func__", None))
        if kind is not None:
            return self._pieces(module, sources, kind)

        def run(*args: Any, **kwargs: Any) -> Any:
            held = module._parameters
            before = {s.key: held[s.key] for s in sources}
            with torch._C.DisableTorchFunction():  # making the weights is not the twin's own work
                devices = {torch.device(s.device) if s.device is not None else s.value.device for s in sources}
                marks = {} if id(module) in self.escaped else {d: self._arena(d) for d in devices}
                host = any(d.type == "cpu" for d in devices)
                marks = {d: (a, a.top, a.uses()) for d, a in marks.items()}
                held.update({s.key: nn.Parameter(self.make(s, arena=bool(marks)), requires_grad=False)
                             for s in sources})  # no name here holds them: only the module, until it returns
            try:
                return inner(*args, **kwargs)
            finally:
                held.update(before)
                self._give_back(module, marks)
                if host:
                    self.trim()

        return run

    def release(self) -> None:
        """Drop the arenas and give the host heap's free pages back, once the forward's runs are over: the trace's own
        work after them starts from what the twin keeps (the copy and this object hold each other and would wait for
        the garbage collector, paused in the twin). Not between runs: the next run carves the same weights from the
        same arenas and reuses what the last one freed in the heap (a trim there cost each run a few ms)."""
        self.arenas.clear()
        self.trim(always=True)

    def _pieces(self, module: nn.Module, sources: list[_Source], kind: str) -> Callable[..., Any]:
        """The forward of an ``Embedding`` or a ``Linear`` whose weight is larger than ``PIECE`` elements, computed
        without its whole float64 weight: the rows the ids pick, or the output features a piece at a time."""
        weight = next(s for s in sources if s.key == "weight")
        bias = next((s for s in sources if s.key == "bias"), None)
        device = torch.device(weight.device) if weight.device is not None else weight.value.device

        def run(*args: Any, **kwargs: Any) -> Any:
            given = args[0] if args else kwargs["input"]
            if kind == "embedding":
                return self.make(weight, index=given)
            out = None
            rows = weight.value.shape[0]
            step = _piece_rows(weight.value)
            for start in range(0, rows, step):
                with torch._C.DisableTorchFunction():
                    arena = self._arena(device)
                    mark = arena, arena.top, arena.uses()
                    part = self.make(weight, arena=True, rows=(start, min(rows, start + step)))
                    added = None if bias is None else self.make(bias, rows=(start, min(rows, start + step)))
                part = F.linear(given, part, added)  # the twin's own operation, as ``Linear.forward`` makes it
                with torch._C.DisableTorchFunction():
                    if out is None:
                        out = part.new_empty((*part.shape[:-1], rows))
                    out[..., start:start + part.shape[-1]] = part
                    del part, added
                    self._give_back(module, {device: mark})
            if device.type == "cpu":
                self.trim()
            return out

        return run

    def _give_back(self, module: nn.Module, marks: dict[torch.device, tuple[_Arena, int, int]]) -> None:
        """Free the arenas' parts a module's forward took. Where something still holds one of its weights (a module
        that returned a view of its weight: a position table's rows), that arena is left to it and a new one made
        when next needed, and the module's weights are made on their own from then on."""
        for device, (arena, top, uses) in marks.items():
            if arena.uses() > uses:
                self.escaped.add(id(module))
                if self.arenas.get(device) is arena:
                    del self.arenas[device]
            elif self.arenas.get(device) is arena:
                arena.top = top

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
            return nn.Parameter(self.make(source), requires_grad=False)  # its own: the result may be a view of it
        if type(value) in (list, tuple) and any(id(v) in self.by_placeholder for v in value):
            return type(value)(self._made(v) for v in value)
        return value


def _own_bytes(owned: dict[int, tuple[nn.Module, list[_Source]]], module: nn.Module) -> dict[torch.device, int]:
    """Bytes per device of ``module``'s own float64 parameters, as made in its arena (``owned``: ``Streamed.owned``;
    a large embedding's none, a large linear layer's one piece)."""
    found: dict[torch.device, int] = {}
    sources = owned.get(id(module), (None, []))[1]
    kind = _piecewise(module, _weight(sources), type(module).forward)
    for source in sources:
        where = torch.device(source.device) if source.device is not None else source.value.device
        count = source.value.numel() if kind is None else 0 if kind == "embedding" or source.key != "weight" else \
            min(source.value.shape[0], _piece_rows(source.value)) * source.value.shape[1]
        found[where] = found.get(where, 0) + 8 * (-(-count // _ALIGN) * _ALIGN)
    return found


def _piecewise(module: nn.Module, weight: torch.Tensor | None, forward: Any) -> str | None:
    """"embedding" or "linear" where ``module`` runs ``Embedding``'s or ``Linear``'s own ``forward`` on a ``weight``
    (its values) of more than ``PIECE`` elements (its float64 weight is then made in pieces, ``Streamed._pieces``),
    else None."""
    if weight is None or weight.dim() != 2 or weight.numel() <= PIECE:
        return None
    if forward is nn.Embedding.forward and getattr(module, "max_norm", 0) is None:
        return "embedding"
    return "linear" if forward is nn.Linear.forward else None


def _piece_rows(weight: torch.Tensor) -> int:
    """Rows of a large ``Linear``'s weight made at a time (``PIECE``)."""
    return max(1, PIECE // max(1, weight.shape[1]))


def _weight(sources: list[_Source]) -> torch.Tensor | None:
    return next((s.value for s in sources if s.key == "weight"), None)


def _factors(device: torch.device) -> torch.Tensor:
    """The factors ``noise.scale_by_noise`` multiplies by, one per place of the sequence, on ``device``."""
    found = _FACTORS.get(device)
    if found is None:
        found = _FACTORS[device] = 1 + 2.0**-53 * noise(NOISE_LENGTH, 0, device)
    return found


_FACTORS: dict[torch.device, torch.Tensor] = {}


def _nested(module: nn.Module, own: Callable[[nn.Module], dict[torch.device, int]],
            path: frozenset[int] = frozenset()) -> dict[torch.device, int]:
    """The most ``own`` adds up to per device along a chain of modules nested in ``module``'s tree (what modules
    whose forwards run inside each other's hold at once)."""
    total = dict(own(module))
    deepest: dict[torch.device, int] = {}
    for child in module._modules.values():
        if child is None or id(child) in path:
            continue
        for device, size in _nested(child, own, path | {id(module)}).items():
            deepest[device] = max(deepest.get(device, 0), size)
    for device, size in deepest.items():
        total[device] = total.get(device, 0) + size
    return total


def local_numel(tensor: torch.Tensor) -> int:
    """Elements this rank holds of ``tensor``: a DTensor's local piece (its float64 copy is a DTensor of pieces as
    large), a plain tensor's all."""
    local = getattr(tensor, "to_local", None)
    return local().numel() if callable(local) else tensor.numel()


def streamed_cost(model: nn.Module) -> dict[torch.device, int]:
    """Bytes a streamed twin holds per device at most, activations aside: the float64 parameters of the modules
    nested in each other that hold the most (the largest single module, mostly), and every float buffer, tensor
    attribute and parameter that is not a plain tensor (a DTensor, by the piece this rank holds) in float64
    (converted whole)."""
    offloaded = offloaded_values(model)
    owns: dict[int, dict[torch.device, int]] = {}
    whole: dict[torch.device, int] = {}
    seen: set[int] = set()
    for sub in model.modules():
        own = owns.setdefault(id(sub), {})
        for param in sub._parameters.values():
            if param is None or not param.is_floating_point():
                continue
            value, device = offloaded.get(id(param), (param, None))
            where = torch.device(device) if device is not None else value.device
            if type(value) not in (torch.Tensor, nn.Parameter) and id(param) not in seen:  # a DTensor: copied whole
                seen.add(id(param))
                whole[where] = whole.get(where, 0) + 8 * local_numel(param)
                continue
            own[where] = own.get(where, 0) + 8 * param.numel()
        kind = _piecewise(sub, offloaded.get(id(sub._parameters.get("weight")), (sub._parameters.get("weight"),))[0],
                          type(sub).forward)
        if kind is not None:  # made in pieces: the rows an embedding picks (activations), a linear layer's piece
            weight = sub._parameters["weight"]
            own = {w: 8 * min(weight.shape[0], _piece_rows(weight)) * weight.shape[1] if kind == "linear" else 0
                   for w in own}
        held = [t for t in sub._buffers.values() if t is not None]
        held += [v for v in vars(sub).values() if isinstance(v, torch.Tensor) and not isinstance(v, nn.Parameter)]
        for tensor in held:
            if tensor.is_floating_point() and id(tensor) not in seen:
                seen.add(id(tensor))
                whole[tensor.device] = whole.get(tensor.device, 0) + 8 * tensor.numel()
    largest = _nested(model, lambda m: owns.get(id(m), {}))
    return {d: largest.get(d, 0) + whole.get(d, 0) for d in set(largest) | set(whole)}
