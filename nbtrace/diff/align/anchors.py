"""Anchors for aligning two call sequences: positions where both sides are at the same layer.

Given the layer number of each segment of a and of b (None outside layers), the
anchors are the pairs ``(i, j)`` of a longest common subsequence of numbered segments.
"""

from __future__ import annotations

import bisect


def unique_anchors(keys_a: list, keys_b: list) -> list[tuple[int, int]] | None:
    """Anchors when every layer number occurs once per side: the longest increasing run (patience)."""
    numbered_a = [k for k in keys_a if k is not None]
    numbered_b = [k for k in keys_b if k is not None]
    if len(set(numbered_a)) != len(numbered_a) or len(set(numbered_b)) != len(numbered_b):
        return None
    where_b = {k: j for j, k in enumerate(keys_b) if k is not None}
    pairs = [(i, where_b[k]) for i, k in enumerate(keys_a) if k is not None and k in where_b]
    # longest increasing subsequence of b positions, O(n log n)
    tails: list[int] = []
    tail_at: list[int] = []
    previous = [-1] * len(pairs)
    for index, (_, j) in enumerate(pairs):
        spot = bisect.bisect_left(tails, j)
        if spot == len(tails):
            tails.append(j)
            tail_at.append(index)
        else:
            tails[spot] = j
            tail_at[spot] = index
        previous[index] = tail_at[spot - 1] if spot > 0 else -1
    chain = []
    index = tail_at[-1] if tail_at else -1
    while index >= 0:
        chain.append(pairs[index])
        index = previous[index]
    return chain[::-1]


def lcs_anchors(keys_a: list, keys_b: list) -> list[tuple[int, int]]:
    n, m = len(keys_a), len(keys_b)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        row, below = table[i], table[i + 1]
        for j in range(m - 1, -1, -1):
            if keys_a[i] == keys_b[j] and keys_a[i] is not None:
                row[j] = below[j + 1] + 1
            else:
                row[j] = max(below[j], row[j + 1])
    anchors = []
    i = j = 0
    while i < n and j < m:
        if keys_a[i] == keys_b[j] and keys_a[i] is not None and table[i][j] == table[i + 1][j + 1] + 1:
            anchors.append((i, j))
            i += 1
            j += 1
        elif table[i + 1][j] >= table[i][j + 1]:
            i += 1
        else:
            j += 1
    return anchors
