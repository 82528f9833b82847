"""Every weight a comparison lists as differing: the aligned modules' (``weights.py``) and the projections one side
fuses where the other splits them (``fused_weights.py``), from the two sidecars' fingerprints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .fused_weights import fused_findings
from .weights import WeightFinding, compare_parameters

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison, Match


def weight_findings(comparison: Comparison) -> list[WeightFinding]:
    """The findings of ``comparison.weights`` (empty where a trace has no fingerprints)."""
    a_section = comparison.a.sidecar.get("parameters", {})
    b_section = comparison.b.sidecar.get("parameters", {})
    agree: dict[str, bool] = {}  # a module whose every aligned call agrees computes the same function
    for match in comparison.matches:
        path = match.a.module_path.split(" ", 1)[0]
        agree[path] = agree.get(path, True) and _same_product(match)
    pairs = comparison.alignment.pairs
    return (compare_parameters(pairs, a_section, b_section, agree)
            + fused_findings(pairs, comparison.unmatched_a, comparison.unmatched_b, a_section, b_section))


def _same_product(match: Match) -> bool:
    """The call's outputs agree, or point the same way (cosine above 1/2) where they inherit a difference: a
    matrix multiplied from the wrong side gives a product unrelated to the right one (cosine near 0)."""
    outputs = [d for d in match.diffs if d.io == "output"]
    return match.verdict() is True or bool(outputs) and all(d.cosine is not None and d.cosine > 0.5 for d in outputs)
