"""TensorValue: one recorded tensor (shape, dtype, stats, and its printed lines or its file)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TraceFormatError
from .dtypes import dtype_kind
from .tensor_file import load_tensor

if TYPE_CHECKING:  # pragma: no cover
    import torch

STAT_NAMES = ("mean", "std", "min", "max")
_NONFINITE_TOKEN = re.compile(r"(?<![A-Za-z_])-?(?:nan|inf)(?![A-Za-z_])")
_NAN_TOKEN = re.compile(r"(?<![A-Za-z_])nan(?![A-Za-z_])")
_UNSAFE_IN_REF = ("/", "\\", "\0")


def parse_stat(text: str | None) -> float | None:
    """The number in a stat string such as ``tensor(6.5460e-06, dtype=torch.float16)``."""
    if not isinstance(text, str) or not text.startswith("tensor("):
        return None
    end = text.find(",", 7)
    if end < 0:
        end = text.find(")", 7)
    try:
        return float(text[7:end])
    except ValueError:  # "...": a meta tensor has no value
        return None


def is_tensor_record(value: Any) -> bool:
    """True for the dict the format writes for one tensor (shape, dtype, value, stats)."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("shape"), str)
        and isinstance(value.get("dtype"), str)
        and value["shape"].startswith("torch.Size(")
    )


def reference_problem(ref: str) -> str | None:
    """Why ``ref`` is not a tensor-file reference a trace may hold, or None when it is one.

    A reference names one file beside the JSON file (``./<name>``): never a folder,
    a parent, an absolute path or another drive. Trace files are shared like any
    download, so a reference that points elsewhere is refused, not followed.
    """
    if not ref.startswith("./"):
        return f"tensor file reference {ref!r} must start with './'"
    name = ref[2:]
    if not name or name in (".", "..") or any(ch in name for ch in _UNSAFE_IN_REF):
        return f"tensor file reference {ref!r} must name one file beside the trace"
    return None


