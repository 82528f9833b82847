"""What one top-level forward of a language model did to its KV cache, and the token it picked.

The file format records a KV cache argument as its ``repr`` (``DynamicCache(layers=[…])``),
the same at every step, so a cache that one layer forgets to update is only seen a step
later, where the stale cache is read. ``GenerationProbe`` looks at the cache before and
after the forward and at the forward's logits, and returns the ``generation`` section of
nbtrace's sidecar (docs/format.md)::

    {"input_length": 1, "tokens": [42], "margins": [1.7],
     "cache": {"dtype": "torch.float32", "past": [8, 8], "length": [9, 9],
               "new_keys": [[mean, std, absmax], …], "new_values": [[…], …]}}

Caches are recognised by shape, not by class: transformers' ``Cache`` objects (``layers``
with ``keys``/``values``, or ``key_cache``/``value_cache`` lists) and the legacy tuple of
``(key, value)`` pairs per layer, laid out ``(batch, heads, positions, head_dim)``. Nothing
here may disturb the forward: a probe that fails records nothing. The numbers are computed on
the cache's and logits' devices and reach the host with the forward's one transfer
(``transfer.HostBatch``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..core.generation import CACHE_ARGUMENTS
from . import transfer


def _tensor(value: Any) -> torch.Tensor | None:
    return value if isinstance(value, torch.Tensor) else None


def cache_layers(cache: Any) -> list[tuple[torch.Tensor | None, torch.Tensor | None]] | None:
    """``(keys, values)`` per layer of a KV cache, or None when ``cache`` is not one."""
    inner = getattr(cache, "self_attention_cache", None)  # an encoder-decoder cache: the decoder's own
    if inner is not None:
        cache = inner
    layers = getattr(cache, "layers", None)
    if isinstance(layers, (list, tuple)) and layers and all(hasattr(layer, "keys") for layer in layers):
        return [(_tensor(getattr(layer, "keys", None)), _tensor(getattr(layer, "values", None))) for layer in layers]
    keys, values = getattr(cache, "key_cache", None), getattr(cache, "value_cache", None)
    if isinstance(keys, list) and isinstance(values, list) and len(keys) == len(values):
        return [(_tensor(k), _tensor(v)) for k, v in zip(keys, values)]
    if isinstance(cache, (list, tuple)) and cache and all(
        isinstance(layer, (list, tuple)) and len(layer) >= 2 and _tensor(layer[0]) is not None for layer in cache
    ):
        return [(layer[0], layer[1]) for layer in cache]
    return None


def cache_lengths(cache: Any, layers: list[tuple[torch.Tensor | None, torch.Tensor | None]]) -> list[int]:
    """How many positions each layer of ``cache`` holds (``get_seq_length`` where the cache has it)."""
    lengths = []
    length_of = getattr(cache, "get_seq_length", None)
    for index, (keys, _) in enumerate(layers):
        if callable(length_of):
            try:
                length = length_of(index)
                if isinstance(length, torch.Tensor):  # a cache that counts on its device (a static cache)
                    length = transfer.values(length)
                lengths.append(int(length))
                continue
            except Exception:  # noqa: BLE001, S110 - a cache we do not understand: its shape tells
                pass
        lengths.append(int(keys.shape[-2]) if keys is not None and keys.dim() >= 2 else 0)
    return lengths


def _stats(tensor: torch.Tensor | None, start: int, stop: int) -> torch.Tensor | None:
    """``[mean, std, absmax]`` of positions ``start:stop`` (dimension -2) of a cache tensor, on its device."""
    if tensor is None or tensor.dim() < 2 or stop <= start or tensor.shape[-2] < stop:
        return None
    part = tensor[..., start:stop, :].detach().float()
    if part.numel() == 0:
        return None
    std = part.std() if part.numel() > 1 else part.new_zeros(())
    return torch.stack([part.mean(), std, part.abs().max()])


def _logits(out: Any) -> torch.Tensor | None:
    """The forward's logits: a ``logits`` field, else a float output (or first output) of shape (batch, positions, vocab)."""
    named = out.get("logits") if isinstance(out, dict) else getattr(out, "logits", None)
    if isinstance(named, torch.Tensor) and named.dim() in (2, 3) and named.is_floating_point():
        return named
    first = out[0] if isinstance(out, (list, tuple)) and out else out
    if isinstance(first, torch.Tensor) and first.dim() == 3 and first.is_floating_point():
        return first
    return None


