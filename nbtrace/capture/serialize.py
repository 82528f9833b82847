"""One module's inputs or outputs -> the JSON structure of the trace format.

All per-tensor work lives here: the tensor record (shape, dtype, printed lines or
a safetensors reference, and the four stat strings), the sanitized repr of
everything else, and the torch print options the format is written with. The
print options are set only while a value is being serialized and restored
right after, so user code never sees them changed.

A record's printed lines and stats are computed on the tensor's device when it is recorded and
written into it by ``Serializer.finish()``, after one transfer for all of them (``transfer.py``).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch._tensor_str import PRINT_OPTS

from . import transfer
from .repr_text import sanitize
from .printing import (
    Layout,
    Options, current_options, fast_printable, format_stats, format_text, gather, stat_pieces, suffixes,
)
from .write import TensorStore

STAT_DTYPES = frozenset({torch.float16, torch.float32, torch.bfloat16})


@contextmanager
def format_print_options(use_repr: bool) -> Iterator[None]:
    """torch's print options as the format prints with them, restored on exit.

    The format prints in scientific notation; printed values (``use_repr``) use a
    line width of 120. Precision, threshold and edge items stay the user's.
    """
    saved = (PRINT_OPTS.sci_mode, PRINT_OPTS.linewidth)
    PRINT_OPTS.sci_mode = True
    if use_repr:
        PRINT_OPTS.linewidth = 120
    try:
        yield
    finally:
        PRINT_OPTS.sci_mode, PRINT_OPTS.linewidth = saved


class Serializer:
    """Serializes values for one forward: printed lines, or safetensors files in ``store``.

    Records are complete after ``finish()``.
    """

    def __init__(self, use_repr: bool, store: TensorStore | None) -> None:
        if not use_repr and store is None:
            raise ValueError("use_repr=False needs a folder to write safetensors files into")
        self.use_repr = use_repr
        self.store = store
        self._seen: dict[int, _Seen] = {}
        #: called with (record, value) for each value recorded by its local tensor (a DTensor): see ranks.py
        self.on_shard: Callable[[dict[str, Any], Any], None] | None = None
        #: values on their way to the host with the forward's one transfer (``finish``); others may add theirs
        self.batch = transfer.HostBatch()
        self._waiting: list[_Seen] = []
        self._texts: dict[tuple, list[str]] = {}  # printed lines by layout and exact values
        self._options = current_options()
        self._saves: list[_Save] = []
        self._ready: Callable[[], None] | None = None  # waits for the host copies of the record being saved

    def __call__(self, value: Any, name: str) -> Any:
        """The JSON structure for ``value``; ``name`` is the base name of its files."""
        saved = (PRINT_OPTS.sci_mode, PRINT_OPTS.linewidth)  # format_print_options, inlined: called per record
        PRINT_OPTS.sci_mode = True
        if self.use_repr:
            PRINT_OPTS.linewidth = 120
        try:
            self._options = current_options()
            out = self._value(value, None if self.use_repr else name)  # names only name files
            if self._saves:
                self._save_all(self._saves)
            return out
        finally:
            self._saves = []
            PRINT_OPTS.sci_mode, PRINT_OPTS.linewidth = saved

    def finish(self) -> None:
        """Move every pending summary to the host (one transfer per device) and complete the records."""
        self.batch.fetch()
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        for seen in waiting:
            seen.fill(self._texts)

    def _value(self, value: Any, name: str | None) -> Any:
        kind = type(value)
        if kind is torch.Tensor:
            return self.tensor(value, name)
        if kind is tuple or kind is list or isinstance(value, (list, tuple)):
            if name is None:
                return [self._value(item, None) for item in value]
            return [self._value(item, f"{name}_{i}") for i, item in enumerate(value)]
        if kind is dict or isinstance(value, dict):
            if name is None:
                return {key if type(key) is str else _json_key(key): self._value(item, None)
                        for key, item in value.items()}
            return {_json_key(key): self._value(item, f"{name}_{key}") for key, item in value.items()}
        if value is None or kind is bool or kind is int or kind is float:
            return repr(value)
        local = local_tensor(value)
        if local is not None:
            record = self.tensor(local, name)
            if self.on_shard is not None:
                self.on_shard(record, value)
            return record
        if isinstance(value, torch.Tensor):
            return self.tensor(value, name)
        return _safe_repr(value)

    def tensor(self, tensor: torch.Tensor, name: str | None) -> dict[str, Any]:
        """The record of one tensor. Never raises for odd tensors: it degrades instead.

        A tensor seen earlier in this forward reuses its printed lines and stats,
        and in safetensors mode its file (hard-linked under the new name), when
        it is provably unchanged: the same object, the same ``_version``, the same
        data pointer, and the same checksum of its bits (writes through
        ``.data`` or numpy bypass the version counter). The checksum is only
        read where that takes no transfer of its own (in host memory, or from
        the data a safetensors file needs anyway); elsewhere the tensor is
        summarised again on its device (and its lines formatted once).
        """
        seen = self._seen.get(id(tensor))
        if seen is not None and not seen.same_object(tensor):
            seen = None
        if self.use_repr or tensor.is_meta:
            if seen is not None and not (transfer.host_readable(tensor) and seen.checksum == transfer.checksum(tensor)):
                seen = None
            return (seen or self._describe(tensor)).record()
        save = _Save(tensor, name, seen)
        if seen is None:
            save.seen = self._describe(tensor)
        self._saves.append(save)
        return save.record  # complete once the record's data is on the host (_save_all)

    def _describe(self, tensor: torch.Tensor) -> _Seen:
        """Shape, dtype, stats and (repr mode) printed lines of a tensor, computed on its device."""
        fast = fast_printable(tensor)
        seen = _Seen(repr(tensor.shape), repr(tensor.dtype))
        numel = tensor.numel()
        suffix = suffixes(tensor) if fast else ()
        if tensor.dtype in STAT_DTYPES and numel > 0:
            if fast:
                seen.stat_slot = self.batch.add_scalars(stat_pieces(tensor))
                seen.stat_format = (suffix, self._options)
            else:
                seen.stats = _slow_stats(tensor)
        if self.use_repr or tensor.is_meta:
            if fast and numel > 0:
                flat, seen.layout = gather(tensor, self._options, suffix)
                seen.text_slot = self.batch.add(flat)
            else:
                seen.lines = self._lines(tensor)
        if seen.stat_slot is not None or seen.text_slot is not None:
            self._waiting.append(seen)
        # Reuse only what can be proven unchanged later: plain tensors (autograd suffixes depend on
        # the grad mode of the moment) with a version counter (inference tensors have none).
        if fast and not tensor.is_inference():
            seen.ref = weakref.ref(tensor)
            seen.version = tensor._version
            seen.pointer = tensor.data_ptr()
            if self.use_repr and transfer.host_readable(tensor):
                seen.checksum = transfer.checksum(tensor)
            self._seen[id(tensor)] = seen
        return seen

    def _save_all(self, saves: list[_Save]) -> None:
        """Write the files of one record's tensors: their data moves to the host in one transfer."""
        batched = [save for save in saves if _plain_data(save.tensor)]
        hosts, self._ready = transfer.to_host_async([save.tensor for save in batched])  # ready: None, or a wait
        for save, host in zip(batched, hosts):
            save.host = host
        for save in saves:
            seen = save.seen
            assert seen is not None
            if save.candidate:
                if (seen.file is not None and save.host is not None and self._ready is None
                        and seen.checksum == transfer.checksum(save.host)):
                    save.complete(self._link(save, seen))
                    continue
                seen = save.seen = self._describe(save.tensor)  # changed since: a new description
            save.complete(self._save(save, seen))

    def _link(self, save: _Save, seen: _Seen) -> list[str] | str:
        store = self.store
        assert store is not None and seen.file is not None
        try:
            return store.link(save.name, seen.file, save.host, transfer.is_copy(save.host, save.tensor))
        except OSError:
            raise  # the disk failed: never a silent loss (writer.py)
        except Exception:  # noqa: BLE001 - no file to link to: print it
            return self._lines(save.tensor)

    def _save(self, save: _Save, seen: _Seen) -> list[str] | str:
        store = self.store
        assert store is not None
        try:
            private = save.host is not None and transfer.is_copy(save.host, save.tensor)  # a device's, copied
            ref = store.save(save.name, save.host if private else save.tensor, self._ready, private)
        except OSError:
            raise  # the disk failed: never a silent loss (writer.py)
        except Exception:  # no data to save (e.g. sparse, fake): print it instead
            return self._lines(save.tensor)
        seen.file = ref[2:]
        if seen.ref is not None and save.host is not None and self._ready is None:  # in flight: no reuse
            seen.checksum = transfer.checksum(save.host)
        return ref

    @staticmethod
    def _lines(tensor: torch.Tensor) -> list[str]:
        try:
            return sanitize(str(tensor)).splitlines()
        except Exception as exc:
            return [f"<tensor could not be printed: {type(exc).__name__}: {exc}>"]


