"""Every forward a trace folder holds, in order: ``load_traces`` and the files behind it.

``nbtrace.trace`` writes each top-level forward where transformers would (``debug_path``)
and, when the next one starts, moves it into ``debug_path/forward_<i>/``. A finished run
of ``n`` forwards (``generate``: the prefill, then one-token steps) is therefore::

    debug_path/forward_0/ … forward_<n-2>/    forwards 0 … n-2
    debug_path/<Class>_debug_tree_*.json       forward n-1, the last

Each forward of a run carries the run's id and its index in its sidecar (``run.py``), so
files of another run (an earlier, longer one whose ``forward_<i>/`` were left behind, or a
folder copied in) are refused with a TraceFormatError instead of being read as steps.

A folder of ``rank_<r>/`` folders (``nbtrace.trace(..., ranks="all")``) holds such a layout per
rank; its forward ``i`` is every rank's forward ``i``, joined as ``load_trace`` joins ranks.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from ..errors import TraceFormatError
from .load import FULL_SUFFIX, SUMMARY_SUFFIX, find_trace_file, load_trace
from .ranks import join_ranks, rank_folders, rank_path
from .run import run_identity
from .sidecar import read_sidecar
from .trace import Trace

FORWARD_DIR = re.compile(r"^forward_(\d+)$")


def forward_folders(folder: Path) -> dict[int, Path]:
    """The ``forward_<i>/`` folders directly in ``folder``, by index (one listing, the cheap test first: a trace
    folder may hold 10^5 tensor files)."""
    found: dict[int, Path] = {}
    for name in os.listdir(folder):
        if name.startswith("forward_") and (match := FORWARD_DIR.match(name)):
            child = folder / name
            if child.is_dir() and not child.is_symlink():
                found[int(match.group(1))] = child
    return found


def _class_and_suffix(file: Path) -> tuple[str, str]:
    for suffix in (FULL_SUFFIX, SUMMARY_SUFFIX):
        if file.name.endswith(suffix):
            return file.name[: -len(suffix)], suffix
    raise TraceFormatError(file, f"is not a *{FULL_SUFFIX} or *{SUMMARY_SUFFIX} file")


def forward_files(path: str | os.PathLike) -> list[Path]:
    """The trace file of every forward that ``path`` holds, in order; the folder's own file is the last.

    ``path`` is a trace folder or its FULL or SUMMARY file (then that model's files of that
    kind are used). A folder without ``forward_<i>/`` holds one forward. Raises
    TraceFormatError when the ``forward_<i>/`` folders have a gap, one lacks the model's
    file, or the forwards do not all come from one run.
    """
    return [file for file, _ in forwards_with_sidecars(path)]


def forwards_with_sidecars(path: str | os.PathLike) -> list[tuple[Path, dict]]:
    """``forward_files(path)``, each with its sidecar sections (read once, for the checks and for the caller)."""
    last = find_trace_file(path)
    folder = last.parent
    class_name, suffix = _class_and_suffix(last)
    numbered = {
        index: child
        for index, child in forward_folders(folder).items()
        if any(child.glob(f"{glob_escape(class_name)}_debug_tree_*.json"))
    }
    files: list[Path] = []
    for index in range(len(numbered)):
        child = numbered.get(index)
        if child is None:
            missing = sorted(set(range(max(numbered) + 1)) - set(numbered))
            raise TraceFormatError(
                folder, f"holds forward_<i>/ folders with a gap: {', '.join(f'forward_{m}' for m in missing[:5])} "
                f"missing (of forward_0 … forward_{max(numbered)})"
            )
        file = child / f"{class_name}{suffix}"
        if not file.is_file():
            other = FULL_SUFFIX if suffix == SUMMARY_SUFFIX else SUMMARY_SUFFIX
            file = child / f"{class_name}{other}"
        if not file.is_file() or file.is_symlink():
            raise TraceFormatError(child, f"holds no {class_name}{suffix} file (forward {index} of the run)")
        files.append(file)
    files.append(last)
    sidecars = [read_sidecar(file) for file in files]
    _check_one_run(files, sidecars)
    return list(zip(files, sidecars))


def _check_one_run(files: list[Path], sidecars: list[dict]) -> None:
    """Every forward names the same run and its own position in it (or, written before runs were named, none does)."""
    if len(files) < 2:
        return
    identities = [run_identity(sidecar) for sidecar in sidecars]
    if all(identity is None for identity in identities):
        return
    expected = next(identity[0] for identity in identities if identity is not None)
    for position, (file, identity) in enumerate(zip(files, identities)):
        if identity is None:
            problem = "has no run id in its sidecar while the other forwards have one"
        elif identity[0] != expected:
            problem = f"belongs to another run ({identity[0][:8]}…, not {expected[:8]}…)"
        elif identity[1] != position:
            problem = f"is forward {identity[1]} of its run, but sits at position {position}"
        else:
            continue
        raise TraceFormatError(
            file,
            f"{problem}: the folder mixes the files of several runs (forward_<i>/ folders of an earlier run "
            "left behind or copied in?); trace again into an empty folder",
        )


def glob_escape(text: str) -> str:
    """``text`` with glob's special characters taken literally."""
    return re.sub(r"([\[\]*?])", r"[\1]", text)


