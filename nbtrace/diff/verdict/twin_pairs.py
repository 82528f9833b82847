"""One compared tensor of two float64 twins and its test: how far the twins are apart, against what their own
float64 precision, measured, allows (``twin_verdict.py`` walks the calls; this is the test at one tensor).

The fingerprints compare two tensors in their flat order (a reshape, heads split or merged, is the same values),
and through the layout sums where one holds the other's axes in another order (channels last against channels
first: ``core/twin.py``'s ``q``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ...core.twin import TwinPrint
from ..align.shapes import same_axes, same_flat_order
from .evidence import Evidence

K_TWIN = 2.0
U64 = 2.0**-53
#: where the two sides' float constants differ, this many of their roundings are allowed: a table computed through
#: several operations in its dtype errs by more than one (Whisper's float32 sinusoid table against one computed in
#: float64: up to 2.97 of the perturbation's roundings over 3 seeds, fp32 and bf16, tests/models/encdec.py)
CONSTANT_ROUNDINGS = 8.0
#: the fingerprints' own float64 arithmetic: a projection sums 4096 products (√4096 roundings)
FLOOR_UNITS = 64.0


@dataclass
class TwinPair:
    """One compared tensor of an aligned call: both fingerprints, and the test."""

    io: str
    arg: str
    b_arg: str
    a: TwinPrint
    b: TwinPrint
    evidence: Evidence | None = None  # None: not decidable (``undecided`` says why)
    undecided: str | None = None
    #: the RMS difference the evidence measured; ``layout``: from the layout sums (the tensors compared whatever
    #: order each holds its axes in: channels last against channels first)
    difference: float = 0.0
    layout: bool = False

    @property
    def score(self) -> float:
        return self.evidence.score if self.evidence is not None else 0.0


@dataclass(frozen=True)
class Allowance:
    """What besides float64 rounding may separate two correct twins: constants computed differently (``differ``),
    and weights stored in a narrower dtype on one side (``stored``: that dtype's unit roundoff, else 0). Where the
    wider side's twin also ran with its model rounded into the narrower side's dtype (``rounded``: "a" or "b", the
    wider side), that run is compared instead, and the weights' rounding needs no allowance at all."""

    differ: bool
    stored: float
    rounded: str | None = None


def pairs(mine_all: dict[str, TwinPrint], theirs_all: dict[str, TwinPrint], io: str, allowance: Allowance,
           ignore: re.Pattern[str] | None, given: tuple[set, set] | None = None) -> list[TwinPair]:
    """The tensors of one event paired: by place name where both have it with as many elements, else in order
    among those of equal size; places the ``ignore`` pattern names are left out. A fingerprint projects the
    elements in their flat order, so two shapes pair where one splits or merges neighbouring dimensions of
    the other (``[B, T, N, H]`` and ``[B, T, N*H]``); the layout sums compare the same axes held in another order
    (``[B, C, H, W]`` and ``[B, H, W, C]``); never where the elements are laid out otherwise (pixels
    ``[B, C, H, W]`` and their patches ``[B, T, C*P*P]``: the alignment's pairing, not a fingerprint)."""
    prefix = "out" if io == "output" else ("args.", "kwargs.")
    mine = [(p, t) for p, t in mine_all.items() if p.startswith(prefix) and not _ignored(p, ignore)]
    theirs = [(p, t) for p, t in theirs_all.items() if p.startswith(prefix) and not _ignored(p, ignore)]
    pairs, used = [], set()
    for place, print_a in mine:
        pick = None
        for fits in (lambda t: same_flat_order(t.shape, print_a.shape),
                     lambda t: same_axes(t.shape, print_a.shape, t, print_a)):  # another order of the same axes
            pick = next((k for k, (q, t) in enumerate(theirs) if k not in used and q == place and fits(t)), None)
            if pick is None:
                pick = next((k for k, (_, t) in enumerate(theirs) if k not in used and fits(t)), None)
            if pick is not None:
                break
        if pick is None:
            continue
        used.add(pick)
        b_place, print_b = theirs[pick]
        pair = TwinPair(io, place, b_place, print_a, print_b)
        judge(pair, allowance, given is not None and print_a.sums in given[0] and print_b.sums in given[1])
        if pair.evidence is not None or pair.undecided is not None:
            pairs.append(pair)
    return pairs


def _ignored(place: str, ignore: re.Pattern[str] | None) -> bool:
    """Places the ``ignore`` pattern names, and attention masks: a mask is one input in several representations
    (additive with ``finfo.min`` or ``-inf``, ``0``/``1``, ``-1e4``) whose meaning shows in what reads it."""
    return "mask" in place.lower() or ignore is not None and ignore.search(place) is not None


def judge(pair: TwinPair, allowance: Allowance, given: bool = False) -> None:
    """Evidence (or why none) for one pair of twin fingerprints. ``given``: the model's own inputs, which a port
    that stores its weights in a narrower dtype is given rounded into it (each element moved by at most that
    dtype's unit roundoff: the RMS of the difference at most ``stored`` times the inputs' RMS)."""
    a, b = pair.a, pair.b
    differ = allowance.differ
    if a.numel != b.numel or a.kept != b.kept and a.left_out == b.left_out:
        return  # another size, or rows kept differently: nothing the twins can say
    if a.left_out != b.left_out and pair.io == "input":
        return  # a mask's fill in one representation and not the other: the call that reads it is judged
    if a.left_out != b.left_out:  # NaN, inf or a mask's fill where the other twin holds as many values
        sentence = (f"the float64 twin of one side holds {b.left_out} NaN, infinite or sentinel values where the "
                    f"reference's holds {a.left_out}: no rounding makes a NaN or an infinity in float64")
        pair.evidence = Evidence("broken", math.inf, 0.0, math.inf, sentence, "twin")
        return
    if a.kept == 0:
        return
    if a.low or b.low:
        side = "the reference's" if a.low else "the port's"
        pair.undecided = f"{side} float64 twin is not float64 from here on ({a.low or b.low})"
        return
    pair.layout = not same_flat_order(a.shape, b.shape)
    difference = _difference(pair, allowance)
    s_a, s_b = a.s64 or 0.0, b.s64 or 0.0
    constants = CONSTANT_ROUNDINGS * ((a.sconst or 0.0) + (b.sconst or 0.0)) if differ else 0.0
    # one rounding of every stored weight to the narrower dtype moves a twin by about s64 scaled from float64's
    # unit roundoff to that dtype's (the perturbation's effect is linear at these sizes)
    stored = max(s_a, s_b) * allowance.stored / U64 if allowance.stored else 0.0
    scale = max(a.rms, b.rms)
    rounded = allowance.stored * scale if given else 0.0
    allowed = K_TWIN * (s_a + s_b + constants + stored) + FLOOR_UNITS * U64 * scale + rounded
    score = difference / allowed if allowed > 0 else (math.inf if difference > 0 else 0.0)
    if score >= 1.0 and not pair.layout and a.layout is not None and b.layout is not None:
        # the same shape, other values in their flat order: the same values with axes of one size held in another
        # order (channels last against channels first where the channels are as many as the pixels in a row)?
        pair.layout = True
        held = _difference(pair, allowance)
        if held / allowed < 1.0 if allowed > 0 else held == 0:
            difference, score = held, held / allowed if allowed > 0 else 0.0
        else:
            pair.layout = False
    pair.difference = difference
    also = (" (from the layout sums: the two tensors hold their axes in another order)" if pair.layout else "")
    also += (f" and {CONSTANT_ROUNDINGS:g} roundings of the float constants each side computed for itself (they "
             f"differ) {_n(constants)}" if differ else "")
    if stored:
        also += f" and the weights one side stores in a narrower dtype {_n(stored)}"
    if rounded:
        also += f" and the inputs rounded once into that dtype {_n(rounded)}"
    if allowance.rounded:
        also += (f" (the {'reference' if allowance.rounded == 'a' else 'port'}'s twin run with its weights and inputs "
                 f"rounded to bfloat16, as the other side stores them)")
    sentence = (f"the two float64 twins differ by {_n(difference)} (RMS, {_n(difference / scale if scale else 0.0)} "
                f"relative) where their own float64 precision, measured, is {_n(s_a)} (reference) and {_n(s_b)} "
                f"(port){also}, and k = {K_TWIN:g} allows {_n(allowed)}")
    pair.evidence = Evidence("twin", difference, allowed, score, sentence, "twin")


def _difference(pair: TwinPair, allowance: Allowance) -> float:
    """The RMS difference of a pair's two twins, from the sums ``pair.layout`` names; against the bfloat16-rounded
    run of the side that stores wider weights where the other stores bfloat16 (``allowance.rounded``)."""
    a, b = pair.a, pair.b
    if allowance.rounded == "a" and a.bf16 is not None:
        return a.distance(b, rounded=True, layout=pair.layout)
    if allowance.rounded == "b" and b.bf16 is not None:
        return b.distance(a, rounded=True, layout=pair.layout)
    return a.distance(b, layout=pair.layout)


def _n(value: float) -> str:
    return f"{value:.2g}" if value else "0"
