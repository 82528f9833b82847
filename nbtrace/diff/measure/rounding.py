"""The rules of "more than rounding": rounding is measured against a float64 truth, never modelled.

Every rule compares RMS norms (absolute, over the finite elements), so the triangle inequality
does the arguing: if two results each lie within ``e`` of their own float64 truth, the truths lie
within ``d + 2e`` of each other. A rule turns that into ``Evidence`` with ``score`` = difference /
allowed; a score above 1 PROVES that the two functions differ (``DECISIVE``). ``k`` is named in
every sentence: 2 where both sides' rounding is measured, 3 where the port's own rounding stands in
for the reference's (as flash-attention's kernel tests and ``torch._dynamo.utils.same(fp64_ref)``
do). The ``floor`` is a few float32 ulps of the result's scale: a float64 re-run is only as precise
as the lowest cast inside the module (``.to(torch.float32)`` in a norm makes its truth float32-exact).

Where nothing was measured (two trace folders recorded without ``measure_rounding``), the only
test left is a model of rounding (``magnitude``); it never names a module on its own (it is not
``DECISIVE``): a difference beyond it leaves the comparison "unresolved" at that call.
"""

from __future__ import annotations

import math

from ..verdict.evidence import Evidence
from .noise import DiffStats, dtype_name

CERTAIN = 3.0  # a score this many times the allowed difference is "certain"
SUSPECT = 0.9  # a call scoring this close to a flag is named as a suspect
U32 = 2.0**-24
#: the floor: this many float32 unit roundoffs of the result's RMS (the truth's own precision)
FLOOR_ULPS = 4.0
K_MEASURED = 2.0  # both sides' rounding measured
K_STAND_IN = 3.0  # the port's rounding stands in for the reference's
#: tests whose flag proves a difference of function (the others only say "unresolved")
DECISIVE = frozenset({"broken", "exact", "weights", "proven", "replayed", "live", "twin", "bound"})
# the model of rounding for files without measurements (an "unresolved" hint, never decisive)
K_LEAF, K_CODE = 1.3, 1.6
B_LEAF, B_CODE, B_INPUTS = 1.0, 4.0, 1.0


def confidence(score: float) -> str:
    """"certain" or "likely" for a flagged score."""
    return "certain" if score >= CERTAIN else "likely"


def floor(scale: float) -> float:
    """The smallest difference a rule can resolve at a result of RMS ``scale``."""
    return FLOOR_ULPS * U32 * scale


def number(value: float) -> str:
    """An RMS norm in a sentence."""
    return f"{value:.2g}" if value and math.isfinite(value) else ("0" if value == 0 else str(value))


def brief(evidence: Evidence) -> str:
    """A test's numbers in a few words, for the reason of a verdict (``Evidence.sentence`` says it in full)."""
    stat, limit = evidence.statistic, evidence.threshold
    if evidence.test in ("proven", "replayed", "live"):
        return f"{number(stat)} (RMS) where measured rounding allows {number(limit)}"
    if evidence.test == "magnitude":
        return f"{stat:.3g} u where a model of rounding allows {limit:.3g} u"
    return evidence.sentence


def accumulation(length: int, u: float) -> float:
    """Rounding of a sum of ``length`` terms accumulated in float32, in units of ``u`` (the model's part)."""
    return math.sqrt(max(length, 1)) * U32 / u if u > 0 else 0.0


def _ratio(statistic: float, threshold: float) -> float:
    if threshold > 0:
        return statistic / threshold
    return math.inf if statistic > 0 else 0.0


def magnitude(d: DiffStats, e_in: float, k: float, b: float, what: str) -> Evidence:
    """Files without measurements: the relative difference against what a model of rounding allows,
    ``√((k·e_in)² + (b·u)²)``. Not decisive: beyond it, the call is where the comparison is unresolved."""
    allowed = math.hypot(k * e_in, b * d.u)
    u = d.u or 1.0
    sentence = (
        f"{what} differ by {d.rel:.3g} relative RMS ({d.ulps:.3g} u of {dtype_name(d.u)}); a model of rounding "
        f"(not measured) allows {allowed / u:.3g} u given the {e_in / u:.3g} u it was handed"
    )
    return Evidence("magnitude", d.rel / u, allowed / u, _ratio(d.rel, allowed), sentence)


def proven(d: DiffStats, acc_a: float, acc_b: float, scale: float, what: str) -> Evidence:
    """Files, both sides measured: ``‖a − b‖ > k (acc_a + acc_b) + floor`` proves the float64 truths differ."""
    allowed = K_MEASURED * (acc_a + acc_b) + floor(scale)
    sentence = (
        f"{what} differ by {number(d.rms)} (RMS) where the reference's measured rounding is {number(acc_a)}, "
        f"the port's {number(acc_b)}, and k = {K_MEASURED:g} allows {number(allowed)}"
    )
    return Evidence("proven", d.rms, allowed, _ratio(d.rms, allowed), sentence)


def replayed(difference: float, reference_own: float | None, port_own: float, one: float, scale: float) -> Evidence:
    """Replay: the port's float64 result ``T_b`` against the reference's output ``y_a``.

    ``reference_own`` measured (``own`` of the reference's trace): k = 2 times it; else the port's own
    rounding ``‖p − T_b‖`` (at least one rounding of ``T_b`` to the dtype) stands in, k = 3.
    """
    if reference_own is not None:
        k, e, whose = K_MEASURED, reference_own, "the reference's own rounding"
    else:
        k, e, whose = K_STAND_IN, max(port_own, one), "the port's own rounding (standing in for the reference's)"
    allowed = k * e + floor(scale)
    sentence = (
        f"the port's float64 result differs from the reference's output by {number(difference)} (RMS) where "
        f"{whose} is {number(e)} and k = {k:g} allows {number(allowed)}"
    )
    return Evidence("replayed", difference, allowed, _ratio(difference, allowed), sentence, "replay")


def live(difference: float, r_a: float, r_b: float, scale: float) -> Evidence:
    """Both sides live: the two float64 results ``T_a``, ``T_b`` on the same inputs, against k = 2 times the
    truths' own precision (each side's float32 result against its float64 one)."""
    allowed = K_MEASURED * (r_a + r_b) + floor(scale)
    sentence = (
        f"run in float64 on the same inputs, the port's result differs from the reference's by "
        f"{number(difference)} (RMS) where the truths' own precision is {number(r_a)} (reference) and "
        f"{number(r_b)} (port), and k = {K_MEASURED:g} allows {number(allowed)}"
    )
    return Evidence("live", difference, allowed, _ratio(difference, allowed), sentence, "live")
