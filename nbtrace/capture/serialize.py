"""One module's inputs or outputs -> the JSON structure of the trace format.

All per-tensor work lives here: the tensor record (shape, dtype, printed lines or
a safetensors reference, and the four stat strings), the sanitized repr of
everything else, and the torch print options the format is written with. The
print options are set only while a value is being serialized and restored
right after, so user code never sees them changed.
"""

from __future__ import annotations

import re
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch._tensor_str import PRINT_OPTS

from .printing import fast_printable, stat_reprs, tensor_text
from .write import TensorStore

_ADDRESS = re.compile(r"object at 0x[0-9A-Fa-f]+")
STAT_DTYPES = frozenset({torch.float16, torch.float32, torch.bfloat16})


def sanitize(text: str) -> str:
    """Replace memory addresses so two runs print the same text."""
    return _ADDRESS.sub("object at 0xXXXXXXXX", text)


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
    """Serializes values for one forward: printed lines, or safetensors files in ``store``."""

    def __init__(self, use_repr: bool, store: TensorStore | None) -> None:
        if not use_repr and store is None:
            raise ValueError("use_repr=False needs a folder to write safetensors files into")
        self.use_repr = use_repr
        self.store = store
        self._seen: dict[int, _Seen] = {}
        #: called with (record, value) for each value recorded by its local tensor (a DTensor): see ranks.py
        self.on_shard: Callable[[dict[str, Any], Any], None] | None = None

    def __call__(self, value: Any, name: str) -> Any:
        """The JSON structure for ``value``; ``name`` is the base name of its files."""
        with format_print_options(self.use_repr):
            return self._value(value, name)

    def _value(self, value: Any, name: str) -> Any:
        if isinstance(value, (list, tuple)):
            return [self._value(item, f"{name}_{i}") for i, item in enumerate(value)]
        if isinstance(value, dict):
            return {_json_key(key): self._value(item, f"{name}_{key}") for key, item in value.items()}
        local = local_tensor(value)
        if local is not None:
            record = self.tensor(local, name)
            if self.on_shard is not None:
                self.on_shard(record, value)
            return record
        if isinstance(value, torch.Tensor):
            return self.tensor(value, name)
        return _safe_repr(value)

    def tensor(self, tensor: torch.Tensor, name: str) -> dict[str, Any]:
        """The record of one tensor. Never raises for odd tensors: it degrades instead.

        A tensor seen earlier in this forward reuses its printed lines and stats,
        and in safetensors mode its file (hard-linked under the new name), when
        it is provably unchanged: the same object, the same ``_version``, the same
        data pointer, and the same checksum of its bits (writes through
        ``.data`` or numpy bypass the version counter).
        """
        seen = self._seen.get(id(tensor))
        if seen is not None and not seen.unchanged(tensor):
            seen = None
        if seen is None:
            seen = self._describe(tensor)
        record: dict[str, Any] = {"shape": seen.shape, "dtype": seen.dtype}
        if self.use_repr or tensor.is_meta:
            record["value"] = seen.lines if seen.lines is not None else self._lines(tensor)
        else:
            record["value"] = self._save(tensor, name, seen)
        record.update(seen.stats)
        return record

    def _describe(self, tensor: torch.Tensor) -> _Seen:
        """Shape, dtype, stats and (repr mode) printed lines of a tensor not seen before."""
        fast = fast_printable(tensor)
        seen = _Seen(repr(tensor.shape), repr(tensor.dtype))
        if tensor.dtype in STAT_DTYPES and tensor.numel() > 0:
            stats = stat_reprs(tensor) if fast else None
            seen.stats = stats if stats is not None else _slow_stats(tensor)
        if self.use_repr:
            text = tensor_text(tensor) if fast else None
            seen.lines = text.splitlines() if text is not None else self._lines(tensor)
        # Reuse only what can be proven unchanged later: plain tensors (autograd suffixes depend on
        # the grad mode of the moment) with a version counter (inference tensors have none).
        if fast and not tensor.is_inference():
            seen.ref = weakref.ref(tensor)
            seen.version = tensor._version
            seen.pointer = tensor.data_ptr()
            seen.checksum = checksum(tensor)
            self._seen[id(tensor)] = seen
        return seen

    def _save(self, tensor: torch.Tensor, name: str, seen: _Seen) -> list[str] | str:
        store = self.store
        assert store is not None
        try:
            if seen.file is not None:
                return store.link(name, seen.file, tensor)
            ref = store.save(name, tensor)
            seen.file = ref[2:]
            return ref
        except Exception:  # no data to save (e.g. sparse, fake): print it instead
            return self._lines(tensor)

    @staticmethod
    def _lines(tensor: torch.Tensor) -> list[str]:
        try:
            return sanitize(str(tensor)).splitlines()
        except Exception as exc:
            return [f"<tensor could not be printed: {type(exc).__name__}: {exc}>"]


class _Seen:
    """What one tensor serialized to, kept to reuse when the same tensor comes back."""

    __slots__ = ("shape", "dtype", "stats", "lines", "file", "ref", "version", "pointer", "checksum")

    def __init__(self, shape: str, dtype: str) -> None:
        self.shape = shape
        self.dtype = dtype
        self.stats: dict[str, str] = {}
        self.lines: list[str] | None = None
        self.file: str | None = None
        self.ref: Callable[[], Any] | None = None
        self.version = -1
        self.pointer = 0
        self.checksum = 0

    def unchanged(self, tensor: torch.Tensor) -> bool:
        """True when ``tensor`` is the very tensor described, with the same content."""
        return (
            self.ref is not None
            and self.ref() is tensor
            and self.version == tensor._version
            and self.pointer == tensor.data_ptr()
            and self.checksum == checksum(tensor)
        )


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_SUM = {1: torch.int32, 2: torch.int32, 4: torch.int32, 8: torch.int64}


def checksum(tensor: torch.Tensor) -> int:
    """The wrapping sum of a tensor's bits as integers: changes when any value changes (short of contrived swaps)."""
    if tensor.numel() == 0:
        return 0
    size = tensor.element_size()
    return int(tensor.view(_BITS[size]).sum(dtype=_SUM[size]))


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
    if tensor.numel() != 1:
        return tensor.std()
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
