"""The float64 twin of a run of several ranks (``torchrun``): every rank runs its twin together, and each sharded
tensor is fingerprinted whole.

Under ``torch.distributed`` with more than one rank the twin of a forward is a collective: its float64 copy runs
the model's own forward, so its ``all_reduce`` and ``all_gather`` (a row-parallel projection's sum, a DTensor's
redistribution) get float64 tensors, which gloo and NCCL both reduce. So every rank runs it, recording or not,
with the same runs in the same order, or none does: ``"auto"`` is decided together (``decide_together``: a rank
whose copy does not fit, or whose inputs could not be copied, stops the twin on all ranks, and each says which
rank), never by one rank alone (it would leave the others waiting in a collective).

What a call's tensor is on one rank is a piece of the tensor the single-device original computes. ``RankTwin``
fingerprints each so that the recording rank's twin holds the whole's fingerprint (``placed.py``: a piece's share,
from the positions its elements hold in the whole; the shares of all ranks gathered once per run, 28 numbers a
piece, the layout sums' shares among them):

- a DTensor: its placements say where the piece sits (``Shard(d)`` blocks, uneven ones too; ``Replicate()``
  counted once, on the mesh's first coordinate; ``Partial`` made whole by its own redistribution first); the
  entry is the whole tensor's, by its global shape;
- a plain tensor the same on every rank (a norm's output, a residual after the all-reduce): its own fingerprint;
- a plain tensor that differs between ranks (a hand-split projection's piece; Megatron style): nothing says how
  it is laid out, so the twin keeps every reading that ``diff/ranks/reassemble.py`` would consider, each as a place
  ``<place>|<layout>``: ``Shard(d)`` (the ranks' equal pieces side by side along ``d``, in rank order),
  ``Partial(sum)`` (their sum; its ``rms`` an estimate from the sums) and ``rank<r>`` (rank r's own piece, a copy
  of a replicated tensor). A comparison picks the reading that fits the other side's shape and values
  (``diff/ranks/twin_shards.py``) and says so; one that fits none is left out and said.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .fingerprint import fingerprint
from .placed import placed_fingerprint
from .rank_guard import Guard, default_store
from .signs import AXIS_SUMS, KEPT, LEFT_OUT, SUMS, SUMSQ, WIDTH, axis_shape

if TYPE_CHECKING:  # pragma: no cover
    from .forward import TwinRun

#: the separator of a reading's place: ``out|Shard(2)``, ``out|Partial(sum)``, ``out|rank1``
MARK = "|"
#: the numbers one share carries between ranks: a fingerprint's, its layout sums (or zeros), the piece's size
ROW = WIDTH + AXIS_SUMS + 1
#: two ranks' fingerprints of a replicated tensor agree to float64's summation order at most this relative much
SAME = 1e-12


def several_ranks() -> bool:
    """True under an initialized ``torch.distributed`` with more than one rank."""
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _device() -> torch.device:
    """Where this process group's collectives take tensors (NCCL: the current GPU)."""
    dist = torch.distributed
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _gather(tensor: torch.Tensor) -> torch.Tensor:
    """Every rank's ``tensor`` (the same shape on each), stacked in rank order."""
    dist = torch.distributed
    tensor = tensor.to(_device()).contiguous()
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor)
    return torch.stack(parts)


#: the round of the last ``meet`` every rank came to: the same number on every rank of that block
_MET: list[int] = []
#: how long a rank waits at the start of ``nbtrace.trace`` for every other rank to start its own (seconds)
MEET_SECONDS = 60.0
_ROUND = "nbtrace/twin/round"


def meet(timeout: float | None = None) -> str | None:
    """Wait until every rank has started its ``nbtrace.trace`` block (None), or say why the twins cannot run
    together: a rank that traces alone (``if rank == 0: with nbtrace.trace(...)``) would otherwise wait forever in
    the first collective its twin calls. The ranks meet through the process group's store, with no collective, in
    rounds: the last rank to arrive, or the first to stop waiting (``MEET_SECONDS``), writes the round's verdict,
    every rank of the round reads it and opens the next, so a rank that once traced alone meets the others again
    at their next block."""
    import time

    dist = torch.distributed
    try:
        store = dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - no store to meet by: every rank is taken at its word (the documented use)
        return None
    timeout = MEET_SECONDS if timeout is None else timeout
    round_ = store.add(_ROUND, 0)
    verdict = f"{_ROUND}/{round_}/verdict"
    if store.add(f"{_ROUND}/{round_}/arrived", 1) == dist.get_world_size():
        store.compare_set(verdict, "", "together")
    deadline, pause = time.monotonic() + timeout, 0.002
    while not store.check([verdict]):
        if time.monotonic() > deadline:
            store.compare_set(verdict, "", "apart")
            break
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    together = store.get(verdict) == b"together"
    store.compare_set(_ROUND, str(round_), str(round_ + 1))  # the round is over: the first to read it opens the next
    if together:
        _MET[:] = [round_]  # the block's name among the ranks (``rank_guard.py``'s meetings)
        return None
    return (f"not every rank started nbtrace.trace within {timeout:g} s of the others, and a tensor-parallel model's "
            "float64 twin runs on every rank together (a rank that traces alone records without it)")


