"""The verdict from two float64 twins: where do the two *functions* first part ways?

Each side's trace holds, at every call, fingerprints of its float64 twin (``core/twin.py``): the whole model run
once more in float64 from the same top-level inputs, float64 through its own casts. Two twins from the same
inputs are the two functions, without the rounding of either run; what separates them at a call is semantic,
plus float64 rounding. That rounding is measured, not assumed: each twin was run again with every stored float
tensor moved by one float64 rounding (``s64``), and the twins are allowed ``k = 2`` times the sum of the two
sensitivities, plus the fingerprints' own arithmetic (``√4096 = 64`` float64 roundings of the tensor's RMS).
Where the float constants the models hold outside their ``state_dict`` differ between the sides (rotary
frequencies each side computed for itself: their digests differ), eight roundings of those constants in their own
dtype are allowed as well (``sconst``, ``CONSTANT_ROUNDINGS``). A twin that did not stay float64 (an operation with no float64 form:
``low``) decides nothing from that call on.

The walk is the reference's calls as events, in call order: a call's inputs when it starts, its outputs when it
ends (outputs of calls with children included: the twin keeps them). The difference is born in the code that ran
between the last event whose compared tensors agreed and the first that differs: a call whose outputs differ
after its inputs (or its last child's outputs) agreed; the innermost call holding both events otherwise (a
parent's own code between two children: a residual add, rotary and softmax inside an attention whose
projections are modules), unless the reference's own twin shows the tensor handed on unchanged through calls with
nothing compared (``twin_chain.py``: the innermost call holding those). Integer and bool tensors (token ids,
positions) are compared exactly as recorded at the same events, and so is the shape of the tensor a leaf hands on,
after its inputs agreed: no rounding makes another shape (a pooling with another padding). The top-level inputs
differing is a verdict of its own ("inputs").
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...core.node import Node
from ...core.ranks import call_key
from ...core.twin import Twin
from ..measure.metrics import TensorDiff
from ..ranks.twin_shards import local_pieces, resolve
from .evidence import Evidence
from .twin_pairs import Allowance, TwinPair, pairs
from .twin_calls import Counterparts, call_events
from .twin_chain import handed_chain, key_walk
from .stored_dtypes import rounded_side, stored_rounding
from .weights import same_product, weight_evidence

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison

@dataclass
class TwinEvent:
    """One event of a's calls: its compared tensors' fingerprints, and its integer and bool tensors compared as
    recorded (exactly: token ids, positions, a boolean mask)."""

    node: Node
    io: str
    pairs: list[TwinPair] = field(default_factory=list)
    exact: list[TensorDiff] = field(default_factory=list)
    weights: list[Evidence] = field(default_factory=list)  # at a leaf's output: its weights converted wrongly

    @property
    def decided(self) -> list[TwinPair]:
        return [p for p in self.pairs if p.evidence is not None]

    @property
    def compared(self) -> bool:
        """Something was compared at this event (a fingerprint, or an integer tensor exactly)."""
        return bool(self.decided) or bool(self.exact)

    @property
    def unequal(self) -> list[TensorDiff]:
        """Integer or bool tensors that differ: no kernel's rounding makes them."""
        return [d for d in self.exact if d.ok is False]

    @property
    def flagged(self) -> bool:
        return bool(self.unequal) or bool(self.weights) or any(p.score >= 1.0 for p in self.decided)

    @property
    def worst(self) -> TwinPair | None:
        decided = self.decided
        return max(decided, key=lambda p: p.score) if decided else None

    def index_in(self, events: list[TwinEvent]) -> int:
        return next(i for i, e in enumerate(events) if e is self)


@dataclass
class TwinVerdict:
    """The answer: ``state`` "diverge" (``culprit`` is where it is born, seen at ``event``), "agree" (every compared
    tensor within the twins' precision), "inputs" (the top-level inputs differ), "open" (the twins stopped being
    float64 before anything differed: ``open_at`` and ``note`` say where and why) or "nothing" (nothing compared)."""

    state: str
    culprit: Node | None = None
    event: TwinEvent | None = None
    good: TwinEvent | None = None  # the last event that agreed before it
    events: list[TwinEvent] = field(default_factory=list)
    open_at: Node | None = None
    note: str = ""
    constants_differ: bool = False
    #: the unit roundoff of the narrower dtype one side stores its weights in (``stored_rounding``), else 0
    stored: float = 0.0
    #: "a" or "b": the wider side whose twin, run rounded to bfloat16, was compared (``stored_dtypes.rounded_side``)
    rounded: str | None = None
    compared: int = 0
    #: the calls with nothing compared that handed the flagged input on from what agreed (``twin_chain.py``)
    handed: list = field(default_factory=list)

    @property
    def outputs_agree(self) -> bool:
        """The model's own outputs were compared, and agree: the two functions agree on these inputs."""
        return self.state == "agree" and any(e.io == "output" and e.node.parent is None and e.decided
                                             for e in self.events)

    @property
    def root_output_agrees(self) -> bool:
        """The model's own outputs were compared and agree, whatever was flagged before them."""
        return any(e.io == "output" and e.node.parent is None and e.decided and not e.flagged for e in self.events)

    def scores(self) -> dict[int, float]:
        """id(a's call) -> the best score of its compared tensors."""
        found: dict[int, float] = {}
        for event in self.events:
            for pair in event.decided:
                found[id(event.node)] = max(found.get(id(event.node), 0.0), pair.score)
        return found


