"""Traces of several ranks: ``rank_<r>/`` folders, and the ``distributed`` section of the sidecar.

``nbtrace.trace(model, path, ranks="all")`` under torch.distributed makes each rank write its own
trace into ``path/rank_<r>/``, with a sidecar whose ``distributed`` section says which rank wrote it,
the world size, which ranks recorded, and how every recorded DTensor was laid out (docs/format.md).
Here that section is read and checked (``DistributedInfo``), and the rank folders of one run are
joined into one Trace (``join_ranks``) after checking they belong together.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TraceFormatError
from .sidecar import sidecar_path
from .trace import Trace

SECTION = "distributed"
_RANK_FOLDER = re.compile(r"^rank_(\d+)$")


def rank_folder_name(rank: int) -> str:
    """The folder a rank writes into under ``debug_path``: ``rank_<r>``."""
    return f"rank_{rank}"


def call_key(module_path: str, call_index: int) -> str:
    """How the sidecar names a call: its module path, ``<path>@<n>`` for its n-th call (n >= 2)."""
    return module_path if call_index == 0 else f"{module_path}@{call_index + 1}"


def rank_folders(path: str | Path) -> dict[int, Path]:
    """The ``rank_<r>`` folders directly inside ``path``, by rank; empty when it holds none."""
    folder = Path(path)
    if not folder.is_dir():
        return {}
    found = {}
    for name in os.listdir(folder):  # a trace folder may hold 10^5 files: the cheap test first
        if name.startswith("rank_") and (match := _RANK_FOLDER.match(name)) and (folder / name).is_dir():
            found[int(match.group(1))] = folder / name
    return dict(sorted(found.items()))


def rank_path(path: str | Path, rank: int) -> Path:
    """The folder of ``rank`` inside ``path``; a TraceFormatError naming what is there otherwise."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"rank must be a rank number (an int >= 0), got {rank!r}")
    folders = rank_folders(path)
    if rank in folders:
        return folders[rank]
    if not folders:
        raise TraceFormatError(path, f"holds no rank_<r> folders, so there is no rank {rank} to load "
                                     "(they are written by nbtrace.trace(..., ranks='all'))")
    held = ", ".join(str(r) for r in folders)
    raise TraceFormatError(Path(path) / rank_folder_name(rank), f"no such rank folder; the folder holds ranks {held}")


# -- the distributed section -----------------------------------------------------------------
@dataclass(frozen=True)
class Mesh:
    """A device mesh: its shape, its rank ids in row-major order, and its dimension names."""

    shape: tuple[int, ...]
    ranks: tuple[int, ...]
    dim_names: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Layout:
    """How one recorded DTensor was laid out: placements (one per mesh dimension, as text such as
    ``Shard(2)``, ``Replicate()``, ``Partial(sum)``), its mesh, this rank's coordinate in the mesh
    (None when the rank is not in it) and the global shape."""

    placements: tuple[str, ...]
    mesh: Mesh
    coord: tuple[int, ...] | None
    global_shape: tuple[int, ...]


@dataclass(frozen=True)
class DistributedInfo:
    """The ``distributed`` section of one rank's sidecar, checked."""

    rank: int
    world_size: int
    recorded: tuple[int, ...]
    layouts: dict[str, dict[str, Layout]]

    def layout(self, module_path: str, call_index: int, place: str) -> Layout | None:
        """The layout of the DTensor recorded at ``place`` of a call, None for a plain tensor."""
        return self.layouts.get(call_key(module_path, call_index), {}).get(place)


def distributed_info(trace: Trace) -> DistributedInfo | None:
    """The checked ``distributed`` section of a trace's sidecar, None when it has none."""
    section = trace.sidecar.get(SECTION)
    if section is None:
        return None
    where = sidecar_path(trace.source) if trace.source is not None else "<recorded trace>"
    try:
        return _parse(section)
    except _Bad as bad:
        raise TraceFormatError(where, f"bad '{SECTION}' section: {bad}") from None


class _Bad(ValueError):
    pass


