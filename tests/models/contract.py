"""Comparisons whose verdict contract is filled the way the noise-aware verdict fills it, for the view tests.

``diff/evidence.py`` promises ``Match.difference`` (own vs inherited difference in units of u, a score,
evidence) on every aligned call, ``FirstDivergence.evidence`` and ``Comparison.suspects``. Until the verdict
computes them all, ``fill_contract`` sets them on a real comparison from its own tensor numbers (an honest
stand-in: out and inherited are the call's worst output and input differences, own what it added), so the
views are tested against the contract, not against today's numbers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nbtrace.diff.evidence import CallDifference, Evidence

U32 = 2.0**-24  # float32's unit roundoff
OWN_THRESHOLD = 100.0  # units of u beyond which a stand-in call is said to add a difference of its own


def _worst(match: Any, io: str) -> float | None:
    found = [d.max_rel for d in match.diffs if d.io == io and d.max_rel is not None]
    return max(found) if found else None


def fill_contract(comparison: Any, suspects: list[tuple[str, float]] | None = None) -> Any:
    """Give every aligned call of ``comparison`` a CallDifference (and evidence where its own difference is
    beyond ``OWN_THRESHOLD``), the blamed call the observed difference as its own, and ``suspects``."""
    first = comparison.first_divergence
    for match in comparison.matches:
        inherited, out = _worst(match, "input"), _worst(match, "output")
        if first is not None and match.a is first.node and first.max_rel is not None:
            out = first.max_rel  # the blamed call's outputs are what its children were handed
        inherited_u = inherited / U32 if inherited is not None else None
        out_u = out / U32 if out is not None else None
        own = max(0.0, (out_u or 0.0) - (inherited_u or 0.0)) if out_u is not None else None
        score = own / OWN_THRESHOLD if own is not None else None
        evidence = []
        if score is not None and score >= 1:
            evidence.append(Evidence("magnitude", own, OWN_THRESHOLD, score,
                                     f"its own difference is {own:.3g} u, beyond the {OWN_THRESHOLD:g} u rounding allows"))
        match.difference = CallDifference(unit=U32, out=out_u, inherited=inherited_u, own=own, score=score,
                                          evidence=evidence)
    if first is not None:
        first.confidence = "certain"
        first.evidence = [*first.evidence, Evidence("magnitude", 5000.0, OWN_THRESHOLD, 50.0,
                                                    "its own difference is 5e+03 u, beyond the 100 u rounding allows")]
    comparison.suspects = list(suspects or [])
    return comparison


def porter_comparison(folder: Path, bug: str = "rounded_scale", *, use_repr: bool = False, prune: bool = False):
    """The porter of issue 9: transformers' Llama against the from-scratch port with one bug, fp32."""
    import nbtrace
    from tests.models.ports import trace_original, trace_port

    a = trace_original(folder / "a", use_repr=use_repr, prune=prune)
    b = trace_port(folder / "b", [bug], use_repr=use_repr, prune=prune)
    return nbtrace.compare(a, b)
