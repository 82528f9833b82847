"""torch's printed form of a tensor, produced without torch's (slow) printer.

The trace format stores ``str(tensor)`` and ``repr(tensor.mean())`` etc. as torch
prints them in scientific mode. torch's printer runs several tensor ops per
element; here the work is split in two halves (``torch/_tensor_str.py`` is the
reference for both):

- on the tensor's device, ``gather`` copies the few elements torch would show
  and ``stat_pieces`` computes mean, std, min and max with the very ops users
  call; nothing is read yet;
- on the host, once those values arrived (``transfer.py`` moves them, many
  tensors at once), ``format_text`` and ``format_stats`` write the characters
  torch writes (``print_text.py``: that half needs no torch, and is imported
  from here too).

It covers plain, strided, real tensors that need no autograd suffix
(``fast_printable``); the caller falls back to torch's printer for anything
else. The tests compare both on many random tensors and print options.
"""

from __future__ import annotations

import math

import torch
from torch._tensor_str import PRINT_OPTS

from . import transfer
from .print_text import (  # noqa: F401 - the host half, imported from here by its callers
    STAT_NAMES,
    Layout,
    Options,
    add_suffixes,
    format_stats,
    format_text,
    scalar_text,
    shown_positions,
)

_FLOATS = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64})
_NARROW = frozenset({torch.float16, torch.bfloat16, torch.float32})
_UINTS = frozenset(getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name))
_PLAIN = frozenset({torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool} | _UINTS)


def current_options() -> Options:
    return Options(PRINT_OPTS.precision, PRINT_OPTS.linewidth, PRINT_OPTS.edgeitems, PRINT_OPTS.threshold)


def fast_printable(tensor: torch.Tensor) -> bool:
    """True when this module can print ``tensor`` exactly as torch does."""
    return (
        type(tensor) is torch.Tensor
        and not tensor.requires_grad
        and tensor.layout == torch.strided
        and (tensor.dtype in _FLOATS or tensor.dtype in _PLAIN)
        and (tensor.is_cpu or tensor.is_cuda)  # not meta, not another backend
        and not tensor.is_quantized
        and not tensor.is_nested
        and PRINT_OPTS.edgeitems > 0
        and PRINT_OPTS.sci_mode is True
        and not torch._C._functorch.is_functorch_wrapped_tensor(tensor)
        and not torch._is_functional_tensor(tensor)
    )


def suffixes(tensor: torch.Tensor) -> tuple[str, ...]:
    """The ``device=…`` / ``dtype=…`` suffixes torch prints after a non-empty tensor."""
    out = []
    if tensor.is_cpu:
        if torch._C._get_default_device() != "cpu":
            out.append("device='cpu'")
    else:
        device = tensor.device
        if device.type != torch._C._get_default_device() or (
            device.type == "cuda" and torch.cuda.current_device() != device.index
        ):
            out.append(f"device='{device}'")
    dtype = tensor.dtype
    if dtype is not torch.float32 or torch.get_default_dtype() is not torch.float32:
        default = torch.get_default_dtype()
        complex_default = torch.cdouble if default == torch.double else torch.cfloat
        if dtype not in (default, complex_default, torch.int64, torch.bool):
            out.append(f"dtype={dtype}")
    return tuple(out)


# -- on the device -------------------------------------------------------------
def stat_pieces(tensor: torch.Tensor) -> list[torch.Tensor]:
    """mean, std, min and max of a non-empty floating tensor, as 0-dim tensors on its device.

    The very ops torch users call (``aminmax`` equals ``min``/``max`` exactly), so the numbers are identical.
    """
    mean = tensor.mean()
    std = tensor.std() if tensor.numel() > 1 else torch.full_like(mean, math.nan)
    low, high = torch.aminmax(tensor)
    return [mean, std, low, high]


def gather(tensor: torch.Tensor, options: Options, suffix: tuple[str, ...]) -> tuple[torch.Tensor, Layout]:
    """A flat copy (on the tensor's device) of the elements torch shows, and how to lay them out.

    ``suffix``: ``suffixes(tensor)``.
    """
    shape = tuple(tensor.shape)
    summarize = tensor.numel() > options.threshold
    if not summarize:  # every element; a copy: the recorded tensor may change after this
        flat, shown = tensor.clone(memory_format=torch.contiguous_format).view(-1), shape
    elif tensor.dtype in _UINTS:  # no take or index_select for these
        edge = options.edgeitems
        kept = tensor
        for dim, size in enumerate(shape):
            if size > 2 * edge:
                kept = torch.cat([kept.narrow(dim, 0, edge), kept.narrow(dim, size - edge, edge)], dim)
        flat, shown = kept.reshape(-1).clone(), tuple(kept.shape)
    else:
        index, shown = _edge_index(shape, options.edgeitems, tensor.device)
        flat = torch.take(tensor, index)  # one op: the shown elements, in order, as a new tensor
    dtype = tensor.dtype
    return flat, Layout(dtype in _FLOATS, dtype in _NARROW, shape, shown, summarize, suffix, options)


_EDGE_INDEX: dict[tuple, tuple[torch.Tensor, tuple[int, ...]]] = {}


def _edge_index(shape: tuple[int, ...], edge: int, device: torch.device) -> tuple[torch.Tensor, tuple[int, ...]]:
    """Flat (row-major) positions of the elements a summarized tensor of ``shape`` shows, and their shape."""
    key = (shape, edge, device)
    found = _EDGE_INDEX.get(key)
    if found is None:
        if len(_EDGE_INDEX) > 512:
            _EDGE_INDEX.clear()
        flat, shown = [0], []
        for size in shape:
            kept = shown_positions(size, edge)
            flat = [position * size + k for position in flat for k in kept]
            shown.append(len(kept))
        found = _EDGE_INDEX[key] = (torch.tensor(flat, dtype=torch.int64, device=device), tuple(shown))
    return found


# -- both halves at once, for one tensor -----------------------------------------
def stat_reprs(tensor: torch.Tensor) -> dict[str, str] | None:
    """``repr()`` of mean, std, min and max of ``tensor`` (one transfer), or None when not fast printable."""
    if not fast_printable(tensor) or tensor.dtype not in _FLOATS or tensor.numel() == 0:
        return None
    values = transfer.values(torch.stack(stat_pieces(tensor)))
    return format_stats(values, suffixes(tensor), current_options())


def tensor_text(tensor: torch.Tensor) -> str | None:
    """``str(tensor)`` as torch prints it with the current print options (one transfer), or None."""
    if not fast_printable(tensor) or tensor.numel() == 0:
        return None
    flat, layout = gather(tensor, current_options(), suffixes(tensor))
    return format_text(transfer.values(flat), layout)
