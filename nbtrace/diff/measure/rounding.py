"""The tests of "more than rounding", shared by the verdict from files and by replay, and their thresholds.

Every test turns a statistic into a ``score`` = statistic / threshold (``Evidence``): a
score >= 1 says "not rounding", >= ``CERTAIN`` says so with certainty. Thresholds were set
on correct ports (transformers' Llama, eager attention against sdpa, random weights,
bf16/fp16/fp32) at about twice the largest value seen there, and checked on a held-out
seed, on inputs with and without padding, and on two other port structures
(``benchmarks/bench_precision.py`` prints the margins).
"""

from __future__ import annotations

import math

from ..verdict.evidence import Evidence
from .noise import DiffStats, dtype_name

CERTAIN = 3.0  # a score this many times its threshold is "certain"
SUSPECT = 0.9  # a call scoring this close to a flag is named as a suspect
# magnitude: what correct code may do to a relative error it is handed (K) and add to it (B, units of u)
K_LEAF, K_CODE = 1.3, 1.6  # measured on correct ports: leaves 1.2-1.3, a call's own code 1.4 (a product)
B_LEAF, B_CODE, B_INPUTS = 1.0, 4.0, 1.0  # a call's own code is several operations: eager vs sdpa up to 1.7 u
U32 = 2.0**-24
# coherence of a difference (files: net of the inputs'; replay: of the port's math against the reference)
SCALE_Z = 7.0  # correct ports: global-scale |z| up to 3.5 (files), 4.2 (replay)
VALUE_Z = 35.0  # correct ports: value-bin chi-square z up to 19 (files), 16 (replay)
COHERENCE_ELEMENTS = 256  # fewer elements make the scale and value statistics unreliable: not tested
SYSTEMATIC_FLOOR = 2.0  # a systematic part must exceed this many roundings of the reference's internal precision
# replay
MATH_RATIO = 1.6  # correct ports: port in float64 vs reference at most 1.16x the port's own rounding
ROWS_FREE = 30.0  # lost precision: the port's rounding row chi-square z > 3x the reference's + this


def confidence(score: float) -> str:
    """"certain" or "likely" for a flagged score."""
    return "certain" if score >= CERTAIN else "likely"


def brief(evidence: Evidence) -> str:
    """A test's numbers in a few words, for the reason of a verdict (``Evidence.sentence`` says it in full)."""
    stat, limit = evidence.statistic, evidence.threshold
    words = {
        "magnitude": f"{stat:.3g} u where rounding allows {limit:.3g} u",
        "math": f"{stat:.3g} u off in float64 where rounding allows {limit:.3g} u",
        "scale": f"a global scale, z = {stat:.3g} against {limit:.3g}",
        "values": f"a trend with the value, z = {stat:.3g} against {limit:.3g}",
        "precision": f"its rounding shared along rows, z = {stat:.0f} against {limit:.0f}",
        "broken": evidence.sentence,
    }
    return words.get(evidence.test, evidence.sentence)


def internal_u(u: float) -> float:
    """The precision the reference computes in inside an op: float32 for half-precision models (matmuls
    accumulate, norms and softmax upcast in float32), the dtype itself otherwise. A systematic difference
    smaller than a few of these can be the reference's own rounding (a biased rsqrt), not a bug."""
    return min(u, U32)


def accumulation(length: int, u: float) -> float:
    """Rounding of a sum of ``length`` terms accumulated in float32 (as matmuls do), in units of ``u``:
    nothing next to one bfloat16 rounding, 8 u in float32 for 64 terms."""
    return math.sqrt(max(length, 1)) * U32 / u if u > 0 else 0.0


def _ratio(statistic: float, threshold: float) -> float:
    if threshold > 0:
        return statistic / threshold
    return math.inf if statistic > 0 else 0.0