class TensorValue:
    """One recorded tensor: shape, dtype, stats, and its values (printed lines or a file).

    ``value`` is the list of printed lines (FULL file with ``use_repr=True``), the
    relative safetensors reference (``"./X_outputs.safetensors"``), or None in a
    SUMMARY file. Stats are floats parsed from the stat strings the format writes
    (transformers writes them for float16/bfloat16/float32 only).
    """

    __slots__ = ("shape", "dtype", "value", "stats", "base_dir", "_has_value", "_numbers", "_path", "_in_file")

    def __init__(
        self,
        shape: tuple[int, ...],
        dtype: str,
        value: list[str] | str | None = None,
        stats: dict[str, str] | None = None,
        base_dir: Path | None = None,
        has_value: bool | None = None,
    ) -> None:
        self.shape = shape
        self.dtype = dtype
        self.value = value
        self.stats = stats or {}
        self.base_dir = base_dir
        self._has_value = value is not None if has_value is None else has_value
        self._numbers: tuple[float | None, ...] | None = None  # the stats parsed, when first asked
        self._path: tuple[str | None, Path | None, str | None] | None = None  # (ref, base_dir, location) last found
        self._in_file: tuple[bool, bool] | None = None  # (a NaN or inf, a NaN) in the file, when it was read for it

    def _stat(self, index: int) -> float | None:
        if self._numbers is None:
            self._numbers = tuple(parse_stat(self.stats.get(name)) for name in STAT_NAMES)
        return self._numbers[index]

    @property
    def mean(self) -> float | None:
        """The mean as a number, parsed from its stat string (None without one)."""
        return self._stat(0)

    @property
    def std(self) -> float | None:
        return self._stat(1)

    @property
    def min(self) -> float | None:
        return self._stat(2)

    @property
    def max(self) -> float | None:
        return self._stat(3)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def lines(self) -> list[str] | None:
        """The tensor as torch printed it, when the file holds printed values."""
        return self.value if isinstance(self.value, list) else None

    @property
    def ref(self) -> str | None:
        """The relative safetensors reference, when the file holds one."""
        return self.value if isinstance(self.value, str) else None

    @property
    def path(self) -> Path | None:
        """Where the safetensors file of this tensor lives, if it has one (always inside ``base_dir``)."""
        location = self.location
        return Path(location) if location is not None else None

    @property
    def location(self) -> str | None:
        """``path`` as a string (found once: a comparison asks for tens of thousands of them)."""
        ref = self.value if isinstance(self.value, str) else None
        known = self._path
        if known is not None and known[0] == ref and known[1] is self.base_dir:
            return known[2]
        location = None
        if ref is not None and reference_problem(ref) is None:
            location = os.path.join(str(self.base_dir) if self.base_dir is not None else ".", ref[2:])
        self._path = (ref, self.base_dir, location)
        return location

    @property
    def nonfinite(self) -> bool:
        """True when the tensor holds a NaN or an infinity (by its min/max, else its stats, or its printed values).

        A mean or std that overflowed while min and max are finite (a mask filled with the
        dtype's lowest value) is not a NaN/inf in the data.
        """
        if self.min is not None and self.max is not None:
            if not (math.isfinite(self.min) and math.isfinite(self.max)):
                return True
        else:
            for number in (self.mean, self.min, self.max):
                if number is not None and not math.isfinite(number):
                    return True
            if self.std is not None and not math.isfinite(self.std) and self.numel > 1:
                return True
        lines = self.lines
        if lines:
            return any(_NONFINITE_TOKEN.search(line) for line in lines)
        return self._file_nonfinite()[0]

    @property
    def has_nan(self) -> bool:
        """True when the stats or the printed values show a NaN (min and max propagate NaN)."""
        if (self.min is not None and math.isnan(self.min)) or (self.max is not None and math.isnan(self.max)):
            return True
        lines = self.lines
        if lines:
            return any(_NAN_TOKEN.search(line) for line in lines)
        return self._file_nonfinite()[1]

    def _file_nonfinite(self) -> tuple[bool, bool]:
        """``(a NaN or inf, a NaN)`` read from the tensor's file, for a float tensor whose record has no stats
        (the format writes none for float64 and complex); ``(False, False)`` otherwise, or when the file cannot
        be read (loading it names why). Read once."""
        if self._in_file is not None:
            return self._in_file
        found = (False, False)
        if self.ref is not None and not self.stats and dtype_kind(self.dtype) in ("float", "complex"):
            try:
                values = self.load()
            except TraceFormatError:
                values = None
            if values is not None and values.numel():
                import torch

                found = (not bool(torch.isfinite(values).all()), bool(torch.isnan(values).any()))
        self._in_file = found
        return found

    def load(self) -> torch.Tensor:
        """Read the full tensor from its safetensors file (only when the trace has one).

        The file must be a regular file beside the trace: a link is not followed.
        """
        return load_tensor(self._checked_path())

    def _checked_path(self) -> Path:
        where = self.base_dir or "."
        if self.ref is None:
            raise TraceFormatError(
                where, "this tensor has no safetensors file (trace recorded with use_repr=True or a SUMMARY file)"
            )
        problem = reference_problem(self.ref)
        if problem is not None:
            raise TraceFormatError(where, problem)
        path = self.path
        assert path is not None
        if os.path.islink(path):
            raise TraceFormatError(path, "is a link; a trace's tensor files must be plain files beside it")
        return path

    def to_dict(self) -> dict[str, Any]:
        """The tensor record exactly as the file format writes it."""
        out: dict[str, Any] = {"shape": f"torch.Size({list(self.shape)})", "dtype": self.dtype}
        if self._has_value:
            out["value"] = self.value
        for name in STAT_NAMES:
            if name in self.stats:
                out[name] = self.stats[name]
        return out

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TensorValue):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        stats = "" if self.mean is None else f" mean={self.mean:.4g} std={self.std:.4g}"
        return f"TensorValue({list(self.shape)}, {self.dtype.replace('torch.', '')}{stats})"