class JoinedForwards(Sequence[Trace]):
    """The forwards of a folder of ``rank_<r>/`` folders: forward ``i`` is every rank's forward ``i``, joined."""

    def __init__(self, folder: Path, per_rank: dict[int, list[Path]]) -> None:
        self.folder = folder
        self.per_rank = per_rank
        self._count = len(next(iter(per_rank.values())))

    def __len__(self) -> int:
        return self._count

    def sources(self) -> list[Path]:
        """The lowest rank's trace file of each forward (its sidecar holds the step's facts)."""
        return next(iter(self.per_rank.values()))

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(f"forward {index} is out of range: {self.folder} holds {self._count}")
        index %= self._count
        return join_ranks(self.folder, {rank: load_trace(files[index]) for rank, files in self.per_rank.items()})


def forward_sources(path: str | os.PathLike, rank: int | None = None) -> Sequence[Path | Trace]:
    """The forwards ``path`` holds, in order, each a trace file (or, for a folder of ``rank_<r>/`` folders,
    a Trace joined from the ranks when it is read); ``rank`` picks one rank's folder."""
    if rank is not None:
        return forward_files(rank_path(path, rank))
    ranks = rank_folders(path)
    if not ranks:
        return forward_files(path)
    per_rank = {r: forward_files(folder) for r, folder in ranks.items()}
    counts = {r: len(files) for r, files in per_rank.items()}
    if len(set(counts.values())) > 1:
        held = ", ".join(f"rank {r}: {n}" for r, n in counts.items())
        raise TraceFormatError(path, f"its ranks hold different numbers of forwards ({held})")
    return JoinedForwards(Path(path), per_rank)


def load_traces(path: str | os.PathLike, rank: int | None = None) -> list[Trace]:
    """Every forward a trace folder holds, in order: ``forward_0/``, …, then the folder's own (the last).

    ``path`` is a folder, or its FULL or SUMMARY file. For a folder written by one forward,
    a list of one Trace. ``load_trace(path)`` reads the last one only. A folder of
    ``rank_<r>/`` folders gives each forward joined from every rank (``rank=r``: rank r's
    alone). Raises TraceFormatError for the folders ``forward_files`` refuses and for broken files.
    """
    return [item if isinstance(item, Trace) else load_trace(item) for item in forward_sources(path, rank)]


def holds_several_forwards(path: str | os.PathLike, rank: int | None = None) -> bool:
    """True when ``path`` (a folder or its trace file; a rank's folder with ``rank``) holds ``forward_<i>/``
    folders of its model."""
    target = Path(path)
    ranks = rank_folders(target)
    if rank is not None or ranks:
        if rank is None:
            rank = next(iter(ranks))
        try:
            target = rank_path(target, rank)
        except (TraceFormatError, ValueError):
            return False
    folder = target if target.is_dir() else target.parent
    if not folder.is_dir():
        return False
    try:
        class_name, _ = _class_and_suffix(find_trace_file(target))
    except TraceFormatError:
        return False
    pattern = f"{glob_escape(class_name)}_debug_tree_*.json"
    return any(any(child.glob(pattern)) for child in forward_folders(folder).values())