def _input_length(args: tuple, kwargs: dict[str, Any]) -> int | None:
    for value in (kwargs.get("input_ids"), kwargs.get("inputs_embeds"), args[0] if args else None):
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            return int(value.shape[1])
    return None


class GenerationProbe:
    """Looks at a top-level forward's KV cache before it runs (``start``) and at what it returned (``finish``)."""

    def __init__(self, args: tuple, kwargs: dict[str, Any]) -> None:
        self.input_length = _input_length(args, kwargs)
        self.cache = next(
            (kwargs[name] for name in CACHE_ARGUMENTS if kwargs.get(name) is not None and cache_layers(kwargs[name])),
            None,
        )
        layers = cache_layers(self.cache) if self.cache is not None else None
        self.past = cache_lengths(self.cache, layers) if layers is not None else None

    @classmethod
    def start(cls, args: tuple, kwargs: dict[str, Any]) -> GenerationProbe | None:
        try:
            return cls(args, kwargs)
        except Exception:  # noqa: BLE001 - never disturb the forward
            return None

    def finish(self, out: Any, batch: transfer.HostBatch) -> Callable[[], dict[str, Any] | None]:
        """Compute this forward's numbers on their device into ``batch``; the returned function, called after
        ``batch.fetch()``, gives the ``generation`` section, or None when it is not a language model's step."""
        try:
            complete = self._section(out, batch)
        except Exception:  # noqa: BLE001
            return _nothing

        def finish() -> dict[str, Any] | None:
            try:
                return complete()
            except Exception:  # noqa: BLE001
                return None

        return finish

    def _section(self, out: Any, batch: transfer.HostBatch) -> Callable[[], dict[str, Any] | None]:
        logits = _logits(out)
        picked = None
        if logits is not None:
            last = (logits[:, -1, :] if logits.dim() == 3 else logits).detach().float()
            if last.shape[-1] >= 2:
                top = last.topk(2, dim=-1)
                picked = batch.add(top.indices[:, 0].contiguous()), batch.add(top.values[:, 0] - top.values[:, 1])
        cache = self.cache
        returned = out.get("past_key_values") if isinstance(out, dict) else getattr(out, "past_key_values", None)
        if returned is not None and cache_layers(returned) is not None:
            cache = returned
        layers = cache_layers(cache) if cache is not None else None
        facts: dict[str, Any] | None = None
        stats: list[list[transfer.Slot | None]] = []
        if layers is not None:
            length = cache_lengths(cache, layers)
            past = self.past if self.past is not None and len(self.past) == len(length) else [0] * len(length)
            dtype = next((str(k.dtype) for k, _ in layers if k is not None), None)
            facts = {"dtype": dtype, "past": past, "length": length}
            for column in ([k for k, _ in layers], [v for _, v in layers]):
                stats.append([_slot(batch, _stats(tensor, p, n)) for tensor, p, n in zip(column, past, length)])

        def complete() -> dict[str, Any] | None:
            section: dict[str, Any] = {}
            if self.input_length is not None:
                section["input_length"] = self.input_length
            if picked is not None:
                section["tokens"] = [int(i) for i in picked[0].values()]
                section["margins"] = [float(v) for v in picked[1].values()]
            if facts is not None:
                keys, values = ([slot.values() if slot is not None else None for slot in column] for column in stats)
                section["cache"] = {**facts, "new_keys": keys, "new_values": values}
            return section if ("tokens" in section or "cache" in section) else None

        return complete


def _slot(batch: transfer.HostBatch, piece: torch.Tensor | None) -> transfer.Slot | None:
    return batch.add(piece) if piece is not None else None


def _nothing() -> None:
    return None
