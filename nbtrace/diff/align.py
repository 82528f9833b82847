"""Which call of trace ``b`` corresponds to which call of trace ``a``.

Two ways:

- ``rename`` given: ``b``'s module paths are rewritten with each ``regex -> replacement``
  in order (``re.sub``, the root class name included) and calls pair up by
  ``(path, call_index)``.
- otherwise, by call order: both call sequences are aligned (global sequence
  alignment, like a diff) on what the calls look like — leaf or not, the shapes
  and dtypes of their tensors, their ``.N`` layer numbers, their names as a weak
  hint, and whether the values agree as a tie-break — so calls present on one
  side only (a dropout, an identity, an extra wrapper, a fused projection) are
  skipped. Sequences are cut at layer blocks first, so long traces align block by
  block.

Layer pruning: when one trace had its intermediate layer blocks pruned and the
other did not, the blocks the pruned side lacks are set aside on the other side
(``pruned_a`` / ``pruned_b``) before aligning.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..core.dtypes import dtype_kind
from ..core.node import Node
from ..core.paths import layer_number, path_numbers
from ..core.structure import has_pruning_gaps, would_be_pruned
from ..core.trace import Trace
from .anchors import lcs_anchors, unique_anchors

_GAP = 1.0  # cost of leaving one call unmatched
_MIN_SCORE = 3.0  # weaker pairs are never matched
_FULL_DP_CELLS = 1_000_000  # above this, a segment is aligned greedily (see _greedy)
_TOKEN = re.compile(r"[A-Za-z]+")


@dataclass
class Alignment:
    """The result: matched pairs in ``a``'s call order and what stayed unmatched."""

    pairs: list[tuple[Node, Node]]
    only_a: list[Node]
    only_b: list[Node]
    pruned_a: list[Node] = field(default_factory=list)  # a's calls inside blocks b was pruned of
    pruned_b: list[Node] = field(default_factory=list)
    method: str = "sequence"


def compile_rename(rename: Mapping[str, str] | None) -> list[tuple[re.Pattern[str], str]]:
    """The rename rules, compiled; a bad regex raises ValueError naming it."""
    rules = []
    for pattern, replacement in (rename or {}).items():
        if not isinstance(pattern, str) or not isinstance(replacement, str):
            raise ValueError(f"rename maps regex strings to replacement strings, got {pattern!r}: {replacement!r}")
        try:
            rules.append((re.compile(pattern), replacement))
        except re.error as exc:
            raise ValueError(f"rename: bad regular expression {pattern!r}: {exc}") from None
    return rules


def apply_rename(path: str, rules: list[tuple[re.Pattern[str], str]]) -> str:
    for regex, replacement in rules:
        path = regex.sub(replacement, path)
    return path


def align(a: Trace, b: Trace, rename: Mapping[str, str] | None = None) -> Alignment:
    """Pair the calls of ``b`` with those of ``a``; see the module docstring."""
    rules = compile_rename(rename)
    pruned_a, pruned_b = _equalize_pruning(a, b)
    skip_a = {id(n) for n in pruned_a}
    skip_b = {id(n) for n in pruned_b}
    nodes_a = [n for n in a.nodes() if id(n) not in skip_a]
    nodes_b = [n for n in b.nodes() if id(n) not in skip_b]
    if rename is not None:
        pairs = _by_path(nodes_a, nodes_b, rules)
        method = "rename"
    else:
        pairs = _by_sequence(nodes_a, nodes_b)
        method = "sequence"
    matched_a = {id(x) for x, _ in pairs}
    matched_b = {id(y) for _, y in pairs}
    return Alignment(
        pairs=pairs,
        only_a=[n for n in nodes_a if id(n) not in matched_a],
        only_b=[n for n in nodes_b if id(n) not in matched_b],
        pruned_a=pruned_a,
        pruned_b=pruned_b,
        method=method,
    )


def _equalize_pruning(a: Trace, b: Trace) -> tuple[list[Node], list[Node]]:
    """Calls of each side inside layer blocks that the other side's pruning removed."""
    gaps_a, gaps_b = has_pruning_gaps(a), has_pruning_gaps(b)
    if gaps_a == gaps_b:
        return [], []
    if gaps_a:  # a was pruned, b was not: set aside b's intermediate blocks
        return [], [n for block in would_be_pruned(b) for n in block.walk()]
    return [n for block in would_be_pruned(a) for n in block.walk()], []


