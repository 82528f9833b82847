"""Reading one tensor file of a trace (safetensors, the tensor under ``data``).

``load_tensor`` gives a torch tensor. A comparison reads tens of thousands of small
files, where torch's per-tensor cost dominates, so ``open_plain_file`` and ``read_open_file``
read a file once (its bytes also give its fingerprint) and ``float64_values`` decodes those bytes
straight into a flat float64 numpy array, with the same values as
``load_tensor(path).to(torch.float64)``.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import TraceFormatError
from .json_text import parse_json

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # where there is none, a link is found by its status instead

#: safetensors dtype codes numpy holds exactly (bfloat16 is widened by hand; float8 and complex are not decoded)
_NUMPY = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
          "I8": "i1", "U8": "u1", "U16": "<u2", "U32": "<u4", "U64": "<u8", "BOOL": "?"}


def load_tensor(path: Path | None) -> torch.Tensor:
    """The tensor stored under ``data`` in a safetensors file written by a trace."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if path is None or not Path(path).is_file():
        raise TraceFormatError(path, "safetensors file referenced by the trace is missing")
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise TraceFormatError(path, f"is not a readable safetensors file: {exc}") from None
    if "data" not in tensors:
        raise TraceFormatError(path, "holds no 'data' tensor")
    return tensors["data"]


def open_plain_file(location: str) -> tuple[int, os.stat_result] | None:
    """``(descriptor, status)`` of the plain file at ``location``, opened for reading without following a link;
    None when it is no such file (missing, a link, a folder: ``TensorValue.load`` names why). The caller
    closes the descriptor."""
    try:
        fd = os.open(location, os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or (not _NOFOLLOW and os.path.islink(location)):
        os.close(fd)
        return None
    return fd, info


def read_open_file(fd: int, size: int) -> bytes:
    """The whole content of an open file of ``size`` bytes."""
    pieces = []
    while True:
        piece = os.read(fd, max(size, 1 << 16))
        if not piece:
            break
        pieces.append(piece)
        size -= len(piece)
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def tensor_from_bytes(data: bytes, path: str | Path | None) -> torch.Tensor:
    """The ``data`` tensor of a safetensors file's content, in its own memory."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        tensors = load(data)
    except (SafetensorError, ValueError) as exc:
        raise TraceFormatError(path, f"is not a readable safetensors file: {exc}") from None
    if "data" not in tensors:
        raise TraceFormatError(path, "holds no 'data' tensor")
    return tensors["data"]


def float64_values(data: bytes, path: str | Path | None) -> np.ndarray | None:
    """The ``data`` tensor of a safetensors file's content as a flat float64 array, or None for a dtype numpy
    does not hold exactly (float8, complex): the caller then goes through torch. A malformed file raises
    TraceFormatError naming ``path``."""
    import numpy as np

    dtype, count, start, end = _header(data, path)
    code = _NUMPY.get(dtype)
    if code is None:
        return None
    raw = np.frombuffer(data, dtype=code, count=count, offset=start) if count else np.zeros(0, dtype=code)
    if end - start != raw.nbytes:
        raise TraceFormatError(path, f"is not a readable safetensors file: {end - start} bytes for {count} {dtype}")
    if dtype == "BF16":  # the upper half of a float32: widening is exact
        raw = (raw.astype(np.uint32) << 16).view(np.float32)
    return raw.astype(np.float64)


def _header(data: bytes, path: str | Path | None) -> tuple[str, int, int, int]:
    """``(dtype code, element count, start, end)`` of the ``data`` tensor's bytes in ``data``."""
    def bad(why: str) -> TraceFormatError:
        return TraceFormatError(path, f"is not a readable safetensors file: {why}")

    if len(data) < 8:
        raise bad("shorter than its header")
    (size,) = struct.unpack_from("<Q", data)
    if size > len(data) - 8:
        raise bad("header longer than the file")
    try:
        header = parse_json(data[8 : 8 + size])
    except ValueError as exc:
        raise bad(f"header is not JSON ({exc})") from None
    entry = header.get("data") if isinstance(header, dict) else None
    if entry is None:
        raise TraceFormatError(path, "holds no 'data' tensor")
    try:
        dtype, shape, (begin, stop) = entry["dtype"], entry["shape"], entry["data_offsets"]
        count = 1
        for dim in shape:
            count *= int(dim)
        begin, stop = int(begin), int(stop)
    except (KeyError, TypeError, ValueError):
        raise bad("the 'data' entry needs dtype, shape and data_offsets") from None
    start, end = 8 + size + begin, 8 + size + stop
    if not 8 + size <= start <= end <= len(data) or count < 0:
        raise bad("data offsets outside the file")
    return str(dtype), count, start, end
