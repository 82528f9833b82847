"""What each side stores its float parameters in, and how a twin comparison accounts for one side's narrower dtype.

A float32 original against its bfloat16 port: the port's weights are the original's rounded, part of its rounding,
never a finding. ``rounded_side`` names the side whose float64 twin also ran with its model rounded to bfloat16
(``capture/twin/forward.py``'s rounded run, ``TwinPrint.bf16``): that run is compared with the other side's twin,
float64 against float64. ``stored_rounding`` is the fallback: the unit roundoff of the narrower dtype, from which
the twin verdict allows what one rounding of every weight moves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ...core.trace import Trace
    from ..comparison import Comparison


def rounded_side(comparison: Comparison) -> str | None:
    """"a" or "b": the side whose float64 twin also ran with its weights (and its float inputs) rounded to bfloat16,
    where the other side stores every float parameter in bfloat16 and takes its float inputs (if any) in it: that
    run is the wider side's function as the narrower side holds it. None otherwise."""
    dtypes = [_parameter_dtypes(comparison.a, floats_only=True), _parameter_dtypes(comparison.b, floats_only=True)]
    for wide, narrow in ((0, 1), (1, 0)):
        if dtypes[narrow] != {"bfloat16"} or not dtypes[wide] - {"bfloat16"}:
            continue
        trace_wide, trace_narrow = (comparison.a, comparison.b) if wide == 0 else (comparison.b, comparison.a)
        twin = trace_wide.twin
        if twin is None or not any(p.bf16 is not None for p in twin.of(trace_wide.root).values()):
            continue
        floats = [t.dtype for t in trace_narrow.root.input_tensors() if t.dtype and "float" in t.dtype]
        if all(d.endswith("bfloat16") for d in floats):
            return "ab"[wide]
    return None


def _parameter_dtypes(trace: Trace, floats_only: bool = False) -> set:
    """The dtypes a trace's sidecar shows its parameters (not buffers) stored in (``floats_only``: float ones)."""
    section = trace.sidecar.get("parameters") or {}
    return {t.get("dtype") for tensors in section.values() if isinstance(tensors, dict)
            for t in tensors.values() if isinstance(t, dict) and t.get("kind", "parameter") == "parameter"
            and (not floats_only or str(t.get("dtype", "")).startswith(("float", "bfloat")))}


def stored_rounding(comparison: Comparison) -> float:
    """The unit roundoff by which one side's stored parameters may be the other's rounded: 0 when both hold their
    float parameters in the same dtypes, else that of the narrowest float dtype either holds (a float32 original
    against its bfloat16 port: the port's weights are the original's rounded to bfloat16, part of its rounding)."""
    kinds = [_parameter_dtypes(comparison.a), _parameter_dtypes(comparison.b)]
    units = {name: UNITS.get(name, 0.0) for name in kinds[0] | kinds[1]}
    if kinds[0] == kinds[1] or not any(units.values()):
        return 0.0
    return max(units.values())


UNITS = {"float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11, "float8_e4m3fn": 2.0**-4,
         "float8_e5m2": 2.0**-3}
