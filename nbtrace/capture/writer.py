"""Writing a forward's safetensors files, in a background thread while the forward goes on.

A file's data is in host memory when it is handed over (``transfer.to_host_many``
copied it from its device, one transfer per record); a writer thread then encodes
it and writes it to a temporary file that is moved into place (``os.replace``), so
a file appears whole or not at all. The forward only waits when the data still
queued would pass ``QUEUE_BYTES``: memory stays bounded by that much on top of what
is being written.

A tensor that lives in host memory already is the model's own tensor, which the
model may change after it was recorded: it is written at once, in the calling
thread (no copy), as are the files of a writer made with ``background=False``.

A write that fails (a full disk) is never a silent loss: the writer stops, and the
error, naming the folder and how much the files needed, is raised at the next file
handed over or at ``flush`` (the end of the forward) at the latest.
"""

from __future__ import annotations

import errno
import os
import queue
import re
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

from ..core.tensor import is_tensor_record

QUEUE_BYTES = 256 * 2**20  # data waiting for the writer thread, at most (one larger file waits alone)
_OS_ERROR = re.compile(r"os error (\d+)")
BACKGROUND_ON_CPU = False  # tensors in host memory: written at once (tests set True to run the thread on a CPU)


def size_text(size: int) -> str:
    """A byte count for a person: ``3.2 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


class FileWriter:
    """Runs write jobs of one folder in order: in a thread (``background``), or at once."""

    def __init__(self, folder: str, background: bool = True) -> None:
        self.folder = folder
        self.background = background
        self.written_bytes = 0
        self.failed: set[str] = set()  # file names whose data never reached the disk
        self._error: Exception | None = None
        self._queued = 0
        self._cond = threading.Condition()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, file_name: str, data: torch.Tensor, write: Callable[[torch.Tensor], int], private: bool) -> None:
        """Write ``file_name`` with ``write(data)`` (it returns the bytes it wrote); raises an earlier failure first.

        ``private``: ``data`` is a host copy that no one changes (copied from a device): the thread may write it.
        """
        self._raise_failure()
        size = data.numel() * data.element_size()
        if not self.background or not (private or BACKGROUND_ON_CPU):
            self._run(file_name, size, write, data)
            self._raise_failure()
            return
        if not private:  # the model's own tensor in host memory (tests only): a copy, as a device's data is
            data = data.clone()
        with self._cond:
            while self._queued and self._queued + size > QUEUE_BYTES and self._error is None:
                self._cond.wait()
            self._queued += size
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="nbtrace-writer", daemon=True)
            self._thread.start()
        self._jobs.put((file_name, size, write, data))

    def flush(self) -> None:
        """Wait until every file handed over is written; raise the first failure, if any."""
        self.wait()
        self._raise_failure()

    def wait(self) -> None:
        """Wait until every file handed over is written or given up (``failed``)."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            file_name, size, write, data = job
            try:
                self._run(file_name, size, write, data)
            finally:
                del job, data
                with self._cond:
                    self._queued -= size
                    self._cond.notify_all()

    def _run(self, file_name: str, size: int, write: Callable[[torch.Tensor], int], data: torch.Tensor) -> None:
        if self._error is not None:  # the disk failed already: the rest is not written either
            self.failed.add(file_name)
            self._needed += size
            return
        try:
            self.written_bytes += write(data)
        except Exception as exc:  # noqa: BLE001 - in the thread nothing else would see it: raised later
            self.failed.add(file_name)
            self._needed = size
            self._error = exc
            self._first = file_name

    _needed = 0
    _first = ""

    def _raise_failure(self) -> None:
        exc = self._error
        if exc is None:
            return
        reason = (exc.strerror if isinstance(exc, OSError) else None) or f"{type(exc).__name__}: {exc}"
        message = (
            f"nbtrace could not write {self._first} into {self.folder}: {reason}. "
            f"The files of this forward needed at least {size_text(self._needed)} more "
            f"({size_text(self.written_bytes)} were written). The trace keeps what was written, "
            "marked with this error where the folder can still hold it; free some space or trace into another folder."
        )
        code = exc.errno if isinstance(exc, OSError) and exc.errno is not None else errno.EIO
        raise OSError(code, message) from exc


def write_file(data: torch.Tensor, tmp: str, target: str, ready: Callable[[], None] | None = None) -> int:
    """``data`` as a safetensors file at ``target``, through ``tmp``: whole or absent. Returns the data's bytes.

    ``ready``: waits until ``data`` has arrived (a copy from a device still in flight), or None.
    """
    from safetensors.torch import save_file

    if ready is not None:
        ready()
    try:
        try:
            save_file({"data": data}, tmp)
        except OSError:
            raise
        except Exception as exc:  # safetensors reports the disk's errors as its own error type: an OSError here
            code = _OS_ERROR.search(str(exc))
            if code is None:
                raise
            raise OSError(int(code.group(1)), os.strerror(int(code.group(1)))) from exc
        os.replace(tmp, target)
        return data.numel() * data.element_size()
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def link_file(source: str, tmp: str, target: str, data: torch.Tensor) -> int:
    """``target`` as a hard link to ``source`` (the same data) where the filesystem allows one, else written.

    Returns the bytes written (0 for a link)."""
    try:
        try:
            os.link(source, target)  # atomic by itself: the name appears with the whole file behind it
        except FileExistsError:  # an older file of that name: replace it in one step
            os.link(source, tmp)
            os.replace(tmp, target)
        return 0
    except OSError:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        return write_file(data, tmp, target)


def drop_refs(trees: Iterable[Any], refs: set[str]) -> None:
    """Set to None the ``value`` of every tensor record whose file reference is in ``refs`` (never written)."""
    stack: list[Any] = list(trees)
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if is_tensor_record(item):
                if item.get("value") in refs:
                    item["value"] = None
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