def _int(value: Any, what: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _Bad(f"{what} must be an integer >= {low}, got {value!r}")
    return value


def _ints(value: Any, what: str, low: int = 0) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise _Bad(f"{what} must be a list of integers, got {value!r:.60}")
    return tuple(_int(item, what, low) for item in value)


def _parse(section: dict[str, Any]) -> DistributedInfo:
    world = _int(section.get("world_size"), "world_size", 1)
    rank = _int(section.get("rank"), "rank")
    if rank >= world:
        raise _Bad(f"rank {rank} is not below world_size {world}")
    recorded = _ints(section.get("recorded_ranks"), "recorded_ranks")
    if not recorded or rank not in recorded or any(r >= world for r in recorded):
        raise _Bad(f"recorded_ranks {list(recorded)} must hold rank {rank} and ranks below {world} only")
    meshes = [_mesh(m, i, world) for i, m in enumerate(_list(section.get("meshes", []), "meshes"))]
    tensors = section.get("tensors", {})
    if not isinstance(tensors, dict):
        raise _Bad("'tensors' must be an object")
    layouts: dict[str, dict[str, Layout]] = {}
    for call, places in tensors.items():
        if not isinstance(places, dict):
            raise _Bad(f"tensors[{call!r}] must be an object")
        layouts[call] = {place: _layout(entry, meshes, f"{call} {place}") for place, entry in places.items()}
    return DistributedInfo(rank, world, tuple(sorted(set(recorded))), layouts)


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise _Bad(f"'{what}' must be a list")
    return value


def _mesh(raw: Any, index: int, world: int) -> Mesh:
    if not isinstance(raw, dict):
        raise _Bad(f"meshes[{index}] must be an object")
    shape = _ints(raw.get("shape"), f"meshes[{index}].shape", 1)
    ranks = _ints(raw.get("ranks"), f"meshes[{index}].ranks")
    if not shape or len(ranks) != math.prod(shape) or len(set(ranks)) != len(ranks) or max(ranks) >= world:
        raise _Bad(f"meshes[{index}]: {len(ranks)} distinct ranks below {world} must fill the shape {list(shape)}")
    names = raw.get("dim_names")
    if names is not None and (not isinstance(names, list) or len(names) != len(shape)
                              or not all(isinstance(n, str) for n in names)):
        raise _Bad(f"meshes[{index}].dim_names must be null or one name per mesh dimension")
    return Mesh(shape, ranks, tuple(names) if names is not None else None)


def _layout(raw: Any, meshes: list[Mesh], where: str) -> Layout:
    if not isinstance(raw, dict):
        raise _Bad(f"{where}: a layout must be an object")
    index = _int(raw.get("mesh"), f"{where}: mesh")
    if index >= len(meshes):
        raise _Bad(f"{where}: mesh {index} is not in 'meshes'")
    mesh = meshes[index]
    placements = raw.get("placements")
    if not isinstance(placements, list) or len(placements) != len(mesh.shape) or not all(
        isinstance(p, str) for p in placements
    ):
        raise _Bad(f"{where}: 'placements' must hold one string per mesh dimension ({len(mesh.shape)})")
    coord = raw.get("coord")
    if coord is not None:
        coord = _ints(coord, f"{where}: coord")
        if len(coord) != len(mesh.shape) or any(c >= s for c, s in zip(coord, mesh.shape)):
            raise _Bad(f"{where}: coord {list(coord)} is not in a mesh of shape {list(mesh.shape)}")
    return Layout(tuple(placements), mesh, coord, _ints(raw.get("global_shape"), f"{where}: global_shape"))


# -- joining the rank folders of one run -----------------------------------------------------------
def join_ranks(folder: Path, traces: dict[int, Trace]) -> Trace:
    """The lowest rank's Trace, with ``.ranks`` holding every rank's Trace, after checking they belong together.

    Each rank folder must say (in its sidecar) that it is that rank, all must share the world size and
    the list of recorded ranks, every recorded rank must have its folder, and all must have recorded the
    same call tree with DTensors in the same places. Anything else is a TraceFormatError naming the folder.
    """
    infos: dict[int, DistributedInfo] = {}
    for rank, trace in traces.items():
        where = folder / rank_folder_name(rank)
        info = distributed_info(trace)
        if info is None:
            raise TraceFormatError(where, "has no 'distributed' section in its sidecar, so nothing says which rank "
                                          "wrote it (rank folders are written by nbtrace.trace(..., ranks='all'))")
        if info.rank != rank:
            raise TraceFormatError(where, f"holds the trace of rank {info.rank}, not of rank {rank}")
        infos[rank] = info
    first = min(traces)
    base = infos[first]
    for rank, info in infos.items():
        where = folder / rank_folder_name(rank)
        if info.world_size != base.world_size:
            raise TraceFormatError(where, f"was recorded with world size {info.world_size}, "
                                          f"{rank_folder_name(first)} with {base.world_size}: mixed runs")
        if info.recorded != base.recorded:
            raise TraceFormatError(where, f"says ranks {list(info.recorded)} recorded, "
                                          f"{rank_folder_name(first)} says {list(base.recorded)}: mixed runs")
    missing = [r for r in base.recorded if r not in traces]
    if missing:
        raise TraceFormatError(folder / rank_folder_name(missing[0]), f"is missing: the run recorded ranks "
                                                                      f"{', '.join(map(str, base.recorded))}")
    extra = [r for r in traces if r not in base.recorded]
    if extra:
        raise TraceFormatError(folder / rank_folder_name(extra[0]), f"is not one of the ranks the run recorded "
                                                                    f"({', '.join(map(str, base.recorded))})")
    for rank, trace in traces.items():
        if rank != first:
            _same_calls(folder, first, traces[first], infos[first], rank, trace, infos[rank])
    joined = traces[first]
    joined.ranks = dict(traces)
    return joined


def _same_calls(folder: Path, first: int, a: Trace, info_a: DistributedInfo, rank: int, b: Trace,
                info_b: DistributedInfo) -> None:
    where = folder / rank_folder_name(rank)
    if a.kind != b.kind:
        raise TraceFormatError(where, f"holds a {b.kind.upper()} trace, {rank_folder_name(first)} a {a.kind.upper()}")
    nodes_a, nodes_b = a.nodes(), b.nodes()
    for i, (x, y) in enumerate(zip(nodes_a, nodes_b)):
        if x.module_path != y.module_path or x.depth != y.depth:
            raise TraceFormatError(where, f"its call tree differs from {rank_folder_name(first)}'s at call {i}: "
                                          f"{y.module_path!r} (depth {y.depth}) where rank {first} has "
                                          f"{x.module_path!r} (depth {x.depth})")
    if len(nodes_a) != len(nodes_b):
        raise TraceFormatError(where, f"recorded {len(nodes_b)} calls, {rank_folder_name(first)} {len(nodes_a)}: "
                                      "their call trees differ")
    for call in set(info_a.layouts) | set(info_b.layouts):
        places_a, places_b = info_a.layouts.get(call, {}), info_b.layouts.get(call, {})
        for place in set(places_a) | set(places_b):
            x, y = places_a.get(place), places_b.get(place)
            if x is None or y is None or (x.placements, x.global_shape) != (y.placements, y.global_shape):
                def show(lay: Layout | None) -> str:
                    return "a plain tensor" if lay is None else f"{','.join(lay.placements)} {list(lay.global_shape)}"
                raise TraceFormatError(where, f"{call} {place} is {show(y)} here but {show(x)} on rank {first}")
