"""Weights, named directly: which parameters of aligned modules differ between two traces, and how.

Reads the fingerprints of the sidecar's ``parameters`` section (``capture/parameters.py``):
statistics, a bit checksum, row/column block norms, which narrower dtypes hold the tensor
exactly, and values at fixed positions (and those of its transpose, for a matrix).
From those alone a difference is classified as one of: missing, extra, shape, transposed,
scaled, rows (one block of rows off), columns, rounded (as by a lossy dtype round trip),
dtype (another dtype, values agreeing to its rounding), layout (the same values in the same flat order under
another shape), bits (below what fingerprints
resolve), perturbed (anything else), with the numbers that show it.

Weights are evidence of a function, so what computes the same product is not a difference:
a matrix stored transposed in the other layout (GPT-2's ``Conv1D`` ``[in, out]`` as an
``nn.Linear`` ``[out, in]``) whose values the fingerprint proves the same (``layout``), another
dtype that holds the values (``dtype``), one part of a fused tensor or a fused one against its
parts (``fused``: its values are judged by the calls' outputs). A transposed matrix that also
differs is compared in a's layout, so a 1.01 scale reads "stored transposed, and scaled by 1.01".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...core.node import Node
from .evidence import Evidence
from .weight_layouts import UNIT_ROUNDOFF, floats, short_number, permuted, rearranged_differs, same_axes_of

_IDENTITY = ("checksum", "shape", "dtype", "samples", "mirrored_samples", "row_blocks", "col_blocks")
_SAME = 1e-6  # relative differences below this are what 7-digit fingerprints cannot resolve


@dataclass
class WeightFinding:
    """One parameter (or buffer) that differs between an aligned pair of modules.

    ``kind`` names the kind of difference (see the module docstring); ``detail`` says it in
    a sentence with numbers; ``rel_diff`` estimates ``‖b − a‖ / ‖a‖`` from the sampled
    values (None when shapes differ); ``serious`` is False for differences a correct port
    may have (another dtype whose values agree to its rounding, bit-level noise).
    """

    module_path: str
    b_path: str | None
    name: str
    kind: str
    detail: str
    rel_diff: float | None = None
    serious: bool = True

    def __str__(self) -> str:
        return f"{self.module_path}.{self.name}: {self.detail}"


def compare_parameters(
    pairs: Iterable[tuple[Node, Node]], a_section: dict[str, Any], b_section: dict[str, Any],
    agree: Mapping[str, bool] | None = None,
) -> list[WeightFinding]:
    """Findings for every aligned pair of calls whose modules' tensors differ (each module once), and for the
    modules of layer blocks that pruning kept out of both traces (paired through their kept neighbours).

    ``agree`` maps a's module paths to whether every aligned call of the module agrees (inputs and outputs):
    a square matrix stored transposed there is the other layout of the same product (Conv1D against
    nn.Linear), not a difference; without calls that agree it stays a transposed weight."""
    findings: list[WeightFinding] = []
    seen: set[tuple[str, str]] = set()
    pairs = list(pairs)
    paths = [(x.module_path, y.module_path) for x, y in pairs] + pruned_paths(pairs, a_section, b_section)
    for path_a, path_b in paths:
        key = (_module_of(path_a), _module_of(path_b))
        if key in seen:
            continue
        seen.add(key)
        mine, theirs = a_section.get(key[0]), b_section.get(key[1])
        if not isinstance(mine, dict) or not isinstance(theirs, dict):
            continue
        found = _compare_module(key[0], key[1], mine, theirs)
        if agree and agree.get(key[0]):
            found = [same_product(w) if w.kind == "transposed" else w for w in found]
        findings.extend(found)
    return findings


def same_product(finding: WeightFinding) -> WeightFinding:
    """A transposed square matrix of a module whose calls agree: the other layout of the same product."""
    finding.kind, finding.serious = "layout", False
    finding.detail = f"{finding.detail}; the module's calls agree, so it is the other layout of the same product"
    return finding


#: weight findings that a correct conversion never shows, and the score each gives the module
WEIGHT_SCORES = {"transposed": 3.0, "shape": 3.0, "scaled": 3.0, "rows": 3.0, "columns": 3.0, "rounded": 3.0,
                 "missing": 3.0, "perturbed": 2.0, "dtype": 2.0}


def weight_evidence(finding: WeightFinding) -> Evidence:
    """A serious weight finding as evidence for its module (``test == "weights"``)."""
    score = WEIGHT_SCORES.get(finding.kind, 2.0)
    return Evidence("weights", score, 1.0, score, f"{finding.module_path}.{finding.name}: {finding.detail}", "weights")


def serious_inside(findings: list[WeightFinding], path: str) -> list[WeightFinding]:
    """The serious findings of the module at ``path`` and of the modules inside it (pruned ones too)."""
    return [w for w in findings if w.serious and (w.module_path == path or w.module_path.startswith(path + "."))]


def pruned_paths(pairs: list[tuple[Node, Node]], a_section: dict[str, Any],
                 b_section: dict[str, Any]) -> list[tuple[str, str]]:
    """Module paths of a and b inside layer blocks neither trace holds (pruned): ``prefix.N…`` of a with the
    same ``N`` under b's prefix, the prefixes read from the layer blocks the two traces do pair."""
    prefixes = {}
    for x, y in pairs:
        if x.is_layer_block and y.is_layer_block:
            prefixes[x.module_path.rsplit(".", 1)[0]] = y.module_path.rsplit(".", 1)[0]
    kept = {x.module_path for x, _ in pairs}
    found = []
    for path in a_section:
        for prefix_a, prefix_b in prefixes.items():
            if not path.startswith(prefix_a + "."):
                continue
            block = prefix_a + "." + path[len(prefix_a) + 1:].split(".", 1)[0]
            other = prefix_b + path[len(prefix_a):]
            if block not in kept and other in b_section:
                found.append((path, other))
    return found