class _Seen:
    """What one tensor serialized to, kept to reuse when the same tensor comes back.

    Until ``fill`` runs, its stats and lines wait in ``stat_slot``/``text_slot``
    (values on their way to the host) and ``records`` are the records to complete.
    """

    __slots__ = ("checksum", "dtype", "file", "layout", "lines", "pointer", "records", "ref", "shape", "stat_format",
                 "stat_slot", "stats", "text_slot", "version")

    def __init__(self, shape: str, dtype: str) -> None:
        self.shape = shape
        self.dtype = dtype
        self.stats: dict[str, str] = {}
        self.lines: list[str] | None = None
        self.file: str | None = None
        self.ref: Callable[[], Any] | None = None
        self.version = -1
        self.pointer = 0
        self.checksum: int | None = None
        self.stat_slot: transfer.Slot | None = None
        self.stat_format: tuple[tuple[str, ...], Options] | None = None
        self.text_slot: transfer.Slot | None = None
        self.layout: Layout | None = None
        self.records: list[dict[str, Any]] = []

    def same_object(self, tensor: torch.Tensor) -> bool:
        """True when ``tensor`` is the very tensor described, with no change autograd knows of."""
        return (
            self.ref is not None
            and self.ref() is tensor
            and self.version == tensor._version
            and self.pointer == tensor.data_ptr()
        )

    def record(self, value: Any = None, into: dict[str, Any] | None = None) -> dict[str, Any]:
        """A record of this tensor (``value``: its file reference, in safetensors mode), new or ``into``."""
        if self.stat_slot is not None:  # the stats' keys now, in the format's order; their values in fill()
            fields = {"shape": self.shape, "dtype": self.dtype, "value": self.lines if value is None else value,
                      "mean": None, "std": None, "min": None, "max": None}
        else:
            fields = {"shape": self.shape, "dtype": self.dtype, "value": self.lines if value is None else value}
            fields.update(self.stats)
        if into is None:
            record = fields
        else:
            record = into
            record.update(fields)
        if self.stat_slot is not None or self.text_slot is not None:
            self.records.append(record)
        return record

    def fill(self, texts: dict[tuple, list[str]]) -> None:
        """Format the values that arrived on the host, and complete every record waiting for them."""
        if self.stat_slot is not None:
            assert self.stat_format is not None
            self.stats = format_stats(self.stat_slot.values(), *self.stat_format)
            self.stat_slot = None
        text_slot, self.text_slot = self.text_slot, None
        if text_slot is not None:
            assert self.layout is not None
            if self.checksum is None:  # no reuse of this tensor by checksum (on a device): reuse by values
                self.lines = _lines_of(text_slot.values(), self.layout, texts)
            else:
                self.lines = format_text(text_slot.values(), self.layout).splitlines()
        for record in self.records:
            if text_slot is not None:
                record["value"] = self.lines
            record.update(self.stats)
        self.records = []


