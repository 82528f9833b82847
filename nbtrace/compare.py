"""Comparing two traces of the same computation: where do two implementations part ways?

``compare(a, b)`` aligns the calls of ``b`` with those of ``a`` (the reference;
see ``nbtrace.align``), compares every aligned tensor (see ``nbtrace.metrics``)
and finds the first divergence: the first module, in ``a``'s call order, whose
inputs agree and whose outputs do not.

The format keeps outputs only at the leaves, so the search walks ``a``'s calls as
a sequence of events — a call's inputs when it starts, a leaf's outputs when it
ends — and finds the first event that disagrees and the last one before it that
agreed. The code that ran between the two is to blame:

- a leaf's outputs disagree after its inputs agreed: that leaf;
- a call's inputs disagree right after its previous sibling ran, and that sibling
  has children (its own outputs were not recorded; the next call's inputs are its
  outputs): that sibling;
- otherwise the innermost call that contains both events (its own code between
  two of its children, e.g. rotary embedding or softmax inside an attention whose
  projections are modules).

Calls without data in between (no counterpart in ``b``, pruned layers) are listed
in ``FirstDivergence.unobserved``; when pruned layer blocks lie in between, the
divergence cannot be pinned to one module and ``exact`` is False.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .align import Alignment, align
from .files import load_trace
from .metrics import TensorDiff, diff_tensors, dtype_kind
from .trace import Node, Trace

if TYPE_CHECKING:  # pragma: no cover
    import pandas

STATUSES = ("match", "diverged", "first", "only_a", "no_data")


@dataclass
class Match:
    """One call of ``a`` and its counterpart in ``b``, with the comparison of their tensors."""

    a: Node
    b: Node
    diffs: list[TensorDiff]

    def __iter__(self):  # ``for node_a, node_b in comparison.matches``
        yield self.a
        yield self.b

    def verdict(self, io: str | None = None) -> bool | None:
        """False if some tensor (of ``io``) disagrees, True if all compared agree, None if none compared."""
        seen = [d.ok for d in self.diffs if (io is None or d.io == io) and d.ok is not None]
        if not seen:
            return None
        return all(seen)

    @property
    def score(self) -> float | None:
        """The largest relative difference over this call's tensors."""
        scores = [d.score for d in self.diffs if d.score is not None]
        return max(scores, key=lambda v: (math.isnan(v), v)) if scores else None


@dataclass
class FirstDivergence:
    """Where the two implementations part ways.

    ``module_path`` (a's naming) is the module to blame, ``b_path`` its counterpart
    in b (None if it has none). The difference was observed in ``observed_path``'s
    ``io`` tensor ``arg`` (``b_arg`` in b); ``max_abs``/``max_rel``/``cosine`` and
    ``stat_diffs`` are the numbers of the worst tensor there (``basis`` says
    whether they come from full tensors, printed values or stats). ``reason``
    explains it in a sentence.
    """

    module_path: str
    b_path: str | None
    call_index: int
    node: Node
    b_node: Node | None
    observed_path: str
    io: str
    arg: str
    b_arg: str
    basis: str | None
    max_abs: float | None
    max_rel: float | None
    cosine: float | None
    stat_diffs: dict[str, float]
    diffs: list[TensorDiff]
    reason: str
    exact: bool = True
    unobserved: list[str] = field(default_factory=list)
    pruned: tuple[str, str] | None = None
    b_only_between: list[str] = field(default_factory=list)
    earlier: list[tuple[str, str, str, float]] = field(default_factory=list)

    @property
    def score(self) -> float | None:
        scores = [d.score for d in self.diffs if d.score is not None and d.ok is False]
        return max(scores) if scores else None

    def __str__(self) -> str:
        return describe_divergence(self)


