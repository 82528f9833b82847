"""The porter of issue 9 as every view test meets it: one comparison, judged as a porter would run it.

``porter_comparison`` traces transformers' Llama and the from-scratch port of ``tests/models/ports.py`` with one
bug (fp32). With full tensors (and their rounding measured: ``measured_standin.py`` until the capture side
lands) the verdict fills the whole contract of ``diff/evidence.py``
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
    import inspect

    import nbtrace
    from tests.models.measured_standin import measure, measured
    from tests.models.ports import TinyLlamaPort, build_original, make_inputs, trace_original, trace_port

    a = trace_original(folder / "a", use_repr=use_repr, prune=prune)
    b = trace_port(folder / "b", [bug], use_repr=use_repr, prune=prune)
    if use_repr or rtol is not None:
        return nbtrace.compare(a, b, rtol=rtol)
    # full tensors: both traces with their rounding measured (a stand-in for trace(..., measure_rounding=True))
    ids, mask = make_inputs()
    port = TinyLlamaPort.from_original(build_original(), {bug})
    names = list(inspect.signature(port.forward).parameters)[:2]
    with measured((a, measure(build_original(), {"input_ids": ids, "attention_mask": mask, "use_cache": False})),
                  (b, measure(port, dict(zip(names, (ids, mask)))))):
        return nbtrace.compare(a, b)