def _module_of(path: str) -> str:
    """The module a call belongs to: the root's call is recorded as ``Class (top-level)`` only in files."""
    return path.split(" ", 1)[0]


def _compare_module(a_path: str, b_path: str, mine: dict, theirs: dict) -> list[WeightFinding]:
    """Tensors pair by name, then the rest by shape (a port may call ``weight`` ``scale``), then the one left on
    each side when one is the other's transposed layout or a part of it (fused)."""
    found = []
    pairs = [(name, name) for name in mine if name in theirs]
    only_a = [name for name in mine if name not in theirs]
    only_b = [name for name in theirs if name not in mine]
    for name in list(only_a):
        same_shape = [other for other in only_b if theirs[other].get("shape") == mine[name].get("shape")]
        if same_shape:
            best = min(same_shape, key=lambda other: _distance(mine[name], theirs[other]))
            pairs.append((name, best))
            only_a.remove(name)
            only_b.remove(best)
    if len(only_a) == len(only_b) == 1 and _reversed_or_fused(mine[only_a[0]], theirs[only_b[0]]):
        pairs.append((only_a.pop(), only_b.pop()))  # the one left on each side: another layout, or fused
    for name in only_a:
        serious = mine[name].get("kind") != "buffer"
        found.append(WeightFinding(a_path, b_path, name, "missing", f"{name} exists in a but not in b", None, serious))
    for name in only_b:
        serious = theirs[name].get("kind") != "buffer"
        found.append(WeightFinding(a_path, b_path, name, "extra", f"{name} exists in b but not in a", None, serious))
    for name, other in pairs:
        finding = classify(mine[name], theirs[other])
        if finding is not None:
            kind, detail, rel, serious = finding
            if other != name:
                detail = f"(b: {other}) {detail}"
            found.append(WeightFinding(a_path, b_path, name, kind, detail, rel, serious))
    return found


def _distance(a: dict, b: dict) -> float:
    xs, ys = floats(a.get("samples")), floats(b.get("samples"))
    return _rms_diff(xs, ys) if xs and len(xs) == len(ys) else math.inf


def classify(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, str, float | None, bool] | None:
    """``(kind, detail, rel_diff, serious)`` for two fingerprints of one tensor, or None when they agree."""
    if all(a.get(key) == b.get(key) for key in _IDENTITY):  # the bit sum alone misses a permutation
        return None
    shape_a, shape_b = a.get("shape"), b.get("shape")
    if shape_a != shape_b:
        reshaped = _reshaped(a, b)
        if reshaped is not None:
            return reshaped
        if _reversed(shape_a, shape_b):
            return _other_layout(a, b)
        rearranged = permuted(a, b)
        if rearranged is not None:
            return rearranged
        if same_axes_of(shape_a, shape_b) and (found := rearranged_differs(a, b)) is not None:
            return found
        if _fused(shape_a, shape_b):
            return "fused", f"shape {shape_b} where a has {shape_a}: one holds the other fused with more " \
                "(its values are judged by the calls' outputs)", None, False
        return "shape", f"shape {shape_b} where a has {shape_a}", None, True
    xs, ys = floats(a.get("samples")), floats(b.get("samples"))
    if not xs or len(xs) != len(ys):
        if a.get("dtype") != b.get("dtype"):
            return "dtype", f"dtype {b.get('dtype')} where a has {a.get('dtype')}", None, True
        return "perturbed", "differs (its checksum changed)", None, True
    rel = _rms_diff(xs, ys)
    dtype_a, dtype_b = a.get("dtype"), b.get("dtype")
    if dtype_a != dtype_b:
        narrower = max((dtype_a, dtype_b), key=lambda d: UNIT_ROUNDOFF.get(d, 0.0))
        if _within_rounding(xs, ys, narrower):
            return "dtype", f"dtype {dtype_b} where a has {dtype_a}; values agree to {narrower} rounding", rel, False
    judged = _shape_of_difference(a, b, xs, ys, rel)
    if judged is not None:
        return judged
    if dtype_a != dtype_b:
        return "dtype", f"dtype {dtype_b} where a has {dtype_a}, and values differ (relative {short_number(rel)})", rel, True
    return "perturbed", f"differs: relative difference {short_number(rel)} (from {len(xs)} sampled values)", rel, True