class Comparison:
    """The comparison of trace ``b`` against the reference ``a``; see ``nbtrace.compare``."""

    def __init__(
        self, a: Trace, b: Trace, alignment: Alignment, matches: list[Match], rtol, atol, rename, ignore=None
    ) -> None:
        self.a = a
        self.b = b
        self.alignment = alignment
        self.matches = matches
        self.rtol = rtol
        self.atol = atol
        self.rename = dict(rename) if rename is not None else None
        self.ignore = ignore
        self._by_a = {id(m.a): m for m in matches}
        self._pruned_a = {id(n) for n in alignment.pruned_a}
        self.first_divergence: FirstDivergence | None = _first_divergence(self)
        self._report: list[dict[str, Any]] | None = None

    # -- the public view ------------------------------------------------------------
    @property
    def unmatched_a(self) -> list[Node]:
        """Calls of a with no counterpart in b (structure, or layer blocks pruned from b)."""
        return self.alignment.only_a + self.alignment.pruned_a

    @property
    def unmatched_b(self) -> list[Node]:
        """Calls of b with no counterpart in a."""
        return self.alignment.only_b + self.alignment.pruned_b

    @property
    def compared(self) -> int:
        """How many tensor pairs could be compared."""
        return sum(1 for m in self.matches for d in m.diffs if d.ok is not None)

    @property
    def agree(self) -> bool:
        """True when tensors could be compared and none disagrees."""
        return self.first_divergence is None and self.compared > 0

    def match_of(self, node: Node) -> Match | None:
        """The match of one of a's calls, or None."""
        return self._by_a.get(id(node))

    def node_report(self) -> list[dict[str, Any]]:
        """One dict per call of ``a.nodes()``: ``status``, ``b_path``, ``score`` (and ``module_path``).

        ``status`` is "first" (the first divergence), "diverged" (a tensor of this
        call disagrees, or a call inside it does), "match", "only_a" (no counterpart
        in b) or "no_data" (nothing to compare: no tensors on both sides, or b was
        pruned there). ``score`` is the largest relative difference on the call's
        own tensors (None when none was compared; inf for a shape mismatch).
        """
        if self._report is None:
            self._report = _node_report(self)
        return [dict(row) for row in self._report]

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per compared tensor pair, plus one per unmatched call (``io`` empty)."""
        from .compare_frame import comparison_frame

        return comparison_frame(self)

    def summary(self) -> str:
        """A few lines for a terminal: the verdict, the first divergence, what is unmatched."""
        lines = [
            f"a: {self.a.model_name} ({len(self.a)} calls)  b: {self.b.model_name} ({len(self.b)} calls)",
            f"aligned {len(self.matches)} calls ({self.alignment.method}); {self.compared} tensor pairs compared; "
            f"unmatched: {len(self.unmatched_a)} in a, {len(self.unmatched_b)} in b",
        ]
        if self.first_divergence is not None:
            lines.append(describe_divergence(self.first_divergence))
        elif self.agree:
            lines.append("agree: every compared tensor is within tolerance")
        else:
            lines.append("nothing could be compared (no aligned tensors with data on both sides)")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        from .compare_html import comparison_html

        return comparison_html(self)

    def __repr__(self) -> str:
        verdict = "agree" if self.agree else "diverge" if self.first_divergence else "nothing compared"
        where = f" at {self.first_divergence.module_path}" if self.first_divergence else ""
        return f"<Comparison {self.a.model_name} vs {self.b.model_name}: {verdict}{where}>"


def compare(
    a: Trace | str | os.PathLike,
    b: Trace | str | os.PathLike,
    *,
    rename: Mapping[str, str] | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    ignore: str | None = None,
) -> Comparison:
    """Compare trace ``b`` against the reference ``a``.

    ``a`` and ``b`` are Traces or anything ``load_trace`` reads. ``rename`` maps
    regular expressions to replacements applied to b's module paths (root class
    name included) to pair calls by path; without it calls pair up by call order,
    shapes and dtypes. ``rtol``/``atol`` override the per-dtype defaults of
    ``nbtrace.metrics`` (printed values and stats always allow one unit of their
    last digit). ``ignore`` is a regex: tensors whose argument name
    (``kwargs.attention_mask``, on either side) matches are not compared. Returns
    a Comparison; ``.first_divergence`` is None when they agree.
    """
    a = load_trace(a)
    b = load_trace(b)
    alignment = align(a, b, rename)
    skip = _compile_ignore(ignore)
    matches = [Match(x, y, compare_calls(x, y, rtol, atol, skip)) for x, y in alignment.pairs]
    return Comparison(a, b, alignment, matches, rtol, atol, rename, ignore)


def _compile_ignore(ignore: str | None) -> re.Pattern[str] | None:
    if ignore is None:
        return None
    try:
        return re.compile(ignore)
    except re.error as exc:
        raise ValueError(f"ignore: bad regular expression {ignore!r}: {exc}") from None


def compare_calls(
    x: Node, y: Node, rtol: float | None, atol: float | None, ignore: re.Pattern[str] | None = None
) -> list[TensorDiff]:
    """Pair the tensors of two calls (inputs with inputs, outputs with outputs) and compare each pair.

    Tensors pair by argument name when shapes agree, else by shape in order,
    within the same kind (float, int, bool); tensors left over are not compared.
    A leaf output with the same name but another shape pairs as a shape mismatch.
    """
    diffs = []
    tensors_x, tensors_y = x.tensors(), y.tensors()
    for io in ("input", "output"):
        mine = [(arg, t) for kind, arg, t in tensors_x if kind == io and not (ignore and ignore.search(arg))]
        theirs = [(arg, t) for kind, arg, t in tensors_y if kind == io and not (ignore and ignore.search(arg))]
        used: set[int] = set()
        for arg, tensor in mine:
            pick = _pick(arg, tensor, theirs, used, io)
            if pick is None:
                continue
            used.add(pick)
            b_arg, other = theirs[pick]
            diffs.append(diff_tensors(io, arg, b_arg, tensor, other, rtol, atol))
    return diffs


def _pick(arg, tensor, theirs, used, io) -> int | None:
    kind = dtype_kind(tensor.dtype)
    fallback = None
    by_name = None
    for k, (b_arg, other) in enumerate(theirs):
        if k in used or dtype_kind(other.dtype) != kind:
            continue
        if other.shape == tensor.shape:
            if b_arg == arg:
                return k
            if fallback is None:
                fallback = k
        elif b_arg == arg and by_name is None:
            by_name = k
    if fallback is not None:
        return fallback
    if io == "output" and by_name is not None:
        return by_name
    return None


# -- the first divergence ---------------------------------------------------------------
class _Event:
    __slots__ = ("node", "io", "verdict")

    def __init__(self, node: Node, io: str, verdict: bool | None) -> None:
        self.node = node
        self.io = io
        self.verdict = verdict


def _events(comparison: Comparison) -> tuple[list[_Event], dict[int, tuple[int, int]]]:
    """a's calls as events (inputs at the start, outputs at the end) and each call's event span."""
    events: list[_Event] = []
    spans: dict[int, tuple[int, int]] = {}
    stack: list[tuple[Node, bool]] = [(comparison.a.root, False)]
    while stack:
        node, done = stack.pop()
        match = comparison.match_of(node)
        if done:
            verdict = match.verdict("output") if match else None
            spans[id(node)] = (spans[id(node)][0], len(events))
            events.append(_Event(node, "output", verdict))
            continue
        spans[id(node)] = (len(events), -1)
        events.append(_Event(node, "input", match.verdict("input") if match else None))
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(node.children))
    return events, spans


def _first_divergence(comparison: Comparison) -> FirstDivergence | None:
    events, spans = _events(comparison)
    bad = next((i for i, e in enumerate(events) if e.verdict is False), None)
    if bad is None:
        return None
    good = next((i for i in range(bad - 1, -1, -1) if events[i].verdict is True), -1)
    event = events[bad]
    seen = event.node
    gap = None
    if event.io == "output":
        checked = good >= spans[id(seen)][0]
        culprit = seen if checked or not seen.children else _innermost(events, good, bad)
        how = "inside" if culprit is not seen else "leaf" if checked else "leaf, inputs unchecked"
    else:
        sibling, gap = _previous_sibling(seen)
        if (
            sibling is not None
            and gap is None
            and sibling.children
            and spans[id(sibling)][0] <= good <= spans[id(sibling)][1]
        ):
            culprit, how = sibling, "sibling"
        elif bad == 0:
            culprit, how = seen, "model inputs"
        else:
            culprit, how = _innermost(events, good, bad), "inside"
    match = comparison.match_of(culprit)
    seen_match = comparison.match_of(seen)
    assert seen_match is not None
    failing = [d for d in seen_match.diffs if d.io == event.io and d.ok is False]
    worst = max(failing, key=lambda d: (d.score if d.score is not None else -1.0))
    unobserved, pruned_nodes = _unobserved(comparison, events, good, bad, culprit, seen)
    pruned = _pruned_range(comparison, pruned_nodes, gap)
    result = FirstDivergence(
        module_path=culprit.module_path,
        b_path=match.b.module_path if match else None,
        call_index=culprit.call_index,
        node=culprit,
        b_node=match.b if match else None,
        observed_path=seen.module_path,
        io=event.io,
        arg=worst.arg,
        b_arg=worst.b_arg,
        basis=worst.basis,
        max_abs=worst.max_abs,
        max_rel=worst.max_rel,
        cosine=worst.cosine,
        stat_diffs=dict(worst.stat_diffs),
        diffs=seen_match.diffs,
        reason="",
        exact=pruned is None,
        unobserved=unobserved,
        pruned=pruned,
        b_only_between=_b_only_between(comparison, events, good, bad),
        earlier=_earlier_hints(comparison, events, bad),
    )
    result.reason = _reason(result, how, seen, culprit)
    return result


def _previous_sibling(node: Node) -> tuple[Node | None, tuple | None]:
    parent = node.parent
    if parent is None:
        return None, None
    position = next(i for i, child in enumerate(parent.children) if child is node)
    if position == 0:
        return None, None
    gap = next((g for g in parent.pruned_layers() if g[0] == position), None)
    return parent.children[position - 1], gap


def _innermost(events: list[_Event], good: int, bad: int) -> Node:
    """The innermost call whose span holds both events (the root when nothing agreed before)."""
    end = events[bad].node
    if good < 0:
        return _root(end)
    chain = set()
    walker: Node | None = events[good].node
    while walker is not None:
        chain.add(id(walker))
        walker = walker.parent
    walker = end
    while walker is not None and id(walker) not in chain:
        walker = walker.parent
    return walker if walker is not None else _root(end)


def _root(node: Node) -> Node:
    while node.parent is not None:
        node = node.parent
    return node


def _unobserved(comparison, events, good, bad, culprit, seen) -> tuple[list[str], list[Node]]:
    """a's calls that ran between the two events without anything compared (outermost ones)."""
    found: list[Node] = []
    pruned: list[Node] = []
    seen_ids: set[int] = set()
    for event in events[good + 1 : bad]:
        node = event.node
        if event.io != "input" or node is culprit or node is seen or id(node) in seen_ids:
            continue
        match = comparison.match_of(node)
        if match is not None and match.verdict() is not None:
            continue
        if node.parent is not None and id(node.parent) in seen_ids:
            seen_ids.add(id(node))
            continue
        seen_ids.add(id(node))
        found.append(node)
        if id(node) in comparison._pruned_a:
            pruned.append(node)
    return [n.module_path for n in found], pruned


