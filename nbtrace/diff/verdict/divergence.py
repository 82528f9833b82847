"""The first divergence: the first module, in the reference's call order, where the two traces part ways.

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

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.node import Node
from .evidence import Evidence
from ..measure.metrics import TensorDiff
from .weights import WeightFinding, serious_inside

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison


@dataclass
class FirstDivergence:
    """Where the two implementations part ways.

    ``module_path`` (a's naming) is the module to blame, ``b_path`` its counterpart
    in b (None if it has none). The difference was observed in ``observed_path``'s
    ``io`` tensor ``arg`` (``b_arg`` in b); ``max_abs``/``max_rel``/``cosine`` and
    ``stat_diffs`` are the numbers of the worst tensor there (``basis`` says
    whether they come from full tensors, printed values or stats). ``reason``
    explains it in a sentence. When that tensor was reassembled from the ranks of a
    tensor-parallel run, ``rule`` says how (``Shard(2)``, ``Replicate()``, …) and
    ``wrong_ranks`` maps each rank whose own piece differs to its max abs difference.
    ``confidence`` is ``"certain"`` or ``"likely"``; ``evidence`` holds every test's numbers
    (``evidence.Evidence``), ``weights`` the differing parameters of the blamed module and
    the calls inside it, ``replayed`` whether the port was run on the reference's inputs.
    ``step`` is the forward it was found in (0 for a single forward).
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
    rule: str | None = None
    wrong_ranks: dict[int, float] = field(default_factory=dict)
    confidence: str = "certain"
    evidence: list[Evidence] = field(default_factory=list)
    weights: list[WeightFinding] = field(default_factory=list)
    replayed: bool = False
    step: int = 0
    operation: Any = None  # the first diverging operation inside it (diff/operations), once narrow() ran

    @classmethod
    def blaming(cls, comparison: Comparison, node: Node, **fields: Any) -> FirstDivergence:
        """A first divergence that blames ``node`` (a call of a); b's counterpart comes from the alignment."""
        match = comparison.match_of(node)
        b_node = match.b if match else None
        return cls(module_path=node.module_path, b_path=b_node.module_path if b_node else None,
                   call_index=node.call_index, node=node, b_node=b_node, **fields)

    @property
    def score(self) -> float | None:
        scores = [d.score for d in self.diffs if d.score is not None and d.ok is False]
        return max(scores) if scores else None

    def __str__(self) -> str:
        from ...render.text import describe_divergence

        return describe_divergence(self)


class _Event:
    __slots__ = ("io", "node", "verdict")

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


def first_divergence(comparison: Comparison) -> FirstDivergence | None:
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
        sibling, gap = seen.previous_sibling(), seen.gap_before()
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
    seen_match = comparison.match_of(seen)
    assert seen_match is not None
    failing = [d for d in seen_match.diffs if d.io == event.io and d.ok is False]
    worst = max(failing, key=lambda d: (d.score if d.score is not None else -1.0))
    unobserved, pruned_nodes = unobserved_between(comparison, events, good, bad, culprit, seen)
    pruned = _pruned_range(comparison, pruned_nodes, gap)
    result = FirstDivergence.blaming(
        comparison, culprit,
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
        b_only_between=b_only_between(comparison, events, good, bad),
        earlier=_earlier_hints(comparison, events, bad),
        rule=getattr(worst, "rule", None),
        wrong_ranks=dict(getattr(worst, "wrong_ranks", {})),
    )
    result.reason = _reason(result, how, seen, culprit)
    result.evidence = [_tolerance_evidence(worst)]
    result.confidence = "likely"  # a per-element tolerance cannot tell what a call added from what it inherited
    result.weights = serious_inside(comparison.weights, culprit.module_path)
    return result


def _tolerance_evidence(worst: TensorDiff) -> Evidence:
    """The per-element tolerance test that flagged the worst tensor (the verdict of the first round)."""
    score = worst.score if worst.score is not None else float("inf")
    threshold = worst.rtol if worst.rtol else 0.0
    ratio = score / threshold if threshold > 0 else float("inf")
    sentence = (
        f"the largest relative difference of {worst.io} {worst.arg} is {score:.3g}, "
        f"beyond the tolerance {threshold:.3g} for {worst.dtype}"
    )
    return Evidence("tolerance", score, threshold, ratio, sentence, "files")


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


def unobserved_between(comparison, events, good, bad, culprit, seen) -> tuple[list[str], list[Node]]:
    """a's calls that ran between the two events without anything compared (outermost ones)."""
    found: list[Node] = []
    pruned: list[Node] = []
    seen_ids: set[int] = set()
    for event in events[good + 1 : bad]:
        node = event.node
        if event.io != "input" or node is culprit or node is seen or id(node) in seen_ids \
                or id(node) in comparison._idle_a:  # an Identity computes nothing: nothing to suspect
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
        return f"{gap.prefix}.{gap.first}", f"{gap.prefix}.{gap.last}"
    blocks = [n for n in pruned_nodes if n.parent is not None and not any(n.parent is m for m in pruned_nodes)]
    if blocks:
        return blocks[0].module_path, blocks[-1].module_path
    return None


def b_only_between(comparison, events, good, bad) -> list[str]:
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
        up = culprit.parent
        glue = (
            f" (or {up.label}'s own code between {culprit.label} and {seen.label},"
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