def magnitude(d: DiffStats, e_in: float, k: float, b: float, what: str) -> Evidence:
    """The difference against what the inherited ``e_in`` and ``b`` more roundings allow: ``√((k·e_in)² + (b·u)²)``."""
    allowed = math.hypot(k * e_in, b * d.u)
    u = d.u or 1.0
    sentence = (
        f"{what} differ by {d.rel:.3g} relative RMS ({d.ulps:.3g} u of {dtype_name(d.u)}); the difference it was "
        f"handed ({e_in / u:.3g} u) and its own rounding allow {allowed / u:.3g} u"
    )
    return Evidence("magnitude", d.rel / u, allowed / u, _ratio(d.rel, allowed), sentence)


def coherence(d: DiffStats, inputs: list[DiffStats], what: str, source: str = "files") -> list[Evidence]:
    """Scale and value tests on ``d``, each net of the same statistic of the ``inputs`` (what a
    correct computation passes on); the systematic part must also exceed ``SYSTEMATIC_FLOOR`` roundings of
    the reference's internal precision, and ``d`` hold at least ``COHERENCE_ELEMENTS`` elements."""
    found: list[Evidence] = []
    if d.n < COHERENCE_ELEMENTS:
        return found
    floor = SYSTEMATIC_FLOOR * internal_u(d.u)
    in_scale = max((abs(x.scale_z) for x in inputs if math.isfinite(x.scale_z)), default=0.0)
    if math.isfinite(d.scale_z):
        z = abs(d.scale_z)
        threshold = max(SCALE_Z, 2 * in_scale, z * floor / abs(d.scale) if d.scale else math.inf)
        score = _ratio(z, threshold)
        numbers = (f"b is the reference times (1{d.scale:+.3g}), z = {d.scale_z:+.1f} against {threshold:.3g} "
                   f"(its inputs' largest |z| {in_scale:.1f})")
        sentence = (f"{what}: {numbers}; rounding has no preferred direction" if score >= 1
                    else f"{what}: no scale beyond rounding: {numbers}")  # a sentence says what the numbers show
        found.append(Evidence("scale", z, threshold, score, sentence, source))
    in_value = max((x.value_z for x in inputs), default=0.0)
    threshold = max(VALUE_Z, 2 * in_value, d.value_z * floor / d.trend if d.trend > 0 else math.inf)
    score = _ratio(d.value_z, threshold)
    numbers = (f"binned by the reference's value, chi-square z = {d.value_z:.1f} against {threshold:.3g}, its inputs' "
               f"{in_value:.1f}; a trend of {d.trend:.2g} relative")
    sentence = (f"{what}: its difference depends on the value ({numbers}); rounding averages to zero in every bin"
                if score >= 1 else f"{what}: no trend with the value beyond rounding ({numbers})")
    found.append(Evidence("values", d.value_z, threshold, score, sentence, source))
    return found


def replay_math(math_rel: float, rounding_rel: float, ideal_rel: float, u: float) -> Evidence:
    """Replay: the port computed in float64 against the reference's output, beside the port's own rounding."""
    base = max(rounding_rel, ideal_rel)
    threshold = MATH_RATIO * base
    sentence = (
        f"run on the reference's inputs in float64 the port differs from the reference's output by "
        f"{math_rel / u:.3g} u, where its own rounding is {rounding_rel / u:.3g} u and one rounding of the exact "
        f"result {ideal_rel / u:.3g} u (limit {threshold / u:.3g} u)"
    )
    return Evidence("math", math_rel / u, threshold / u, _ratio(math_rel, threshold), sentence, "replay")


def replay_precision(port_rows: float, reference_rows: float, own_ulps: float) -> Evidence:
    """Replay: the port's rounding shared along rows far more than the reference's (a per-row statistic kept in
    the model dtype, not float32)."""
    threshold = 3 * max(reference_rows, 0.0) + ROWS_FREE
    sentence = (
        f"the port's own rounding is shared along rows (chi-square z = {port_rows:.0f} against {threshold:.0f}; "
        f"the reference's {reference_rows:.0f}): a per-row statistic (a variance, a maximum) computed in the model "
        f"dtype instead of float32; its own difference is {own_ulps:.3g} u"
    )
    return Evidence("precision", port_rows, threshold, _ratio(port_rows, threshold), sentence, "replay")