def _pruned_range(comparison, pruned_nodes: list[Node], gap) -> tuple[str, str] | None:
    if gap is not None:
        _, prefix, first, last = gap
        return f"{prefix}.{first}", f"{prefix}.{last}"
    blocks = [n for n in pruned_nodes if n.parent is not None and not any(n.parent is m for m in pruned_nodes)]
    if blocks:
        return blocks[0].module_path, blocks[-1].module_path
    return None


def _b_only_between(comparison, events, good, bad) -> list[str]:
    """Calls of b, without a counterpart in a, that ran between the b counterparts of the two events."""
    index_b = {id(n): i for i, n in enumerate(comparison.b.nodes())}

    def b_position(event_index: int, default: int) -> int:
        if event_index < 0:
            return default
        event = events[event_index]
        match = comparison.match_of(event.node)
        if match is None:
            return default
        position = index_b[id(match.b)]
        if event.io == "output":  # after its subtree
            position += sum(1 for _ in match.b.walk()) - 1
        return position

    start = b_position(good, -1)
    end = b_position(bad, len(index_b))
    lone = {id(n) for n in comparison.unmatched_b}
    return [n.module_path for n in comparison.b.nodes()[start + 1 : end] if id(n) in lone][:20]


def _earlier_hints(comparison, events, bad) -> list[tuple[str, str, str, float]]:
    """Earlier tensors within tolerance whose difference is still well beyond rounding (at most 3)."""
    hints = []
    for event in events[:bad]:
        match = comparison.match_of(event.node)
        if match is None or event.verdict is not True:
            continue
        notable = [d for d in match.diffs if d.io == event.io and d.notable]
        if notable:
            worst = max(notable, key=lambda d: d.excess or 0.0)
            hints.append((event.node.module_path, event.io, worst.arg, float(worst.excess or 0.0)))
            if len(hints) == 3:
                break
    return hints