def usable(comparison: Comparison) -> str | None:
    """Why the two twins cannot be compared (None: they can)."""
    twins = comparison.a.twin, comparison.b.twin
    for side, twin in zip("ab", twins):
        if twin is None:
            return f"{side} was traced without its float64 twin"
        if not twin.calls:
            return f"{side}'s float64 twin was not recorded"
    return padding_mismatch(*twins)


def padding_mismatch(twin_a: Twin, twin_b: Twin) -> str | None:
    """Why two twins' fingerprints cover different positions (each left out its run's padding,
    ``capture/twin/padding.py``), and what decides, or None: the same padding, or none on either side (a mask of all
    ones is none)."""
    pads = twin_a.padded, twin_b.padded
    if pads[0] is None and pads[1] is None or pads[0] is not None and twin_a.padding == twin_b.padding:
        return None
    words = [_padding_words(side, twin, pad) for side, twin, pad in zip("ab", (twin_a, twin_b), pads)]
    missing = [side for side, pad in zip("ab", pads) if pad is None]
    if missing:
        remedy = (f"trace {missing[0]} again declaring the argument that holds its padding mask, "
                  "nbtrace.trace(model, padding_mask='<argument>')")
    else:
        remedy = ("trace both on the same inputs, or declare each side's padding mask, "
                  "nbtrace.trace(model, padding_mask='<argument>')")
    return (f"the two float64 twins left out different padding ({words[0]}; {words[1]}), so their fingerprints "
            f"cover different positions; {remedy}")


def _padding_words(side: str, twin: Twin, pad: tuple[list[int], int] | None) -> str:
    if pad is None:
        return f"{side}'s run had no padding mask nbtrace found, and its twin kept every position"
    shape, left_out = pad
    where = f" ({twin.padding_from})" if twin.padding_from else ""
    if left_out < 0:
        return f"{side}'s by the mask {twin.padding}{where}"
    return f"{side}'s left out {left_out} of {math.prod(shape)} positions by its {shape} mask{where}"


def twin_verdict(comparison: Comparison) -> TwinVerdict | None:
    """The verdict from both traces' float64 twins, or None when they cannot be compared (``usable``)."""
    if usable(comparison) is not None:
        return None
    twin_a, twin_b = comparison.a.twin, comparison.b.twin
    differ = tuple(twin_a.constants) != tuple(twin_b.constants)
    ignore = re.compile(comparison.ignore) if comparison.ignore else None
    stored = stored_rounding(comparison)
    rounded = rounded_side(comparison) if stored else None
    walk = call_events(comparison, twin_a)
    events = _events(comparison, walk, twin_a, twin_b, Allowance(differ, 0.0 if rounded else stored, rounded),
                     ignore)
    verdict = TwinVerdict("nothing", events=events, constants_differ=differ, stored=0.0 if rounded else stored,
                          rounded=rounded)
    verdict.compared = sum(len(e.decided) for e in events)
    good: TwinEvent | None = None
    for index, event in enumerate(events):
        undecided = next((p for p in event.pairs if p.evidence is None), None)
        if undecided is not None and verdict.open_at is None:
            verdict.open_at, verdict.note = event.node, undecided.undecided or ""
        if event.flagged:
            if event.io == "input" and event.node.parent is None:
                verdict.state, verdict.event, verdict.culprit = "inputs", event, event.node
                return verdict
            verdict.state, verdict.event, verdict.good = "diverge", event, good
            culprit = _culprit(event, good, comparison.a.root)
            handed = handed_chain(walk, event, good, (twin_a, twin_b), key_walk(twin_b, comparison.b.root),
                                  Counterparts(comparison, twin_b).key_of) if good else None
            if handed is not None and culprit in handed[0].ancestors():  # narrower: only the calls it passed
                culprit, verdict.handed = handed  # through
            verdict.culprit = _fused_inside(culprit, comparison)
            return verdict
        if event.compared:
            good = event
    if verdict.open_at is not None:
        verdict.state = "open"
    elif verdict.compared:
        verdict.state = "agree"
    return verdict


