"""A projection one side fuses and the other splits, its weights compared through the parts.

timm's ViT projects queries, keys and values with one ``qkv`` linear map of ``3·D`` rows; transformers' port with
three of ``D`` rows each. The fused call has no counterpart of its own (its output is the three outputs side by side),
so neither its output nor its weight is compared as a pair. Its weight is still the parts' rows stacked, and the
fingerprints (``capture/parameters.py``) hold what is additive over rows: the squared norms of up to 16 blocks of
columns, every row of each block (a bias: its squared norm). The fused weight's numbers are then the parts' added,
whatever order the parts are stacked in, and a part converted wrongly (a value projection scaled by 1.05) shows in
every column block.

A group is a's call with no counterpart and b's calls with no counterpart whose nearest paired ancestor is the
counterpart of a's call's nearest paired ancestor, whose weights have a's number of columns and whose rows add up to
a's (and the other way round, where a splits what b fuses). "More than rounding" is derived, never tuned: a block
norm the files hold is a float32 sum of its squares (at most ``n·u`` relative for ``n`` terms, ``u = 2⁻²⁴``) written
to 7 significant digits; one side stored in a narrower dtype moves each squared value by up to twice that dtype's
unit roundoff.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ...core.node import Node
from .weight_layouts import UNIT_ROUNDOFF
from .weights import WeightFinding

_FLOAT32 = 2.0**-24
_DIGITS = 5e-7  # 7 significant digits


def fused_findings(pairs: Iterable[tuple[Node, Node]], only_a: list[Node], only_b: list[Node],
                   a_section: dict[str, Any], b_section: dict[str, Any]) -> list[WeightFinding]:
    """A finding per fused weight whose parts on the other side combine to other numbers, at a's module (where a
    splits what b fuses: at a's first part)."""
    pairs = list(pairs)
    found: list[WeightFinding] = []
    for fused, parts, a_side in _groups(pairs, only_a, only_b, a_section, b_section):
        mine = (a_section if a_side else b_section).get(fused.module_path, {})
        theirs = [(b_section if a_side else a_section).get(p.module_path, {}) for p in parts]
        where = fused.module_path if a_side else parts[0].module_path
        b_where = ", ".join(p.module_path for p in parts) if a_side else fused.module_path
        for name in sorted(mine):
            pieces = [t.get(name) for t in theirs]
            if not isinstance(mine.get(name), dict) or any(not isinstance(p, dict) for p in pieces):
                continue
            detail = _judge(mine[name], pieces)
            if detail is not None:  # parts that hold the fused tensor's values are its other layout: no finding
                found.append(WeightFinding(where, b_where, name, "fused", detail, None, True))
    return found


def _groups(pairs: list[tuple[Node, Node]], only_a: list[Node], only_b: list[Node], a_section: dict,
            b_section: dict):
    """``(fused call, its parts, True where a fuses)`` for every group the module docstring describes."""
    other_of = ({id(x): y for x, y in pairs}, {id(y): x for x, y in pairs})
    for side, (mine, theirs, own, other) in enumerate(((only_a, only_b, a_section, b_section),
                                                       (only_b, only_a, b_section, a_section))):
        for fused in mine:
            shape = _shape(own.get(fused.module_path))
            if fused.children or shape is None:
                continue
            holder = next((other_of[side][id(up)] for up in fused.ancestors() if id(up) in other_of[side]), None)
            if holder is None:
                continue
            candidates = [n for n in theirs if _nearest_paired(n, other_of[1 - side]) is holder and not n.children
                          and (s := _shape(other.get(n.module_path))) is not None and s[1:] == shape[1:]
                          and s[0] < shape[0]]
            parts = _summing(candidates, other, shape[0])
            if parts:
                yield fused, parts, side == 0


def _nearest_paired(node: Node, paired: dict[int, Node]) -> Node | None:
    """The innermost call holding ``node`` that the alignment paired: a part lies where the fused call does, never
    inside another pair's calls (a pruned block's ``mlp.0`` is not the fused form of another block's projections)."""
    return next((up for up in node.ancestors() if id(up) in paired), None)


def _shape(module: Any) -> list[int] | None:
    """The shape of a module's 2-D ``weight`` (a linear map's), or None."""
    weight = module.get("weight") if isinstance(module, dict) else None
    shape = weight.get("shape") if isinstance(weight, dict) else None
    return list(shape) if isinstance(shape, list) and len(shape) == 2 else None


def _summing(candidates: list[Node], section: dict, rows: int) -> list[Node]:
    """The first run of consecutive ``candidates`` (call order) whose weights' rows add up to ``rows``, at least two."""
    for start in range(len(candidates)):
        total = 0
        for end in range(start, len(candidates)):
            total += _shape(section.get(candidates[end].module_path))[0]
            if total == rows:
                return candidates[start:end + 1] if end > start else []
            if total > rows:
                break
    return []


def _judge(fused: dict, parts: list[dict]) -> str | None:
    """Why a fused tensor's parts hold other values, or None: they hold its values, or the fingerprints cannot
    tell."""
    blocks = [_squared_blocks(f) for f in (fused, *parts)]
    if any(b is None or len(b) != len(blocks[0]) for b in blocks):
        return None
    mine = blocks[0]
    combined = [sum(b[j] for b in blocks[1:]) for j in range(len(mine))]
    dtypes = {str(f.get("dtype")) for f in (fused, *parts)}
    narrow = 2 * max(UNIT_ROUNDOFF.get(d, 0.0) for d in dtypes) if len(dtypes) > 1 else 0.0
    rows = max(f["shape"][0] for f in (fused, *parts))  # a column's float32 sum of squares: at most rows·u off
    allowed = rows * _FLOAT32 + 2 * _DIGITS + narrow  # relative, per squared block norm
    worst, at = 0.0, -1
    for j, (x, y) in enumerate(zip(mine, combined)):
        off = abs(x - y) / max(x, y) if max(x, y) > 0 else 0.0
        if off > worst:
            worst, at = off, j
    if worst <= allowed:
        return None
    names = ", ".join(str(p.get("shape")) for p in parts)
    return (f"fused: its parts {names} hold other values: the squared norm of column block {at} differs by "
            f"{worst:.2g} (relative) where the fingerprints' rounding allows {allowed:.2g}")


def _squared_blocks(fingerprint: dict) -> list[float] | None:
    """The numbers of a fingerprint that add over rows: its squared column-block norms (a vector's squared norm)."""
    shape = fingerprint.get("shape")
    if not isinstance(shape, list) or not shape:
        return None
    try:
        blocks = [float(v) ** 2 for v in fingerprint.get("col_blocks") or []] or [float(fingerprint["norm"]) ** 2]
    except (KeyError, TypeError, ValueError):
        return None
    return blocks if all(math.isfinite(v) for v in blocks) else None