def _reason(div: FirstDivergence, how: str, seen: Node, culprit: Node) -> str:
    where = f"{div.io}s of {div.observed_path}" if div.io == "input" else f"outputs of {div.observed_path}"
    if div.pruned is not None:
        first, last = div.pruned
        return (
            f"the {where} differ while everything recorded before agrees; the layer blocks {first} … {last} "
            f"in between were pruned from a trace, so the divergence is in one of them or in "
            f"{culprit.module_path} around them (trace again with do_prune_layers=False to pin it down)"
        )
    if how == "model inputs":
        return "the inputs given to the two models differ"
    if how == "leaf":
        return f"its inputs agree and its outputs differ ({div.arg})"
    if how == "leaf, inputs unchecked":
        return (
            f"its outputs differ ({div.arg}) while everything before agrees; its inputs could not be compared "
            f"(no counterpart with data in b), so the difference may also come from the code that made them"
        )
    if how == "sibling":
        from .text import relative_name

        up = culprit.parent
        glue = (
            f" (or {relative_name(up)}'s own code between {relative_name(culprit)} and {relative_name(seen)},"
            " e.g. a residual add)"
            if up is not None
            else ""
        )
        return (
            f"everything recorded inside it agrees, but its output — the {where} ({div.arg}), the next call — "
            f"differs (the format keeps no outputs for calls with children){glue}"
        )
    text = f"its inputs agree, but the {where} ({div.arg}) differ: the difference comes from its own code"
    if seen is not culprit and seen.parent is culprit:
        text += f" before it calls {seen.name}"
    if div.unobserved:
        shown = ", ".join(p.rsplit(".", 1)[-1] for p in div.unobserved[:4])
        more = "…" if len(div.unobserved) > 4 else ""
        text += f" or from calls with nothing to compare ({shown}{more})"
    return text


