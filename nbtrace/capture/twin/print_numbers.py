"""From a fingerprint's numbers (``signs.WIDTH`` floats) to the sidecar's ``twin`` section: torch-free, the one home
of this arithmetic and of the section's calls for the PyTorch capture (``record.py``) and the JAX capture
(``nbtrace/jax/twin.py``)."""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from .signs import AXIS_SUMS, KEPT, LEFT_OUT, SUMS, SUMSQ, WIDTH


def sensitivity(values: Sequence[float], perturbed: Sequence[float] | None) -> float | None:
    """The RMS by which a perturbed run moved one tensor, from the two fingerprints (None: not seen)."""
    if perturbed is None:
        return None
    kept = values[KEPT]
    if kept <= 0 or perturbed[KEPT] != kept:
        return None
    found = math.sqrt(sum([(a - b) ** 2 for a, b in zip(values[:SUMS], perturbed[:SUMS])]) / kept)
    return float(f"{found:.6g}") if math.isfinite(found) else None


def accumulated(twin: Sequence[float], run: Sequence[float] | None) -> tuple[float | None, float | None, int]:
    """``(acc, run_rms, run_out)``: the RMS of the run's output against the twin's and the RMS of the run's output
    itself (None: not measured), and how many of the run's values were left out (NaN, inf, sentinels) beyond the
    twin's."""
    if run is None:
        return None, None, 0
    finite = all(map(math.isfinite, run[:LEFT_OUT]))
    run_out = int(run[LEFT_OUT]) if finite else max(int(run[LEFT_OUT]), 1)
    extra = max(run_out - int(twin[LEFT_OUT]), 0)
    if not finite or run[KEPT] != twin[KEPT] or twin[KEPT] <= 0:
        return None, None, extra
    delta = sum([(a - b) ** 2 for a, b in zip(run[:SUMS], twin[:SUMS])])
    size = math.sqrt(run[SUMSQ] / run[KEPT])
    return float(f"{math.sqrt(delta / twin[KEPT]):.6g}"), float(f"{size:.9g}"), extra


def twin_entry(shape: Sequence[int], values: Sequence[float], s64: float | None, sconst: float | None,
               low: str | None, run: Sequence[float] | None, bf16: Sequence[float] | None = None) -> dict:
    """The sidecar's entry of one float tensor of the twin (``core/twin.py``'s ``TwinPrint.to_dict``); ``bf16``:
    the fingerprint of the same tensor in the twin run with the model rounded to bfloat16 (``forward.ROUNDED``).

    Built as ``TwinPrint(...).to_dict()`` builds it, key for key and bit for bit, without the ``TwinPrint``: a
    20,000-call model writes some 60,000 entries (``tests/test_twin_entry.py`` holds the two the same)."""
    kept = int(values[KEPT])
    finite = all(map(math.isfinite, values[:LEFT_OUT]))  # a +inf: the sums cannot be used
    entry: dict[str, Any] = {"shape": list(shape), "p": _packed(values[:SUMS]) if finite else _ZEROS, "n": kept,
                             "rms": math.sqrt(values[SUMSQ] / kept) if kept and finite else 0.0}
    left_out = int(values[LEFT_OUT]) if finite else max(int(values[LEFT_OUT]), 1)
    acc, run_rms, run_out = accumulated(values, run)
    if left_out:
        entry["out"] = left_out
    if run_out:
        entry["run_out"] = run_out
    for name, value in (("s64", s64), ("sconst", sconst), ("low", low), ("acc", acc), ("run_rms", run_rms)):
        if value is not None:
            entry[name] = value
    rounded = bf16 is not None and int(bf16[KEPT]) == kept and all(map(math.isfinite, bf16[:SUMS]))
    if rounded:
        entry["p_bf16"] = _packed(bf16[:SUMS])  # type: ignore[index]
    layout = _layout(values) if finite else None
    if layout is not None:
        entry["q"] = _packed(layout)
    layout_rounded = _layout(bf16) if rounded else None  # type: ignore[arg-type]
    if layout_rounded is not None:
        entry["q_bf16"] = _packed(layout_rounded)
    return entry


def _packed(values: Sequence[float]) -> str:
    """Little-endian float64 values in base64, as ``TwinPrint.to_dict`` writes sums."""
    return base64.b64encode(struct.pack(f"<{len(values)}d", *values)).decode("ascii")


_ZEROS = _packed((0.0,) * SUMS)


def _layout(values: Sequence[float]) -> Sequence[float] | None:
    """The layout sums that follow a fingerprint's ``WIDTH`` numbers (``signs.axis_signs``), or None: none taken, or
    not finite."""
    found = values[WIDTH:WIDTH + AXIS_SUMS]
    if len(found) != AXIS_SUMS or not all(map(math.isfinite, found)):
        return None
    return found


#: call name -> place -> a fingerprint's numbers (what each capture has on the host once its forward is done)
Numbers = Mapping[str, Mapping[str, Sequence[float]]]
_NONE: Mapping[str, Sequence[float]] = {}


def fill_calls(section: dict[str, Any], written: list[str],
               prints: Mapping[str, Mapping[str, tuple[Sequence[int], Sequence[float]]]],
               perturbed: Mapping[str, Numbers], run: Numbers, low: Mapping[str, str], events: Sequence[str]) -> None:
    """``section["calls"]``: the twin's entries for the calls of the tree as written (``written``, after pruning),
    then those pruning left out of the files, with ``events`` (every call's start and end, in order) so a verdict
    can look inside them. ``prints``: call -> place -> (shape, numbers); ``perturbed``: the perturbed twins'
    numbers by kind (``"float64"``: ``s64``, ``"constants"``: ``sconst``, ``"bfloat16"``: the rounded run's sums);
    ``run``: the run's own outputs'. Where one run stands for both perturbations (the same object under both
    kinds), each sensitivity is computed once."""
    kept = set(written)
    hidden = [key for key in prints if key not in kept]
    if hidden:
        section["events"] = list(events)
    moved, constants = perturbed.get("float64", {}), perturbed.get("constants", {})
    rounded = perturbed.get("bfloat16", {})
    calls = section["calls"]
    for key in written + hidden:
        places = prints.get(key)
        if not places:
            continue
        moved_here, constants_here = moved.get(key, _NONE), constants.get(key, _NONE)
        rounded_here, run_here, low_here = rounded.get(key, _NONE), run.get(key, _NONE), low.get(key)
        entries = calls[key] = {}
        for place, (shape, values) in places.items():
            s64 = sensitivity(values, moved_here.get(place))
            sconst = s64 if constants_here is moved_here else sensitivity(values, constants_here.get(place))
            entries[place] = twin_entry(shape, values, s64, sconst, low_here, run_here.get(place),
                                        rounded_here.get(place))


def padding_text(shape: Sequence[int], sums: Sequence[int]) -> str | None:
    """The section's ``padding``: the padding mask's shape and its two sums (plain, weighted by position); None for a
    mask of all ones, which leaves nothing out: no padding, the same as no mask."""
    if int(sums[0]) == math.prod(shape):
        return None
    return f"{list(shape)}:" + ":".join(f"{int(v) & 0xFFFFFFFFFFFFFFFF:x}" for v in sums)
