"""Reading trace files: find the JSON file of a folder, parse it, build the Trace.

Every read problem becomes a TraceFormatError that names the file and the place.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import TraceFormatError
from .ranks import join_ranks, rank_folders, rank_path
from .run import restore_durations
from .collector import collector_paused
from .json_text import parse_json
from .sidecar import read_sidecar
from .trace import Trace

FULL_SUFFIX = "_debug_tree_FULL_TENSORS.json"
SUMMARY_SUFFIX = "_debug_tree_SUMMARY.json"


def find_trace_file(path: str | os.PathLike) -> Path:
    """The JSON file to read for ``path``: the file itself, or the FULL (else SUMMARY) file in a folder."""
    target = Path(path)
    if not target.exists():
        raise TraceFormatError(target, "no such file or folder")
    if target.is_file():
        return target
    names = _trace_files(target)
    for suffix in (FULL_SUFFIX, SUMMARY_SUFFIX):
        found = [target / name for name in names if name.endswith(suffix)]
        links = [p for p in found if p.is_symlink()]
        if links:
            raise TraceFormatError(links[0], "is a link; a trace folder's files must be plain files in it")
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            names = ", ".join(p.name for p in found)
            raise TraceFormatError(target, f"holds traces of several models ({names}); pass one file")
    raise TraceFormatError(target, f"holds no *{FULL_SUFFIX} or *{SUMMARY_SUFFIX} file")


def _trace_files(folder: Path) -> list[str]:
    """The names of the FULL and SUMMARY files in ``folder``, sorted (not hidden ones, as a glob finds them).
    One listing tested in C: a trace folder may hold 10^5 tensor files."""
    return sorted(n for n in os.listdir(folder) if n.endswith((FULL_SUFFIX, SUMMARY_SUFFIX)) and n[0] != ".")


def load_trace(path: str | os.PathLike | Trace, rank: int | None = None) -> Trace:
    """Read a FULL or SUMMARY trace file, or the folder that holds them.

    Safetensors references resolve lazily (``TensorValue.load()``), relative to
    the file's folder. Anything malformed raises TraceFormatError naming the file.
    A folder of ``rank_<r>/`` folders (``nbtrace.trace(..., ranks="all")``) loads as
    its lowest rank's Trace with every rank in ``.ranks``; ``rank=r`` loads rank r's alone.
    """
    if isinstance(path, Trace):
        if rank is None:
            return path
        if rank not in path.ranks:
            raise ValueError(f"rank {rank} is not among the ranks of {path!r}: {sorted(path.ranks)}")
        return path.ranks[rank]
    if rank is not None:
        return load_trace(rank_path(path, rank))
    folders = rank_folders(path)
    if folders:
        if _trace_files(Path(path)):
            raise TraceFormatError(path, "holds a trace and rank_<r> folders; pass rank=r, or the trace file")
        return join_ranks(Path(path), {r: load_trace(folder) for r, folder in folders.items()})
    file = find_trace_file(path)
    try:
        text = file.read_bytes()
    except OSError as exc:
        raise TraceFormatError(file, f"cannot be read: {exc.strerror or exc}") from exc
    if not text.strip():
        raise TraceFormatError(file, "is empty")
    with collector_paused():
        try:
            tree = parse_json(text)
        except RecursionError:
            raise TraceFormatError(file, "nests too deeply to be a trace") from None
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, over-long integers
            raise TraceFormatError(file, f"is not valid JSON (truncated or corrupted?): {exc}") from None
        if not isinstance(tree, dict):
            raise TraceFormatError(file, f"must hold a JSON object at the top, found {type(tree).__name__}")
        kind = "summary" if file.name.endswith(SUMMARY_SUFFIX) else "full"
        trace = Trace.from_tree(tree, kind=kind, source=file, base_dir=file.parent.resolve())
        trace.sidecar = read_sidecar(file)
    restore_durations(trace)
    return trace