def decide_together(problem: str | None, what: str = "its float64 copy does not fit") -> str | None:
    """This rank's reason not to run the twin (None: it can), agreed with every rank: None only where no rank has
    one; otherwise this rank's own reason, or which ranks have one. A collective: every rank calls it."""
    flags = _gather(torch.tensor([0.0 if problem is None else 1.0], dtype=torch.float64))
    stopped = [r for r, flag in enumerate(flags.reshape(-1).tolist()) if flag]
    if not stopped or problem is not None:
        return problem
    return f"rank {', '.join(map(str, stopped))} could not run its twin ({what}), and the ranks run it together"


@dataclass
class _Piece:
    """One fingerprinted tensor of a run: its rows (this rank's shares) and where the whole's numbers go."""

    rows: list[torch.Tensor]
    numbers: torch.Tensor  # what the twin's collector keeps for the tensor (filled in for a DTensor)
    shape: tuple[int, ...]
    mesh: list[int] | None = None  # a DTensor's mesh ranks, whose shares add up; None: a plain tensor
    widths: list[int] = field(default_factory=list)  # how many numbers each row holds (layout sums or not)


class RankTwin:
    """One rank's part in the twins of several ranks (see the module docstring): ``fingerprint`` for the twin's
    collector, ``finish`` at the end of each run, on every rank in the same order."""

    def __init__(self) -> None:
        dist = torch.distributed
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self._pieces: list[_Piece] = []
        store = default_store() if _MET else None
        #: the meetings that keep the ranks' twins together where one fails (``rank_guard.py``), or None: no store
        self.guard = Guard(store, str(_MET[0]), self.rank, self.world) if store is not None else None
        self._spread: dict[tuple[str, str], bool] = {}  # plain tensors that differ between ranks, from the twin run
        #: (call, place) of the plain tensors that differ between ranks, in the last forward's twin
        self.read: list[tuple[str, str]] = []

    def describe(self) -> dict[str, Any]:
        """The twin section's ``ranks``: the world, this rank, and how many tensors were kept by their readings."""
        return {"world_size": self.world, "rank": self.rank, "read": len(self.read)}

    def fingerprint(self, value: torch.Tensor, valid: torch.Tensor | None, layout: bool = True) -> torch.Tensor:
        """The collector's fingerprint of ``value``; a DTensor's is the whole's once ``finish`` has run. ``layout``:
        the layout sums too (``fingerprint.py``), of the whole and of each reading, from the pieces' shares."""
        from torch.distributed.tensor import DTensor

        if isinstance(value, DTensor):
            return self._dtensor(value, valid, layout)
        numbers = fingerprint(value, valid, layout)
        shape = tuple(value.shape)
        rows = [_row(numbers, value.numel())]
        widths = [len(numbers)]
        for dim in range(value.dim()):  # the reading "Shard(dim)": this rank's piece at its place along dim
            whole = list(shape)
            whole[dim] *= self.world
            offset = [0] * len(shape)
            offset[dim] = self.rank * shape[dim]
            share = placed_fingerprint(value, whole, offset, valid, layout)
            rows.append(_row(share))
            widths.append(len(share))
        self._pieces.append(_Piece(rows, numbers, shape, widths=widths))
        return numbers

    def _dtensor(self, value: Any, valid: torch.Tensor | None, layout: bool) -> torch.Tensor:
        from torch.distributed.tensor import Replicate
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        mesh, placements = value.device_mesh, list(value.placements)
        if any(p.is_partial() for p in placements):  # a partial sum is made whole by its own collective
            if self.guard is not None:  # met first, as the model's collectives are (rank_guard.py)
                for dim, p in enumerate(placements):
                    if p.is_partial():
                        self.guard.checkpoint(mesh.get_group(dim))
            placements = [Replicate() if p.is_partial() else p for p in placements]
            value = value.redistribute(mesh, placements)
        local = value.to_local()
        coord = mesh.get_coordinate()
        whole = tuple(value.shape)
        counted = coord is not None and all(c == 0 for c, p in zip(coord, placements) if p.is_replicate())
        width = _width(whole + ((2,) if local.is_complex() else ()), layout)  # as ``placed_fingerprint`` gives it
        if counted:
            _, offset = compute_local_shape_and_global_offset(whole, mesh, placements)
            share = placed_fingerprint(local, whole, offset, valid, layout)
        else:
            share = torch.zeros(width, dtype=torch.float64, device=local.device)
        numbers = torch.zeros(width, dtype=torch.float64, device=local.device)
        ranks = [int(r) for r in mesh.mesh.reshape(-1).tolist()]  # the mesh's rank ids: a host tensor
        self._pieces.append(_Piece([_row(share)], numbers, whole, ranks, [width]))
        return numbers

    def finish(self, run: TwinRun, kind: str | None) -> None:
        """The end of one run (``kind``: None the twin, else a perturbed run), on every rank: the shares gathered,
        each DTensor's whole fingerprint filled in, and each plain tensor that differs between ranks (decided in the
        twin run, kept for its perturbed runs) replaced in ``run`` by its readings."""
        pieces, self._pieces = self._pieces, []
        rows = [row for piece in pieces for row in piece.rows]
        if self.guard is not None:  # no rank enters the gathers below while another's run failed (rank_guard.py)
            self.guard.checkpoint()
        counts = _gather(torch.tensor([float(len(rows))], dtype=torch.float64)).reshape(-1).tolist()
        if len(set(counts)) != 1:
            raise RuntimeError(f"the ranks' float64 twins fingerprinted {', '.join(str(int(c)) for c in counts)} "
                               "pieces: their calls differ")
        if not rows:
            return
        from ..transfer import to_host

        gathered = _gather(torch.stack([r.to(_device()) for r in rows]))  # [ranks, rows, ROW]
        host = to_host(gathered) if any(p.mesh is None for p in pieces) else None
        if kind is None:
            self._spread, self.read = {}, []
        at = 0
        where = _places(run)
        for piece in pieces:
            block = gathered[:, at:at + len(piece.rows)]
            if piece.mesh is not None:
                piece.numbers.copy_(block[piece.mesh, 0, :len(piece.numbers)].sum(0).to(piece.numbers.device))
            else:
                self._plain(piece, block, host[:, at:at + len(piece.rows)], where.get(id(piece.numbers), []),
                            run, kind)
            at += len(piece.rows)

    def _plain(self, piece: _Piece, block: torch.Tensor, host: torch.Tensor, places: list[tuple[str, str]],
               run: TwinRun, kind: str | None) -> None:
        if kind is None:
            first = host[0, 0, :WIDTH]
            scale = float(first[:SUMS].abs().max()) + float(first[SUMSQ]) ** 0.5
            spread = (host[:, 0, :WIDTH] - first).abs().max() > SAME * scale
            for key_place in places:
                self._spread[key_place] = bool(spread)
        for key, place in places:
            if not self._spread.get((key, place)):
                continue
            if kind is None:
                self.read.append((key, place))
            device = piece.numbers.device
            readings: dict[str, tuple[tuple[int, ...], torch.Tensor]] = {}
            same_size = len(set(host[:, 0, -1].tolist())) == 1
            for dim in range(len(piece.shape)) if same_size else ():
                whole = list(piece.shape)
                whole[dim] *= self.world
                readings[f"Shard({dim})"] = (tuple(whole), block[:, 1 + dim, :piece.widths[1 + dim]].sum(0).to(device))
            own = piece.widths[0]
            total = block[:, 0, :own].sum(0)
            first = block[0, 0, :WIDTH]
            estimate = total[:SUMS].square().sum()  # a sum's squares: not the sum of the pieces' squares
            summed = torch.cat([total[:SUMS], first[KEPT:KEPT + 1], estimate.reshape(1), first[LEFT_OUT:],
                                total[WIDTH:]])  # the layout sums are a sum's
            readings["Partial(sum)"] = (piece.shape, summed.to(device))
            for rank in range(self.world):
                readings[f"rank{rank}"] = (piece.shape, block[rank, 0, :own].to(device))
            calls = run.calls[key]
            run.calls[key] = {name: entry for p, entry in calls.items()
                              for name, entry in (_readings(p, entry, readings) if p == place else [(p, entry)])}


def _width(shape: tuple[int, ...], layout: bool) -> int:
    """How many numbers a fingerprint of a tensor of ``shape`` holds: ``WIDTH``, and the layout sums where asked for
    and it has three or more axes longer than one (``signs.axis_shape``)."""
    return WIDTH + (AXIS_SUMS if layout and axis_shape(shape) is not None else 0)


def _row(numbers: torch.Tensor, numel: int = 0) -> torch.Tensor:
    """One share as it travels: its numbers, zeros where it has no layout sums, and the piece's size last."""
    row = numbers.new_zeros(ROW)
    row[:len(numbers)] = numbers
    row[-1] = float(numel)
    return row


def _readings(place: str, entry: Any, readings: dict[str, tuple[tuple[int, ...], torch.Tensor]]) -> list:
    return [(f"{place}{MARK}{name}", reading) for name, reading in readings.items()]


def _places(run: TwinRun) -> dict[int, list[tuple[str, str]]]:
    """id of each fingerprint's numbers -> the (call, place) that hold it (a tensor handed on is fingerprinted once)."""
    found: dict[int, list[tuple[str, str]]] = {}
    for key, places in run.calls.items():
        for place, (_, numbers) in places.items():
            found.setdefault(id(numbers), []).append((key, place))
    return found
