"""The host's memory, torch-free: how much is available, what a float64 twin on the CPU may take (``budget.py``; the JAX
capture's ``nbtrace/jax/twin.py``), and giving the freed part of the heap back (``stream.py``)."""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Callable

SHARE = 0.5  # of the free memory a float64 copy of the model may take


def available_host_memory() -> int | None:
    """Bytes the host can still give (``MemAvailable``); None when it cannot be told."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _glibc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None on another C library, or where it cannot be loaded)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


_TRIM = _glibc_trim()


def resident_bytes() -> int | None:
    """This process's resident memory now (``/proc/self/statm``); None where it cannot be told. Read through one
    descriptor kept per process (about 1.5 us where opening the file each time took 13-35: the streamed twin asks
    at every module's call)."""
    try:
        return int(os.pread(_statm(), 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


_STATM: list[int] = []  # [process id, descriptor]


def _statm() -> int:
    """The descriptor of this process's ``/proc/self/statm``, opened once per process (a forked child opens its own:
    the parent's would read the parent)."""
    if not _STATM or _STATM[0] != os.getpid():
        _STATM[:] = [os.getpid(), os.open("/proc/self/statm", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))]
    return _STATM[1]


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class HeapTrim:
    """Give the pages of the host heap's free chunks back to the system (glibc's ``malloc_trim(0)``; nothing on
    another C library) whenever the resident memory grew by more than ``slack`` bytes since the last time: an
    action, no setting changed. The float64 twin's activations are freed in the heap's middle, where glibc's
    ``free`` never returns them, and small tensors kept (fingerprints, a KV cache) are placed between them: without
    this the heap's resident size grows, module after module, by what it could not reuse (the twin of a 12-layer
    Llama at 128 tokens added 0.5 to 1.4 times the model's bytes to a plain forward's peak; with it, 0.3 to 0.4)."""

    def __init__(self, slack: int) -> None:
        self.slack = slack
        self.mark = resident_bytes() if _TRIM is not None else None

    def __call__(self, always: bool = False) -> None:
        """Trim where the resident memory grew by more than ``slack`` (``always``: by anything) since the last time."""
        if self.mark is None:
            return
        now = resident_bytes()
        if now is not None and now > self.mark + (0 if always else self.slack):
            _TRIM(0)
            self.mark = resident_bytes() or now
