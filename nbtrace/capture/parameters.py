"""Fingerprints of a model's parameters and buffers, for the sidecar's ``parameters`` section.

The most common porting bug is a weight converted wrongly (transposed, scaled, rounded
through another dtype, one block of rows off). A fingerprint lets ``compare`` name it
from the files alone, without storing the weights: per tensor its shape and dtype,
summary statistics, a bit checksum, the norms of up to ``BLOCKS`` blocks of rows and of
columns, which lower-precision dtypes hold it exactly, and ``SAMPLES`` values at fixed
pseudo-random positions (and, for a square matrix, at the mirrored positions, so a
transposed copy shows). Everything is computed on the tensor's device and moved to the
host in one transfer per forward; a tensor already fingerprinted and unchanged since
(same object, version and storage) is not computed again.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from .serialize import local_tensor

BLOCKS = 16
SAMPLES = 64
_NARROWER = ("bfloat16", "float16", "float8_e4m3fn")
_STATS = ("mean", "std", "min", "max", "absmax", "norm")
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def sample_positions(numel: int, count: int = SAMPLES) -> list[int]:
    """``count`` fixed, spread-out flat positions of a tensor of ``numel`` elements (the same on every run)."""
    if numel <= count:
        return list(range(numel))
    golden = 0.6180339887498949
    return sorted({int(((k + 1) * golden % 1.0) * numel) for k in range(count)})


def _named_tensors(model: nn.Module, root: str) -> Iterator[tuple[str, str, str, torch.Tensor]]:
    """``(module path, name, "parameter"|"buffer", tensor)`` for every tensor a module holds directly."""
    for name, module in model.named_modules():
        path = f"{root}.{name}" if name else root
        for kind, items in (("parameter", module._parameters), ("buffer", module._buffers)):
            for key, tensor in items.items():
                if tensor is not None:
                    yield path, key, kind, tensor


# Fingerprints of tensors unchanged since they were computed, shared by every trace of the process
# (id -> (weak reference, version, data pointer, fingerprint)): tracing the same model again, or each
# step of generate(), pays nothing for its weights.
_CACHE: dict[int, tuple[Any, int, int, dict[str, Any]]] = {}


class ParameterFingerprints:
    """Computes the ``parameters`` sidecar section of a model, reusing what has not changed."""

    def __init__(self, model: nn.Module, root: str) -> None:
        self.model = model
        self.root = root
        self._cache = _CACHE

    def section(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{module path: {tensor name: fingerprint}}`` for the model as it is now."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        todo: list[tuple[dict[str, Any], torch.Tensor, int]] = []
        with torch.no_grad():
            for path, name, kind, held in _named_tensors(self.model, self.root):
                tensor = local_tensor(held)
                tensor = held if tensor is None else tensor
                if not isinstance(tensor, torch.Tensor) or tensor.is_meta:
                    continue
                key = id(held)
                cached = self._cache.get(key)
                version = getattr(tensor, "_version", -1)
                pointer = tensor.data_ptr() if tensor.layout == torch.strided else 0
                if cached is not None and cached[0]() is held and cached[1] == version and cached[2] == pointer:
                    fingerprint = cached[3]
                else:
                    fingerprint = {"kind": kind, "shape": list(tensor.shape), "dtype": str(tensor.dtype)[6:]}
                    if tensor.is_floating_point() and tensor.numel() > 0 and tensor.layout == torch.strided:
                        todo.append((fingerprint, tensor, key))
                    self._cache[key] = (weakref.ref(held), version, pointer, fingerprint)
                out.setdefault(path, {})[name] = fingerprint
            _fill(todo)
        if len(self._cache) > 4 * max(len(todo), 1024):  # forget tensors that no longer exist
            for key in [k for k, entry in self._cache.items() if entry[0]() is None]:
                del self._cache[key]
        return out


def _fill(todo: list[tuple[dict[str, Any], torch.Tensor, int]]) -> None:
    """Compute every pending fingerprint on its device, then move all numbers to the host at once."""
    if not todo:
        return
    parts: list[torch.Tensor] = []
    sums: list[torch.Tensor] = []
    layouts: list[tuple[int, int, int, int]] = []
    for _, tensor, _ in todo:
        vector, layout = _numbers(tensor)
        parts.append(vector.to(device=parts[0].device if parts else vector.device))
        layouts.append(layout)
        sums.append(_bit_sum(tensor).to(parts[0].device))
    numbers = torch.cat(parts).tolist()
    checksums = torch.stack(sums).tolist()
    at = 0
    for (fingerprint, tensor, _), (rows, cols, samples, mirrored), check in zip(todo, layouts, checksums):
        take = numbers[at : at + len(_STATS) + rows + cols + samples + mirrored]
        at += len(take)
        stats, take = take[: len(_STATS)], take[len(_STATS) :]
        fingerprint.update({name: _json_number(v) for name, v in zip(_STATS, stats)})
        fingerprint["checksum"] = f"{check & 0xFFFFFFFFFFFFFFFF:016x}"
        fingerprint["row_blocks"] = [_json_number(v) for v in take[:rows]]
        fingerprint["col_blocks"] = [_json_number(v) for v in take[rows : rows + cols]]
        fingerprint["samples"] = [_json_number(v) for v in take[rows + cols : rows + cols + samples]]
        if mirrored:
            fingerprint["mirrored_samples"] = [_json_number(v) for v in take[rows + cols + samples :]]
        raw = take[rows + cols : rows + cols + samples]
        fingerprint["exact_in"] = [name for name in _NARROWER if exact_in(raw, name, fingerprint["dtype"])]


def _numbers(tensor: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int, int, int]]:
    """One float64 vector: stats, row-block norms, column-block norms, samples, mirrored samples.

    Sums are taken in float32 (float64 for float64 tensors), which is enough to tell
    weights apart; exactness in narrower dtypes is judged on the host from the samples.
    """
    x = tensor.detach()
    if x.element_size() < 4:  # half precision: sums in float32
        x = x.float()
    flat = x.reshape(-1)
    numel = flat.numel()
    total = flat.sum().to(torch.float64)
    squares = flat.square()
    if x.dim() >= 2:
        matrix = squares.reshape(x.shape[0], -1)
        row_norms = _block_sums(matrix.sum(dim=1).to(torch.float64)).sqrt()
        col_norms = _block_sums(matrix.sum(dim=0).to(torch.float64)).sqrt()
        square_sum = row_norms.square().sum()
    else:
        row_norms = col_norms = total.new_zeros(0)
        square_sum = squares.sum().to(torch.float64)
    low, high = torch.aminmax(flat)
    mean = total / numel
    variance = (square_sum - numel * mean * mean) / max(numel - 1, 1)
    std = variance.clamp(min=0).sqrt() if numel > 1 else total.new_tensor(math.nan)
    low, high = low.to(torch.float64), high.to(torch.float64)
    stats = torch.stack([mean, std, low, high, torch.maximum(low.abs(), high.abs()), square_sum.sqrt()])
    index = torch.tensor(sample_positions(numel), device=flat.device, dtype=torch.long)
    samples = tensor.detach().reshape(-1)[index].to(torch.float64)
    mirrored = total.new_zeros(0)
    if x.dim() == 2 and x.shape[0] == x.shape[1] and x.shape[0] > 1:
        n = x.shape[0]
        mirrored = tensor.detach().reshape(-1)[(index % n) * n + index // n].to(torch.float64)
    vector = torch.cat([stats, row_norms, col_norms, samples, mirrored])
    return vector, (row_norms.numel(), col_norms.numel(), samples.numel(), mirrored.numel())


def _block_sums(values: torch.Tensor) -> torch.Tensor:
    """Sums of up to BLOCKS contiguous blocks of a 1-D tensor."""
    size = values.numel()
    count = min(BLOCKS, size)
    bounds = torch.tensor([round(i * size / count) for i in range(count + 1)], device=values.device)
    cumulative = torch.cat([values.new_zeros(1), values.cumsum(0)])
    return cumulative[bounds[1:]] - cumulative[bounds[:-1]]


def exact_in(values: list[float], dtype: str, source: str) -> bool:
    """True when every value survives a round trip through the narrower ``dtype`` (for a ``source`` tensor)."""
    narrow, wide = getattr(torch, dtype, None), getattr(torch, source, None)
    if narrow is None or wide is None or not values:
        return False
    if torch.empty(0, dtype=narrow).element_size() >= torch.empty(0, dtype=wide).element_size():
        return False
    x = torch.tensor(values, dtype=torch.float64).to(wide)
    try:
        return bool((x.to(narrow).to(wide) == x).all())
    except (RuntimeError, TypeError):
        return False


def _bit_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The wrapping sum of the tensor's bits as integers (as int64), on its device."""
    view = tensor.detach().contiguous().view(_INT_VIEW[tensor.element_size()])
    return view.sum(dtype=torch.int64)


def _json_number(value: float) -> float | str:
    """A float for JSON: ``"nan"``/``"inf"``/``"-inf"`` as text, others rounded to 7 significant digits."""
    if not math.isfinite(value):
        return str(value)
    return float(f"{value:.7g}")
