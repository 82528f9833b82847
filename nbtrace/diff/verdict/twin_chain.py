"""Where a difference first seen at a call's input was born, followed back through the reference's own twin.

The float64 twin fingerprints every call of the reference, those with no counterpart on the other side among them
(torchvision's norm and activation, where timm fuses the two in one ``BatchNormAct2d``; a block pruning left out of
the files). When a call's input differs and the last event that agreed lies outside its parent, the code between
is the innermost call holding both, whatever ran there. But a tensor handed on unchanged has the same fingerprint
where it is made and where it is read: the input is some earlier call's output, bit for bit, and that call's inputs
earlier calls' outputs, back to what agreed. Where that chain closes, only the calls in it ran on the way, and the
difference is born among them: in the innermost call holding them all (a norm and its activation: the
``Conv2dNormActivation`` around them, not the whole block), provided the other side's tensor too was handed on
unchanged by calls of its own from what agreed (code of its parents between them, a scale or a residual, would be
a place the difference can be born that has no call of a's). Exact equality of the float64 fingerprints decides,
within each trace; where either chain does not close, nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...core.ranks import call_key
from ...core.twin import Twin

if TYPE_CHECKING:  # pragma: no cover
    from .twin_verdict import TwinEvent

_LIMIT = 64  # calls followed back at most


def handed_chain(walk: list[tuple[Any, str]], event: TwinEvent, good: TwinEvent, twins: tuple[Twin, Twin],
                 b_walk: list[tuple[str, str]], b_key: Callable[[Any], str | None]) -> tuple[Any, list[Any]] | None:
    """The innermost call of a's (a ``Node``, or a ``HiddenCall`` pruning left out of the files) holding every call
    the flagged input was handed through since ``good`` (see the module docstring), and those calls in call order;
    None where the chain does not close, on a's side or on b's (``b_walk``: b's call keys' events in twin order,
    ``b_key``: the key of a call's counterpart in b: b's own code between its calls is no place to blame a's).
    ``walk``: a's calls' events in twin order."""
    if event.io != "input":
        return None
    flagged = [p for p in event.decided if p.score >= 1.0]
    keys = [(call_key(call.module_path, call.call_index), io) for call, io in walk]
    calls = {key: call for (key, _), (call, _) in zip(keys, walk)}
    found = _chain(keys, _key(good.node), good.io, _key(event.node), [p.a.sums for p in flagged], twins[0])
    theirs = _chain(b_walk, b_key(good.node), good.io, b_key(event.node), [p.b.sums for p in flagged], twins[1],
                    inline=True)
    if not found or theirs is None:
        return None
    chain = [calls[key] for key in found]
    holder = chain[0]
    for call in chain[1:]:
        mine = {id(n) for n in (call, *call.ancestors())}
        holder = next(n for n in (holder, *holder.ancestors()) if id(n) in mine)
    return holder, chain[::-1]


def _chain(walk: list[tuple[str, str]], good: str | None, good_io: str, seen: str | None, wanted: list[tuple],
           twin: Twin, inline: bool = False) -> list[str] | None:
    """The calls (keys, last first) whose outputs handed ``wanted`` on unchanged from what ``good`` held, within
    ``walk`` between ``good``'s event and ``seen``'s input; None where some tensor on the way was made otherwise.
    ``inline``: a tensor made by the own code of a call that began after ``good`` (a norm computed inline in timm's
    ``BatchNormAct2d`` before it calls its activation) counts as made by that call."""
    place = {event: i for i, event in enumerate(walk)}
    start, end = place.get((good, good_io)), place.get((seen, "input"))
    if good is None or seen is None or start is None or end is None or start >= end:
        return None
    agreed = {p.sums for name, p in twin.calls.get(good, {}).items() if name.startswith("out") == (good_io == "output")}
    chain: list[str] = []
    todo = [(sums, end) for sums in wanted]
    while todo and len(chain) < _LIMIT:
        sums, before = todo.pop()
        if sums in agreed:
            continue
        maker = _maker(walk, start, before, sums, twin)
        if maker is None:
            holder = _open_at(walk, before)
            if inline and holder is not None and holder[1] > start and not any(
                    p.sums == sums for name, p in twin.calls.get(holder[0], {}).items() if not name.startswith("out")):
                continue  # made inside a call that began after what agreed: its own code
            return None
        key, opened = maker
        if key not in chain:
            chain.append(key)
        todo += [(p.sums, opened) for name, p in twin.calls.get(key, {}).items() if not name.startswith("out")]
    return None if todo else chain


def _maker(walk: list[tuple[str, str]], start: int, end: int, sums: tuple, twin: Twin) -> tuple[str, int] | None:
    """The outermost call that began after ``start`` and ended before ``end`` handing on ``sums`` (a call that only
    hands on what a call inside it made, an Identity, is not the maker), and where it began."""
    for i in range(end - 1, start, -1):
        key, io = walk[i]
        if io == "output" and any(name.startswith("out") and p.sums == sums
                                  for name, p in twin.calls.get(key, {}).items()):
            opened = next(j for j in range(i, -1, -1) if walk[j] == (key, "input"))
            if opened > start:
                return key, opened
    return None


def _open_at(walk: list[tuple[str, str]], end: int) -> tuple[str, int] | None:
    """The innermost call still running at ``walk[end]``, and where it began."""
    stack: list[tuple[str, int]] = []
    for i in range(end):
        key, io = walk[i]
        if io == "input":
            stack.append((key, i))
        elif stack:
            stack.pop()
    return stack[-1] if stack else None


def key_walk(twin: Twin, root: Any) -> list[tuple[str, str]]:
    """A trace's calls' events as keys, in the order its twin saw them (its tree's order where it pruned nothing)."""
    if twin.events:
        stack: list[str] = []
        found: list[tuple[str, str]] = []
        for event in twin.events:
            if event[0] == "(":
                stack.append(event[1:])
                found.append((event[1:], "input"))
            elif stack:
                found.append((stack.pop(), "output"))
        return found
    found = []
    todo: list[tuple[Any, bool]] = [(root, False)]
    while todo:
        node, done = todo.pop()
        found.append((call_key(node.module_path, node.call_index), "output" if done else "input"))
        if not done:
            todo.append((node, True))
            todo.extend((child, False) for child in reversed(node.children))
    return found


def _key(call: Any) -> str:
    return call_key(call.module_path, call.call_index)