def _shape_of_difference(a: dict, b: dict, xs: list[float], ys: list[float], rel: float):
    """Transposed, bit-level, scaled, rows/columns, rounded — the first that explains the difference."""
    mirrored = floats(a.get("mirrored_samples"))
    narrower = max((a.get("dtype"), b.get("dtype")), key=lambda d: UNIT_ROUNDOFF.get(d, 0.0))
    if mirrored and len(mirrored) == len(ys) and rel > 1e-3 and (_rms_diff(mirrored, ys, scale=xs) < 1e-5 or a.get(
            "dtype") != b.get("dtype") and _within_rounding(mirrored, ys, narrower)):  # (a Flax kernel in float32
        # against the bfloat16 port's weight: a's values rounded, at the mirrored positions)
        return "transposed", "stored transposed (b's values sit at a's mirrored positions)", rel, True
    if rel < _SAME and _blocks_ratio_spread(a, b, "row_blocks") < _SAME:
        return "bits", f"differs below 1e-6 relative (bit-level; checksum {b.get('checksum')})", rel, False
    dot_xy = sum(x * y for x, y in zip(xs, ys))
    dot_xx = sum(x * x for x in xs)
    if dot_xx > 0:
        scale = dot_xy / dot_xx
        residual = _rms_diff([scale * x for x in xs], ys, scale=xs)
        floor = max(UNIT_ROUNDOFF.get(b.get("dtype"), 0.0), _SAME)
        if abs(scale - 1) > 10 * floor and residual < 2 * floor:
            return "scaled", f"scaled by {scale:.6g} (relative difference {short_number(rel)})", rel, True
    for axis, what in (("row_blocks", "rows"), ("col_blocks", "columns")):
        blocks = _odd_blocks(a, b, axis)
        if blocks is not None:
            size = a["shape"][0] if axis == "row_blocks" else int(math.prod(a["shape"][1:]))
            count = len(a[axis])
            first = round(blocks[0] * size / count)
            last = round((blocks[-1] + 1) * size / count) - 1
            return what, f"{what} {first}–{last} of {size} differ (norm ×{_block_ratio(a, b, axis, blocks):.4g}); " \
                f"the rest agree", rel, True
    for narrow in ("float8_e4m3fn", "float16", "bfloat16"):
        if narrow in b.get("exact_in", []) and narrow not in a.get("exact_in", []) and _within_rounding(xs, ys, narrow):
            return "rounded", f"rounded through {narrow}, as by a lossy conversion (relative {short_number(rel)})", rel, True
    return None


def _reshaped(a: dict, b: dict) -> tuple[str, str, float, bool] | None:
    """The same elements in the same flat order under another shape (a convolution's kernel as a linear layer's
    matrix, heads split or merged): equal element counts, and equal bit sums and values at the (flat) sample
    positions, or, in another dtype, values that agree to the narrower one's rounding. None otherwise."""
    shape_a, shape_b = a.get("shape"), b.get("shape")
    if not isinstance(shape_a, list) or not isinstance(shape_b, list) or math.prod(shape_a) != math.prod(shape_b):
        return None
    xs, ys = floats(a.get("samples")), floats(b.get("samples"))
    if not xs or len(xs) != len(ys):
        return None
    words = f"shape {shape_b} where a has {shape_a}: the same values in the same order"
    if all(a.get(key) == b.get(key) for key in ("checksum", "dtype")) and xs == ys:
        return "layout", f"{words} (a convolution's kernel as a linear layer's matrix, heads split or merged)", \
            0.0, False
    dtype_a, dtype_b = a.get("dtype"), b.get("dtype")
    narrower = max((dtype_a, dtype_b), key=lambda d: UNIT_ROUNDOFF.get(d, 0.0))
    if dtype_a != dtype_b and _within_rounding(xs, ys, narrower):
        return "dtype", f"{words}, in dtype {dtype_b} where a has {dtype_a}; values agree to {narrower} rounding", \
            _rms_diff(xs, ys), False
    return None


