"""The folder a trace is written into: made if needed, proved writable, cleared of a dead writer's leftovers."""

from __future__ import annotations

import os
from pathlib import Path

from .write import remove_stale_temp_files


def _unusable(debug_path: str | os.PathLike | None, problem: str) -> ValueError:
    """The ValueError for a ``debug_path`` that cannot hold a trace, with ``.problem``: why, without the path."""
    error = ValueError(f"debug_path={str(debug_path)!r} {problem}")
    error.problem = problem  # type: ignore[attr-defined]
    return error


def prepare_debug_dir(debug_path: str | os.PathLike | None) -> Path:
    """Create ``debug_path`` if needed and prove it is writable; a clear ValueError otherwise (its
    ``problem``: why, without the path)."""
    target = Path(debug_path) if debug_path else Path(".")
    created = False
    try:
        if not target.is_dir():
            target.mkdir(parents=True)
            created = True
    except FileExistsError:
        pass
    except OSError as exc:
        raise _unusable(debug_path, f"cannot be used as a folder: {exc.strerror or exc}") from exc
    if not target.is_dir():
        raise _unusable(debug_path, "is not a folder")
    if created:  # a folder of our own, empty: its permissions say whether it is writable
        if not os.access(target, os.W_OK | os.X_OK):
            raise _unusable(debug_path, "is not writable: Permission denied")
        return target.resolve()
    probe = target / f".nbtrace-write-check-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise _unusable(debug_path, f"is not writable: {exc.strerror or exc}") from exc
    remove_stale_temp_files(target)
    return target.resolve()
