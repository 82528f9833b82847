"""The porter of issue 9 as every view test meets it: one comparison, judged as a porter would run it.

``porter_comparison`` traces transformers' Llama and the from-scratch port of ``tests/models/ports.py`` with one
bug (fp32). With full tensors (both traced with ``measure_rounding=True``) the verdict fills the whole contract
of ``diff/evidence.py``
(``Match.difference``: own vs inherited in units of u, ``FirstDivergence.evidence``, ``Comparison.suspects``);
``rtol=`` gives the per-element tolerance's comparison of the same traces instead (no own vs inherited, the
tolerance as evidence), so the views are tested with and without what only the noise-aware verdict measures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def with_suspects(comparison: Any, suspects: list[tuple[str, float]]) -> Any:
    """``comparison`` with ``suspects`` (calls close to a flag) set, for views that must show them."""
    comparison.suspects = list(suspects)
    return comparison


def porter_comparison(folder: Path, bug: str = "rounded_scale", *, use_repr: bool = False, prune: bool = False,
                      rtol: float | None = None):
    """The porter of issue 9: transformers' Llama against the from-scratch port with one bug, fp32 (traced into
    ``folder``/a and ``folder``/b)."""
    import nbtrace
    from tests.models.ports import trace_original, trace_port

    measure = not use_repr and rtol is None  # full tensors: both traces measure their rounding as they record
    a = trace_original(folder / "a", use_repr=use_repr, prune=prune, measure_rounding=measure)
    b = trace_port(folder / "b", [bug], use_repr=use_repr, prune=prune, measure_rounding=measure)
    return nbtrace.compare(a, b, rtol=rtol)