def describe_divergence(div: FirstDivergence) -> str:
    """The first divergence in two lines: where, and the numbers."""
    b = f" (b: {div.b_path})" if div.b_path and div.b_path != div.module_path else ""
    head = f"first divergence: {div.module_path}{b}{'' if div.exact else ' (approximate)'}"
    text = head + "\n  " + div.reason + "\n  " + format_numbers(div)
    if div.earlier:
        shown = "; ".join(f"{path} {io}s {arg} ({_num(excess)})" for path, io, arg, excess in div.earlier)
        text += f"\n  note: smaller differences, within tolerance but beyond rounding, show earlier: {shown}"
    return text


def format_numbers(div: FirstDivergence | TensorDiff) -> str:
    """``max_abs=… max_rel=… cosine=…`` or the stat differences, with the basis."""
    parts = []
    for name in ("max_abs", "max_rel", "cosine"):
        value = getattr(div, name)
        if value is not None:
            parts.append(f"{name}={value:.6f}" if name == "cosine" else f"{name}={_num(value)}")
    for name, value in div.stat_diffs.items():
        parts.append(f"Δ{name}={_num(value)}")
    basis = div.basis or "no data"
    return f"[{basis}] " + " ".join(parts)


def _num(value: float) -> str:
    if value is None:
        return "-"
    if not math.isfinite(value):
        return str(value)
    return f"{value:.3g}" if value == 0 or 1e-3 <= abs(value) < 1e4 else f"{value:.2e}"


# -- per-call status ----------------------------------------------------------------------
def _node_report(comparison: Comparison) -> list[dict[str, Any]]:
    nodes = comparison.a.nodes()
    rows: list[dict[str, Any]] = []
    for node in nodes:
        match = comparison.match_of(node)
        if match is None:
            status = "no_data" if id(node) in comparison._pruned_a else "only_a"
            rows.append({"module_path": node.module_path, "status": status, "b_path": None, "score": None})
            continue
        verdict = match.verdict()
        status = "diverged" if verdict is False else "match" if verdict else "no_data"
        rows.append(
            {"module_path": node.module_path, "status": status, "b_path": match.b.module_path, "score": match.score}
        )
    position = {id(node): i for i, node in enumerate(nodes)}
    for i in range(len(nodes) - 1, -1, -1):  # a call with a diverged call inside is diverged too
        node = nodes[i]
        if rows[i]["status"] == "diverged" and node.parent is not None:
            up = rows[position[id(node.parent)]]
            if up["status"] in ("match", "no_data"):
                up["status"] = "diverged"
    first = comparison.first_divergence
    if first is not None:
        rows[position[id(first.node)]]["status"] = "first"
    return rows