# -- by path ---------------------------------------------------------------------
def _by_path(nodes_a: list[Node], nodes_b: list[Node], rules) -> list[tuple[Node, Node]]:
    index: dict[tuple[str, int], Node] = {}
    seen: dict[str, int] = {}
    for node in nodes_b:
        path = apply_rename(node.module_path, rules)
        call = seen.get(path, 0)
        seen[path] = call + 1
        index.setdefault((path, call), node)
    counts: dict[str, int] = {}
    pairs = []
    for node in nodes_a:
        call = counts.get(node.module_path, 0)
        counts[node.module_path] = call + 1
        other = index.get((node.module_path, call))
        if other is not None:
            pairs.append((node, other))
    return pairs


# -- by sequence -----------------------------------------------------------------
class _Features:
    """What a call looks like, precomputed once for the pair scores."""

    __slots__ = (
        "node",
        "leaf",
        "ins",
        "main_in",
        "outs",
        "out_shapes",
        "numbers",
        "name",
        "tokens",
        "rel_path",
        "passthrough",
        "out_stats",
        "in_stats",
        "key",
    )

    def __init__(self, node: Node) -> None:
        self.node = node
        self.leaf = not node.children
        tensors = node.tensors()
        ins = [t for io, _, t in tensors if io == "input"]
        outs = [t for io, _, t in tensors if io == "output"]
        self.ins = tuple(sorted((t.shape, dtype_kind(t.dtype)) for t in ins))
        floats = [t for t in ins if t.mean is not None]
        first = floats[0] if floats else (ins[0] if ins else None)
        self.main_in = (first.shape, dtype_kind(first.dtype)) if first is not None else None
        self.outs = tuple((t.shape, t.dtype) for t in outs)
        self.out_shapes = tuple(t.shape for t in outs)
        self.numbers = path_numbers(node.module_path)
        self.name = node.name if node.parent is not None else ""
        self.tokens = frozenset(tok.lower() for tok in _TOKEN.findall(self.name))
        self.rel_path = node.module_path.split(".", 1)[1] if "." in node.module_path else ""
        self.passthrough = self.leaf and len(ins) == 1 and len(outs) == 1 and _same_values(ins[0], outs[0])
        self.out_stats = tuple(_rounded(t) for t in outs)
        self.in_stats = _rounded(first) if first is not None else None
        self.key = (self.leaf, self.out_shapes, self.ins, self.numbers, self.name)


def _same_values(x, y) -> bool:
    """True when a call's output evidently is its input (an identity, a dropout in eval mode)."""
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    if x.stats:
        return x.stats == y.stats
    return x.lines is not None and x.lines == y.lines


def _rounded(tensor) -> tuple | None:
    """The stat strings of a tensor (equal strings: equal values to 5 digits), or None without stats."""
    if tensor is None or not tensor.stats:
        return None
    stats = tensor.stats
    return (stats.get("mean"), stats.get("std"), stats.get("min"), stats.get("max"))


def pair_score(x: _Features, y: _Features) -> float | None:
    """How well call ``y`` of b stands for call ``x`` of a; None when it cannot."""
    score = 0.0
    if x.leaf and y.leaf:
        if x.out_shapes != y.out_shapes:
            return None
        score += 4.0 if x.outs else 1.0
        if x.outs != y.outs:
            score -= 1.0  # same shapes, other dtypes (e.g. a bf16 port)
    elif x.leaf != y.leaf:  # a leaf never stands for a call with children
        return None
    if x.passthrough != y.passthrough:  # an identity/dropout never stands for a computation
        return None
    if x.ins and y.ins:  # the same computation starts from tensors of the same shapes
        common = len(set(x.ins) & set(y.ins))
        if common == 0:
            return None
        score += common / len(set(x.ins) | set(y.ins))
    if x.main_in is not None and y.main_in is not None and x.main_in[0] == y.main_in[0]:
        score += 1.0 if x.leaf else 2.0
    k = min(len(x.numbers), len(y.numbers))
    if k:
        if x.numbers[:k] != y.numbers[:k]:
            return None
        score += 3.0 if len(x.numbers) == len(y.numbers) else 1.0
    elif x.numbers or y.numbers:
        score -= 0.5
    if x.rel_path and x.rel_path == y.rel_path:
        score += 3.0
    elif x.name and x.name == y.name:
        score += 2.0
    elif x.tokens and y.tokens:
        score += len(x.tokens & y.tokens) / len(x.tokens | y.tokens)
    if x.out_stats and x.out_stats == y.out_stats and None not in x.out_stats:
        score += 1.5
    if x.in_stats is not None and x.in_stats == y.in_stats:
        score += 0.5
    return score if score >= _MIN_SCORE else None


