"""Which ranks record under torch.distributed, where each writes, and the ``distributed`` sidecar section.

``nbtrace.trace(..., ranks=0)``, the default, is transformers' behaviour: rank 0 records into
``debug_path`` and the other ranks only run. An int ``r`` lets rank r do that instead. ``ranks="all"``
or a list of ranks: each listed rank records its own trace into ``debug_path/rank_<r>/``.

A recording rank under torch.distributed (or with rank folders) fills the ``distributed`` section of
its sidecar: its rank, the world size, which ranks record, and for every DTensor it recorded (by its
local shard, as the format does) the placements, the mesh and its coordinate in the mesh, so the
shards can be put back together (docs/format.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..core.node import leaf_places
from ..core.ranks import call_key, rank_folder_name
from ..core.tensor import is_tensor_record
from . import transfer

Ranks = int | str | list[int] | tuple[int, ...]


def _world() -> tuple[int, int, bool]:
    """This process's rank, the world size, and whether torch.distributed is initialized."""
    dist = torch.distributed
    if not dist.is_available() or not dist.is_initialized():
        return 0, 1, False
    return dist.get_rank(), dist.get_world_size(), True


@dataclass(frozen=True)
class RankPlan:
    """What ``ranks=`` means for this process: whether it records, and where."""

    rank: int
    world_size: int
    recorded: tuple[int, ...]
    rank_folders: bool
    distributed: bool

    @property
    def records(self) -> bool:
        return self.rank in self.recorded

    @property
    def describes(self) -> bool:
        """True when the trace gets a ``distributed`` sidecar section."""
        return self.records and (self.distributed or self.rank_folders)

    def debug_path(self, debug_path: str | Path | None) -> str | Path | None:
        """Where this rank writes: ``debug_path`` itself, or its ``rank_<r>/`` folder inside it."""
        if not self.rank_folders:
            return debug_path
        return Path(debug_path or ".") / rank_folder_name(self.rank)

    def section(self, tree: dict[str, Any], layouts: ShardLayouts) -> dict[str, Any]:
        """The ``distributed`` section for the written tree of one forward."""
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "recorded_ranks": list(self.recorded),
            "meshes": layouts.meshes,
            "tensors": layouts.by_call(tree),
        }


def plan_ranks(ranks: Ranks) -> RankPlan:
    """Check ``ranks`` against the world this process is in; a ValueError names what is wrong."""
    rank, world, initialized = _world()
    where = f"rank {rank} of {world}" if initialized else "rank 0 of 1 (torch.distributed is not initialized)"
    if isinstance(ranks, str):
        if ranks != "all":
            raise ValueError(f"ranks={ranks!r}: use an int, a list of ranks, or 'all'")
        return RankPlan(rank, world, tuple(range(world)), True, initialized)
    if isinstance(ranks, int) and not isinstance(ranks, bool):
        chosen: tuple[int, ...] = (ranks,)
        folders = False
    elif isinstance(ranks, (list, tuple, range)) and len(ranks) > 0:
        chosen = tuple(ranks)
        folders = True
    else:
        raise ValueError(f"ranks={ranks!r}: use an int, a non-empty list of ranks, or 'all'")
    for r in chosen:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < world:
            raise ValueError(f"ranks={ranks!r}: {r!r} is not a rank of this run; this process is {where}")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"ranks={ranks!r} names a rank twice")
    return RankPlan(rank, world, tuple(sorted(chosen)), folders, initialized)


def placement_text(placement: Any) -> str:
    """``Shard(2)``, ``Replicate()``, ``Partial(sum)``; other placements (``_StridedShard``…) by their repr."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    if type(placement) is Shard:
        return f"Shard({placement.dim})"
    if isinstance(placement, Replicate):
        return "Replicate()"
    if isinstance(placement, Partial):
        return f"Partial({placement.reduce_op})"
    return repr(placement)


class ShardLayouts:
    """The layout of every DTensor serialized in one forward, kept by the record it was written to.

    ``note`` is the Serializer's ``on_shard`` hook; ``by_call`` then finds the records in the tree as
    written (after pruning) and names them by call and place, as ``Trace`` will on loading.
    """

    def __init__(self) -> None:
        self.meshes: list[dict[str, Any]] = []
        self._mesh_index: dict[str, int] = {}
        self._entries: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._by_mesh: dict[int, tuple[Any, int]] = {}

    def note(self, record: dict[str, Any], value: Any) -> None:
        """Keep the layout of ``value`` when it is a DTensor (recorded by its local shard as ``record``)."""
        from torch.distributed.tensor import DTensor

        if not isinstance(value, DTensor):
            return
        mesh = value.device_mesh
        coord = mesh.get_coordinate()
        entry = {
            "placements": [placement_text(p) for p in value.placements],
            "mesh": self._mesh(mesh),
            "coord": list(coord) if coord is not None else None,
            "global_shape": list(value.shape),
        }
        self._entries[id(record)] = (record, entry)  # the record is kept alive, so its id stays its own

    def _mesh(self, mesh: Any) -> int:
        known = self._by_mesh.get(id(mesh))
        if known is not None and known[0] is mesh:
            return known[1]
        names = mesh.mesh_dim_names
        described = {
            "shape": list(mesh.mesh.shape),
            "ranks": [int(r) for r in transfer.values(mesh.mesh.flatten())],  # a host tensor: no copy
            "dim_names": list(names) if names else None,
        }
        key = json.dumps(described, sort_keys=True)
        if key not in self._mesh_index:
            self._mesh_index[key] = len(self.meshes)
            self.meshes.append(described)
        self._by_mesh[id(mesh)] = (mesh, self._mesh_index[key])  # the mesh kept alive, so its id stays its own
        return self._mesh_index[key]

    def by_call(self, tree: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
        """``{call: {place: layout}}`` for the records that made it into ``tree``, calls counted in call order."""
        found: dict[str, dict[str, dict[str, Any]]] = {}
        if not self._entries:
            return found
        calls: dict[str, int] = {}
        stack = [tree]
        while stack:
            node = stack.pop()
            path = node["module_path"]
            index = calls[path] = calls.get(path, -1) + 1
            for key, start in (("inputs", ""), ("outputs", "out")):
                value = node.get(key)
                if value is None:
                    continue
                for place, record in leaf_places(value, start, is_tensor_record):
                    kept = self._entries.get(id(record))
                    if kept is not None and kept[0] is record:
                        found.setdefault(call_key(path, index), {})[place] = kept[1]
            stack.extend(reversed(node.get("children", [])))
        return found