def _lines_of(values: list, layout: Layout, texts: dict[tuple, list[str]]) -> list[str]:
    """The printed lines of a tensor from its gathered values; formatted once per layout and exact values."""
    exact = not layout.floating or 0.0 not in values  # 0.0 == -0.0, yet they print differently
    key = (layout, tuple(values)) if exact else None
    lines = texts.get(key) if key is not None else None
    if lines is None:
        lines = format_text(values, layout).splitlines()
        if key is not None:
            texts[key] = lines
    return lines


class _Save:
    """One tensor of a record to write to a safetensors file, and the record it completes."""

    __slots__ = ("candidate", "host", "name", "record", "seen", "tensor")

    def __init__(self, tensor: torch.Tensor, name: str, seen: _Seen | None) -> None:
        self.record: dict[str, Any] = {}  # keys in the format's order once complete
        self.tensor = tensor
        self.name = name
        self.seen = seen
        self.candidate = seen is not None  # the same object seen before: its file may be reused
        self.host: torch.Tensor | None = None

    def complete(self, value: list[str] | str) -> None:
        assert self.seen is not None
        self.seen.record(value, into=self.record)


def _plain_data(tensor: torch.Tensor) -> bool:
    """True for a dense tensor whose bytes can be moved with others in one transfer."""
    return (
        type(tensor) in (torch.Tensor, torch.nn.Parameter)
        and tensor.layout == torch.strided
        and not tensor.is_meta
        and not tensor.is_quantized
        and not tensor.is_nested
        and not torch._C._functorch.is_functorch_wrapped_tensor(tensor)
        and not torch._is_functional_tensor(tensor)
    )


def _slow_stats(tensor: torch.Tensor) -> dict[str, str]:
    """The four stat strings through torch's own printer (tensors the fast path does not cover)."""
    try:
        return {
            "mean": sanitize(repr(tensor.mean())),
            "std": sanitize(repr(_std(tensor))),
            "min": sanitize(repr(tensor.min())),
            "max": sanitize(repr(tensor.max())),
        }
    except Exception:  # exotic subclasses / layouts: keep shape, dtype and value
        return {}


def _std(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor.std()``, without torch's warning for one element (the result is nan either way)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return tensor.std()


def _json_key(key: Any) -> Any:
    if isinstance(key, (str, int, float, bool)) or key is None:
        return key
    return _safe_repr(key)


def local_tensor(value: Any) -> torch.Tensor | None:
    """The local shard of a DTensor-like value, the waited-for tensor of an AsyncCollectiveTensor, else None.

    A RowwiseParallel module hands its caller an ``AsyncCollectiveTensor`` (an all-reduce still in
    flight); safetensors cannot save the wrapper, and its printout is not the format's, so the
    recorded value is the tensor it waits for (what any use of it would see).
    """
    if type(value).__name__ == "AsyncCollectiveTensor":
        waited = value.wait()
        return waited if isinstance(waited, torch.Tensor) and waited is not value else None
    try:
        local = getattr(value, "_local_tensor", None)
    except Exception:
        return None
    return local if isinstance(local, torch.Tensor) else None


def _safe_repr(value: Any) -> str:
    try:
        return sanitize(repr(value))
    except Exception as exc:  # a broken __repr__ must not break the user's forward
        return f"<{type(value).__name__} object: repr failed with {type(exc).__name__}>"