def _by_sequence(nodes_a: list[Node], nodes_b: list[Node]) -> list[tuple[Node, Node]]:
    if not nodes_a or not nodes_b:
        return []
    pairs = [(nodes_a[0], nodes_b[0])]  # the roots
    fa = [_Features(n) for n in nodes_a[1:]]
    fb = [_Features(n) for n in nodes_b[1:]]
    seg_a, seg_b = _segments(fa), _segments(fb)
    for part_a, part_b in _match_segments(seg_a, seg_b):
        pairs.extend(_align_run(part_a, part_b))
    order = {id(n): i for i, n in enumerate(nodes_a)}
    pairs.sort(key=lambda pair: order[id(pair[0])])
    return pairs


def _segments(features: list[_Features]) -> list[tuple[int | None, list[_Features]]]:
    """Consecutive calls grouped by the layer they belong to (None outside layers)."""
    segments: list[tuple[int | None, list[_Features]]] = []
    for f in features:
        layer = layer_number(f.node.module_path)
        if segments and segments[-1][0] == layer:
            segments[-1][1].append(f)
        else:
            segments.append((layer, [f]))
    return segments


def _match_segments(seg_a, seg_b) -> list[tuple[list[_Features], list[_Features]]]:
    """Pair segments with equal layer numbers in order (a longest common subsequence).

    Unpaired segments are aligned together with their neighbours, so a layer-less
    stretch on one side can still meet calls on the other.
    """
    keys_a = [key for key, _ in seg_a]
    keys_b = [key for key, _ in seg_b]
    n, m = len(keys_a), len(keys_b)
    if keys_a == keys_b:
        return [(part_a, part_b) for (_, part_a), (_, part_b) in zip(seg_a, seg_b)]
    anchors = unique_anchors(keys_a, keys_b)
    if anchors is None:
        anchors = lcs_anchors(keys_a, keys_b)
    runs = []
    start_a = start_b = 0
    for i, j in anchors + [(n, m)]:
        between_a = [f for _, part in seg_a[start_a:i] for f in part]
        between_b = [f for _, part in seg_b[start_b:j] for f in part]
        if between_a or between_b:
            runs.append((between_a, between_b))
        if i < n and j < m:
            runs.append((seg_a[i][1], seg_b[j][1]))
        start_a, start_b = i + 1, j + 1
    return runs


def _align_run(fa: list[_Features], fb: list[_Features]) -> list[tuple[Node, Node]]:
    if not fa or not fb:
        return []
    # Identical-looking runs (same model twice, another dtype, ...) pair up one to one.
    if len(fa) == len(fb) and all(x.key == y.key for x, y in zip(fa, fb)):
        return [(x.node, y.node) for x, y in zip(fa, fb)]
    if len(fa) * len(fb) > _FULL_DP_CELLS:
        return _greedy(fa, fb)
    return _dp(fa, fb)


def _dp(fa: list[_Features], fb: list[_Features]) -> list[tuple[Node, Node]]:
    """Global alignment maximizing the summed pair scores minus a cost per unmatched call."""
    n, m = len(fa), len(fb)
    neg = float("-inf")
    best = [[0.0] * (m + 1) for _ in range(n + 1)]
    move = [[0] * (m + 1) for _ in range(n + 1)]  # 1 diagonal, 2 skip a, 3 skip b
    for i in range(1, n + 1):
        best[i][0] = -_GAP * i
        move[i][0] = 2
    for j in range(1, m + 1):
        best[0][j] = -_GAP * j
        move[0][j] = 3
    for i in range(1, n + 1):
        x = fa[i - 1]
        row, up = best[i], best[i - 1]
        moves = move[i]
        for j in range(1, m + 1):
            s = pair_score(x, fb[j - 1])
            diag = up[j - 1] + s if s is not None else neg
            skip_a = up[j] - _GAP
            skip_b = row[j - 1] - _GAP
            if diag >= skip_a and diag >= skip_b:
                row[j], moves[j] = diag, 1
            elif skip_a >= skip_b:
                row[j], moves[j] = skip_a, 2
            else:
                row[j], moves[j] = skip_b, 3
    pairs = []
    i, j = n, m
    while i > 0 or j > 0:
        step = move[i][j]
        if step == 1:
            pairs.append((fa[i - 1].node, fb[j - 1].node))
            i -= 1
            j -= 1
        elif step == 2:
            i -= 1
        else:
            j -= 1
    pairs.reverse()
    return pairs


def _greedy(fa: list[_Features], fb: list[_Features]) -> list[tuple[Node, Node]]:
    """Linear-time fallback for huge layer-less stretches: walk both, matching within a window."""
    pairs = []
    j = 0
    window = 64
    for x in fa:
        best_j, best_s = None, None
        for k in range(j, min(len(fb), j + window)):
            s = pair_score(x, fb[k])
            if s is not None and (best_s is None or s - _GAP * (k - j) > best_s):
                best_j, best_s = k, s - _GAP * (k - j)
        if best_j is not None:
            pairs.append((x.node, fb[best_j].node))
            j = best_j + 1
    return pairs