def _reversed_or_fused(a: dict, b: dict) -> bool:
    return _reversed(a.get("shape"), b.get("shape")) or _fused(a.get("shape"), b.get("shape")) or \
        permuted(a, b) is not None or same_axes_of(a.get("shape"), b.get("shape"))


def _reversed(shape_a: Any, shape_b: Any) -> bool:
    """Two matrices, one of the other's shape transposed."""
    return isinstance(shape_a, list) and len(shape_a) == 2 and list(reversed(shape_a)) == list(shape_b or [])


def _fused(shape_a: Any, shape_b: Any) -> bool:
    """One matrix a whole multiple of the other along one dimension, in either layout (q/k/v or gate/up fused)."""
    if not (isinstance(shape_a, list) and isinstance(shape_b, list) and len(shape_a) == len(shape_b) >= 1):
        return False
    for other in ([shape_b] if len(shape_b) != 2 else [shape_b, list(reversed(shape_b))]):
        off = [(x, y) for x, y in zip(shape_a, other) if x != y]
        if len(off) == 1 and min(off[0]) > 0 and max(off[0]) % min(off[0]) == 0:
            return True
    return False


def _transposed(a: dict) -> dict[str, Any]:
    """The fingerprint of ``a.T``: the samples at the transposed positions swap with ``samples``, the row and
    column blocks swap; the statistics, bit sum and exact dtypes are a permutation's, the same."""
    t = dict(a)
    t["shape"] = list(reversed(a["shape"]))
    t["samples"], t["mirrored_samples"] = a.get("mirrored_samples"), a.get("samples")
    t["row_blocks"], t["col_blocks"] = a.get("col_blocks"), a.get("row_blocks")
    return t


def _other_layout(a: dict, b: dict) -> tuple[str, str, float | None, bool]:
    """b holds a's matrix in the transposed layout: the same values (not a difference), or how they differ."""
    layout = f"stored transposed (shape {b.get('shape')} where a has {a.get('shape')}, the other layout of one product)"
    proves = [(x, y) for x, y in ((_transposed(a), b), (a, _transposed(b)))
              if (found := floats(y.get("samples"))) and len(found) == len(floats(x.get("samples")))]
    if not proves:  # older fingerprints on both sides: nothing proves the values
        return "layout", f"{layout}; this fingerprint cannot tell whether its values are the same", None, False
    judged = classify(*proves[0])
    if judged is None or not judged[3]:
        return "layout", f"{layout}: the same values up to layout", judged[2] if judged else 0.0, False
    kind, detail, rel, serious = judged
    return kind, f"{layout}, and {detail}", rel, serious


def _odd_blocks(a: dict, b: dict, axis: str) -> list[int] | None:
    """Indices of the blocks that differ, when at most half do and the others agree."""
    xs, ys = floats(a.get(axis)), floats(b.get(axis))
    if len(xs) < 2 or len(xs) != len(ys):
        return None
    off = [k for k, (x, y) in enumerate(zip(xs, ys)) if abs(y - x) > 1e-5 * max(abs(x), 1e-30)]
    if not off or len(off) > len(xs) // 2:
        return None
    return off


def _block_ratio(a: dict, b: dict, axis: str, blocks: list[int]) -> float:
    xs, ys = floats(a[axis]), floats(b[axis])
    num = math.sqrt(sum(ys[k] ** 2 for k in blocks))
    den = math.sqrt(sum(xs[k] ** 2 for k in blocks))
    return num / den if den > 0 else math.inf


def _blocks_ratio_spread(a: dict, b: dict, axis: str) -> float:
    xs, ys = floats(a.get(axis)), floats(b.get(axis))
    if not xs or len(xs) != len(ys):
        return 0.0
    return max((abs(y - x) / max(abs(x), 1e-30) for x, y in zip(xs, ys)), default=0.0)


def _within_rounding(xs: list[float], ys: list[float], dtype: str) -> bool:
    """Every sampled value of b is a's rounded to ``dtype`` (within its unit roundoff)."""
    unit = UNIT_ROUNDOFF.get(dtype)
    if unit is None:
        return False
    return all(abs(y - x) <= unit * abs(x) * 1.01 + 1e-12 for x, y in zip(xs, ys))


def _rms_diff(xs: list[float], ys: list[float], scale: list[float] | None = None) -> float:
    base = scale if scale is not None else xs
    norm = math.sqrt(sum(x * x for x in base))
    diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(xs, ys)))
    if norm == 0:
        return 0.0 if diff == 0 else math.inf
    return diff / norm