def _culprit(event: TwinEvent, good: TwinEvent | None, root: Node) -> Node:
    """The call whose code ran between the last agreeing event and the flagged one (see the module docstring). A
    leaf whose inputs had nothing to compare (integer positions a summary holds no values of) is blamed itself:
    its reason says the difference may also come from the code that made its inputs."""
    seen = event.node
    if event.io == "output" and not seen.children and (good is None or good.node is not seen):
        return seen
    if good is None:
        return root
    if event.io == "output" and (good.node is seen or seen in good.node.ancestors()):
        return seen  # its inputs, or everything inside it, agreed: its own code
    return innermost(good.node, seen)


def _fused_inside(culprit: Node, comparison: Comparison) -> Node:
    """The one call inside ``culprit`` with no counterpart whose fused weight the other side's parts hold otherwise
    (``fused_weights.py``: timm's ``qkv`` against a port's value projection scaled), else ``culprit``: its own
    code is the only other place the difference can be born."""
    if not culprit.children:
        return culprit
    fused = {w.module_path for w in comparison.weights if w.kind == "fused" and w.serious}
    unmatched = {id(n) for n in comparison.unmatched_a}
    found = [n for n in culprit.walk() if n.module_path in fused and id(n) in unmatched]
    return found[0] if len(found) == 1 else culprit


def innermost(x: Node, y: Node) -> Node:
    held = {id(n) for n in (x, *x.ancestors())}
    return next(n for n in (y, *y.ancestors()) if id(n) in held)


def _events(comparison: Comparison, walk: list, twin_a: Twin, twin_b: Twin, allowance: Allowance,
            ignore: re.Pattern[str] | None) -> list[TwinEvent]:
    """Every compared event of a's calls, in the order the twin made them (``walk``: calls pruning left out of the
    files included, ``twin_calls.py``)."""
    events: list[TwinEvent] = []
    weights: dict[str, list] = {}
    for finding in comparison.weights:  # weights the fingerprints show converted wrongly: no kernel does that
        if finding.serious:
            weights.setdefault(finding.module_path, []).append(finding)
    counterparts = Counterparts(comparison, twin_b)
    root_a, root_b = comparison.a.root, comparison.b.root
    given = ({p.sums for p in twin_a.of(root_a).values()}, {p.sums for p in twin_b.of(root_b).values()}) \
        if allowance.stored else None  # the model's own inputs, wherever they are handed on unchanged
    for call, io in walk:
        b_key, theirs = counterparts.of(call)
        if b_key is None:
            continue
        mine = twin_a.calls.get(call_key(call.module_path, call.call_index), {})
        mine, theirs = resolve(mine, theirs)  # a tensor-parallel twin's plain pieces, read by the other side's
        match = comparison.match_of(call) if isinstance(call, Node) else None
        if match is not None:  # the order the calls were handed their tensors (a file's twin keeps its places sorted)
            mine, theirs = _in_call_order(mine, match.a), _in_call_order(theirs, match.b)
        exact = [d for d in match.diffs if d.io == io and d.ok is not None and d.rtol == 0
                 and d.basis != "shape"] if match is not None else []
        if match is not None and io == "output" and not call.children and events and events[-1].node is call \
                and events[-1].decided and not local_pieces(comparison):  # its inputs compared and agreed: an
            # output of another size is born here (where the files hold whole tensors, not one rank's pieces)
            exact += [d for d in match.diffs if d.io == io and d.basis == "shape" and d.arg == _first_out(match)]
        event = TwinEvent(call, io, pairs(mine, theirs, io, allowance, ignore, given), exact)
        if io == "output" and not call.children:
            found = weights.get(call.module_path, [])
            agreed = bool(event.pairs) and all(p.evidence is not None and p.score < 1.0 for p in event.pairs)
            if agreed:
                # its float64 outputs agree: a square matrix held transposed is the other layout of the same
                # product (a Flax kernel against nn.Linear's weight, in a layer block pruning kept out of the files)
                found = [same_product(w) if w.kind == "transposed" else w for w in found]
            # and no finding of its weights is evidence of a difference its float64 function does not show (a
            # weight's structure is evidence only where values agree with it)
            event.weights = [] if agreed else [weight_evidence(w) for w in found if w.serious]
        if event.pairs or event.exact or event.weights:
            events.append(event)
    return events


def _in_call_order(prints: dict, node: Node) -> dict:
    """A call's twin places in the order its trace lists its tensors (the first argument first: a JAX call's ``x``
    before the ``act`` dict it is handed beside it), the places the trace does not list after them."""
    order = {arg: i for i, (_, arg, _) in enumerate(node.tensors())}
    return dict(sorted(prints.items(), key=lambda item: order.get(item[0], len(order))))


def _first_out(match) -> str | None:
    """The place of the first output a's call recorded (the tensor it hands on)."""
    return next((d.arg for d in match.diffs if d.io == "output"), None)
