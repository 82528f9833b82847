"""Where a difference first seen at a call's input was born, followed back through the reference's own twin.

The float64 twin fingerprints every call of the reference, those with no counterpart on the other side among them
(torchvision's norm and activation, where timm fuses the two in one ``BatchNormAct2d``; a block pruning left out of
the files). When a call's input differs and the last event that agreed lies outside its parent, the code between
is the innermost call holding both, whatever ran there. But a tensor handed on unchanged has the same fingerprint
where it is made and where it is read: the input is some earlier call's output, bit for bit, and that call's inputs
earlier calls' outputs, back to what agreed. Where that chain closes, only the calls in it ran on the way, and the
difference is born among them: in the innermost call holding them all (a norm and its activation: the
``Conv2dNormActivation`` around them, not the whole block). Exact equality of the float64 fingerprints decides,
within one trace; where the chain does not close (code of a parent between two calls made the tensor), nothing
changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.ranks import call_key
from ...core.twin import Twin

if TYPE_CHECKING:  # pragma: no cover
    from .twin_verdict import TwinEvent

_LIMIT = 64  # calls followed back at most


def handed_chain(walk: list[tuple[Any, str]], event: TwinEvent, good: TwinEvent, twin: Twin
                 ) -> tuple[Any, list[Any]] | None:
    """The innermost call of a's (a ``Node``, or a ``HiddenCall`` pruning left out of the files) holding every call
    the flagged input was handed through since ``good`` (see the module docstring), and those calls in call order;
    None where the chain does not close. ``walk``: a's calls' events in twin order."""
    if event.io != "input":
        return None
    place = {(id(call), io): i for i, (call, io) in enumerate(walk)}
    start, end = place.get((id(good.node), good.io)), place.get((id(event.node), event.io))
    if start is None or end is None or start >= end:
        return None
    agreed = {p.sums for name, p in _prints(twin, good.node).items() if name.startswith("out") == (good.io == "output")}
    wanted = [p.a.sums for p in event.decided if p.score >= 1.0]
    chain: list[Any] = []
    while wanted and len(chain) < _LIMIT:
        sums = wanted.pop()
        if sums in agreed:
            continue
        maker = _maker(walk, start, end, sums, twin)
        if maker is None:
            return None
        call, opened = maker
        if not any(call is c for c in chain):
            chain.append(call)
            wanted += [p.sums for name, p in _prints(twin, call).items() if not name.startswith("out")]
            end = min(end, opened)
    if not chain or wanted:
        return None
    holder = chain[0]
    for call in chain[1:]:
        mine = {id(n) for n in (call, *call.ancestors())}
        holder = next(n for n in (holder, *holder.ancestors()) if id(n) in mine)
    return holder, chain[::-1]


def _maker(walk: list[tuple[Any, str]], start: int, end: int, sums: tuple, twin: Twin) -> tuple[Any, int] | None:
    """The innermost call that ended between ``start`` and ``end`` handing on ``sums``, and where it started."""
    for i in range(start + 1, end):
        call, io = walk[i]
        if io == "output" and any(name.startswith("out") and p.sums == sums for name, p in _prints(twin, call).items()):
            opened = next(j for j in range(i, -1, -1) if walk[j][0] is call and walk[j][1] == "input")
            return (call, opened) if opened > start else None
    return None


def _prints(twin: Twin, call: Any) -> dict:
    return twin.calls.get(call_key(call.module_path, call.call_index), {})
