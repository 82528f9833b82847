"""A tensor-parallel run's float64 twin against a single device's: each plain tensor read by the layout that fits.

Under several ranks the twins run together (``capture/twin/ranks.py``): a DTensor's fingerprint is the whole
tensor's (its placements say where each piece sits), and a plain tensor the same on every rank is its own. A plain
tensor that differs between ranks (a hand-split projection's piece) has no recorded layout, so the twin kept its
readings as places ``<place>|<reading>``: ``Shard(d)`` (the pieces side by side along ``d``), ``Partial(sum)``
(their sum) and ``rank<r>`` (rank r's piece as a copy of a replicated tensor). Here each is read as
``diff/ranks/reassemble.py`` reads full tensors: by the other side's shape first (one dimension ``world_size``
times larger is ``Shard(d)``, the only reading of that shape), and where the shape is the pieces' own, by value:
``Partial(sum)`` or every rank's copy (judged by the copy farthest from the other side: a replica broken on one
rank differs there), whichever is nearer. A tensor that fits no reading is left out (``unplaced``), never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from ...core.twin import TwinPrint

if TYPE_CHECKING:  # pragma: no cover
    from ...core.trace import Trace
    from ..comparison import Comparison

#: the separator of a reading's place (``capture/twin/ranks.py``'s ``MARK``; repeated: diff does not import capture
#: at module level for a torch-free reading of files)
MARK = "|"


@dataclass(frozen=True)
class ReadPrint(TwinPrint):
    """A fingerprint read from a tensor-parallel twin's pieces: the reading, and each rank's piece's distance from
    the other side's tensor (RMS) where the pieces have its shape (copies of it, if the reading is one)."""

    reading: str = ""
    copies: tuple[tuple[int, float], ...] = ()


def resolve(mine: dict[str, TwinPrint], theirs: dict[str, TwinPrint]
            ) -> tuple[dict[str, TwinPrint], dict[str, TwinPrint]]:
    """Both sides' fingerprints of one call with each reading replaced by the one that fits the other side (or
    left out where none does); unchanged where neither side holds readings."""
    if not any(MARK in place for place in mine) and not any(MARK in place for place in theirs):
        return mine, theirs
    return _read(mine, theirs), _read(theirs, mine)


def _read(side: dict[str, TwinPrint], other: dict[str, TwinPrint]) -> dict[str, TwinPrint]:
    readings: dict[str, dict[str, TwinPrint]] = {}
    found: dict[str, TwinPrint] = {}
    for place, print_ in side.items():
        if MARK in place:
            base, _, name = place.partition(MARK)
            readings.setdefault(base, {})[name] = print_
        else:
            found[place] = print_
    for base, options in readings.items():
        target = other.get(base)
        chosen = choose(options, target) if target is not None else None
        if chosen is not None:
            copies = tuple((int(name[4:]), p.distance(target)) for name, p in sorted(options.items())
                           if name.startswith("rank") and p.shape == target.shape and p.kept == target.kept)
            found[base] = ReadPrint(**{f.name: getattr(chosen[1], f.name) for f in fields(TwinPrint)},
                                    reading=chosen[0], copies=copies)
    return found


def choose(options: dict[str, TwinPrint], target: TwinPrint) -> tuple[str, TwinPrint] | None:
    """The reading of a plain tensor's pieces that fits ``target`` (the other side's tensor), as ``(reading,
    fingerprint)``; None where none has its shape and kept elements."""
    fits = {name: p for name, p in options.items() if p.shape == target.shape and p.kept == target.kept}
    shards = [name for name in fits if name.startswith("Shard(")]
    if shards:
        return shards[0], fits[shards[0]]
    partial = fits.get("Partial(sum)")
    copies = [(name, p) for name, p in fits.items() if name.startswith("rank")]
    worst = max(copies, key=lambda item: item[1].distance(target)) if copies else None
    candidates = ([("Partial(sum)", partial)] if partial is not None else []) + ([worst] if worst else [])
    if not candidates:
        return None
    return min(candidates, key=lambda item: item[1].distance(target))


def reading_words(pair: Any) -> str:
    """What a flagged pair's reading of a tensor-parallel twin's pieces says about the ranks (a clause for the
    first divergence's reason), or empty where neither side was read from pieces."""
    read = next((p for p in (getattr(pair, "b", None), getattr(pair, "a", None)) if isinstance(p, ReadPrint)), None)
    if read is None or pair.evidence is None:
        return ""
    if read.reading.startswith("rank"):
        wrong = [(rank, d) for rank, d in read.copies if d > pair.evidence.threshold]
        if not wrong:
            return ""
        who = (f"only rank {wrong[0][0]}'s copy differs" if len(wrong) == 1 else
               f"ranks {', '.join(str(r) for r, _ in wrong)}'s copies differ")
        return (f"; its pieces read as copies of one tensor (Replicate(), no layout recorded): {who} "
                f"(RMS {', '.join(f'{d:.2g}' for _, d in wrong)})")
    return (f"; its pieces read as {read.reading} (no layout recorded): the twins cannot say whose piece "
            "(rank folders of full tensors can)")


def local_pieces(comparison: Comparison) -> bool:
    """True where a side's files are one rank's of a run of several (their tensors may be local pieces, whose
    shapes are no evidence: a whole tensor's shape is its twin's)."""
    from .ranked import one_rank_of_several

    return one_rank_of_several(comparison.a) or one_rank_of_several(comparison.b)


def ranks_note(side: str, trace: Trace) -> str | None:
    """A sentence for a comparison's notes where ``trace``'s twin ran on several ranks together, else None."""
    section: Any = trace.sidecar.get("twin", {}).get("ranks") if isinstance(trace.sidecar, dict) else None
    if not isinstance(section, dict) or not isinstance(section.get("world_size"), int):
        return None
    read = section.get("read", 0)
    text = f"{side}'s float64 twin ran on its {section['world_size']} ranks together (DTensors fingerprinted whole"
    if read:
        text += (f"; {read} plain tensors that differ between ranks read by the other side's shapes and values: "
                 "Shard(d), Partial(sum) or each rank's copy, and not compared where none fits")
    return text + ")"
