"""The global alignment of two runs of calls: like a diff, on what the calls look like, never on their values.

``align_run`` maximizes the summed pair scores (``call_features.pair_score``, or another scoring of two calls'
features) minus a cost per call left unmatched; a run too long for the full table is aligned greedily.
"""

from __future__ import annotations

from collections.abc import Callable

from ...core.node import Node
from .call_features import CallFeatures, pair_score

_GAP = 1.0  # cost of leaving one call unmatched
_FULL_DP_CELLS = 1_000_000  # above this, a segment is aligned greedily (see _greedy)

#: how well b's call stands for a's (None: it cannot)
Score = Callable[[CallFeatures, CallFeatures], "float | None"]


def align_run(fa: list[CallFeatures], fb: list[CallFeatures], score: Score = pair_score) -> list[tuple[Node, Node]]:
    """Pairs of the two runs' calls, in order (see the module docstring)."""
    if not fa or not fb:
        return []
    # Identical-looking runs (same model twice, another dtype, ...) pair up one to one.
    if len(fa) == len(fb) and all(x.key == y.key for x, y in zip(fa, fb)):
        return [(x.node, y.node) for x, y in zip(fa, fb)]
    if len(fa) * len(fb) > _FULL_DP_CELLS:
        return _greedy(fa, fb, score)
    return _dp(fa, fb, score)


def _dp(fa: list[CallFeatures], fb: list[CallFeatures], pair_score: Score = pair_score) -> list[tuple[Node, Node]]:
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


def _greedy(fa: list[CallFeatures], fb: list[CallFeatures], pair_score: Score = pair_score) -> list[tuple[Node, Node]]:
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
