"""Which call of trace ``b`` corresponds to which call of trace ``a``.

Two ways:

- ``rename`` given: ``b``'s module paths are rewritten with each ``regex -> replacement``
  in order (``re.sub``, the root class name included) and calls pair up by
  ``(path, call_index)``; a pattern holding ``#`` sees and may write ``path#call_index``.
- calls that compute nothing (an Identity, a Dropout in eval mode; ``idle.py``) and have no counterpart are set
  aside (``idle_a``/``idle_b``); by call order they are left out of the sequences before aligning.
- otherwise, by call order: both call sequences are aligned (global sequence
  alignment, like a diff) on what the calls look like and how they are wired, never on
  their values (``call_features.py``), so calls present on one side only (a dropout, an
  identity, an extra wrapper, a fused projection) are skipped, and a correct and a buggy
  port pair the same calls. Sequences are cut at layer blocks first, so long traces align
  block by block. Where that pairs fewer than half of a's calls, the parts of the root (the calls under each of
  its children) are aligned with each other in any order too, and the better of the two kept: the towers of a
  dual encoder run in the other order. Where leaves that compute something stay unpaired on both sides, the
  leaves are aligned on their own too and the containers paired by the leaves they hold (``leaves.py``: another
  library's house, its wrappers, stage lists and numbers), kept where that pairs more of a's leaves. A pair that
  an unmatched call under the same parent could have taken just as well is *ambiguous*: it is listed
  (``Alignment.ambiguous``) and only then do
  values decide (the closest values win), which the comparison's notes say. Sibling leaves under an aligned pair of
  parents that call order paired wrongly or not at all (embeddings added in another order) are paired by the values
  they are handed, where those single one out (``siblings.py``).

Layer pruning: when one trace had its intermediate layer blocks pruned and the
other did not, the blocks the pruned side lacks are set aside on the other side
(``pruned_a`` / ``pruned_b``) before aligning; where both were pruned, what each side's files hold that the
other's lack is found from the two float64 twins (``twin_leaves.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...core.node import Node
from ...core.paths import layer_number
from ...core.structure import has_pruning_gaps, would_be_pruned
from ...core.trace import Trace
from .anchors import lcs_anchors, unique_anchors
from .call_features import CallFeatures, features, pair_score
from .flow import Flow, TensorCache
from .fused_calls import fused_pairs
from .idle import computes_nothing
from .leaves import leaf_pairs
from .sequence import align_run
from .siblings import repair_siblings
from .twin_leaves import set_aside_by_twins
from .unnumbered import unnumbered_pruned
from .wrappers import innermost_pairs

_REORDERED = 0.5  # below this share of a's calls paired in order, the root's parts are aligned in any order too


@dataclass
class Alignment:
    """The result: matched pairs in ``a``'s call order and what stayed unmatched.

    ``ambiguous`` lists the pairs (a's call, b's call) that another, unmatched call could
    have taken as well by structure; their values settled them.
    """

    pairs: list[tuple[Node, Node]]
    only_a: list[Node]
    only_b: list[Node]
    pruned_a: list[Node] = field(default_factory=list)  # a's calls inside blocks b was pruned of
    pruned_b: list[Node] = field(default_factory=list)
    method: str = "sequence"
    ambiguous: list[tuple[Node, Node]] = field(default_factory=list)
    #: calls with no counterpart that compute nothing (``idle.py``): not in ``only_a``/``only_b``, nor counted
    idle_a: list[Node] = field(default_factory=list)
    idle_b: list[Node] = field(default_factory=list)


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


def align(a: Trace, b: Trace, rename: Mapping[str, str] | None = None,
          flows: tuple[Flow, Flow] | None = None, caches: tuple[TensorCache, TensorCache] | None = None) -> Alignment:
    """Pair the calls of ``b`` with those of ``a``; see the module docstring. ``flows`` are the two traces'
    data flows (built here when the alignment by call order needs them and none are given); ``caches`` read the
    tensors of calls that may compute nothing (``idle.py``), where no flows are given."""
    rules = compile_rename(rename)
    ambiguous: list[tuple[Node, Node]] = []
    pruned_a, pruned_b = _equalize_pruning(a, b)
    skip_a = {id(n) for n in pruned_a}
    skip_b = {id(n) for n in pruned_b}
    nodes_a = [n for n in a.nodes() if id(n) not in skip_a]
    nodes_b = [n for n in b.nodes() if id(n) not in skip_b]
    if rename is not None:
        pairs = _by_path(nodes_a, nodes_b, rules)
        method = "rename"
        if caches is None:
            caches = (flows[0].cache, flows[1].cache) if flows else (TensorCache(), TensorCache())
        idle: list[list[Node]] = [[], []]
    else:
        flows = flows or (Flow(a), Flow(b))
        caches = (flows[0].cache, flows[1].cache)
        idle = [[n for n in nodes if computes_nothing(n, cache.fingerprint, cache.flat_fingerprint)]  # out of the sequences to align
                for nodes, cache in ((nodes_a, caches[0]), (nodes_b, caches[1]))]
        left_out = {id(n) for n in idle[0] + idle[1]}
        pairs, ambiguous = _by_sequence([n for n in nodes_a if id(n) not in left_out],
                                        [n for n in nodes_b if id(n) not in left_out], flows, left_out)
        pairs = repair_siblings(pairs, caches, left_out)  # sibling leaves by what they are handed
        method = "sequence"
    matched_a = {id(x) for x, _ in pairs}
    matched_b = {id(y) for _, y in pairs}
    only_a = [n for n in nodes_a if id(n) not in matched_a]
    only_b = [n for n in nodes_b if id(n) not in matched_b]
    if rename is not None:
        idle = [[n for n in only if computes_nothing(n, cache.fingerprint, cache.flat_fingerprint)]
                for only, cache in ((only_a, caches[0]), (only_b, caches[1]))]
    left_out = {id(n) for n in idle[0] + idle[1]}
    in_gaps_a = [n for n in _in_gaps(pairs, nodes_a, b) if id(n) not in left_out]
    in_gaps_b = [n for n in _in_gaps([(y, x) for x, y in pairs], nodes_b, a) if id(n) not in left_out]
    left_out |= {id(n) for n in in_gaps_a + in_gaps_b}
    return Alignment(
        pairs=pairs,
        only_a=[n for n in only_a if id(n) not in left_out],
        only_b=[n for n in only_b if id(n) not in left_out],
        pruned_a=pruned_a + in_gaps_a,
        pruned_b=pruned_b + in_gaps_b,
        method=method,
        ambiguous=ambiguous,
        idle_a=idle[0],
        idle_b=idle[1],
    )


def _equalize_pruning(a: Trace, b: Trace) -> tuple[list[Node], list[Node]]:
    """Calls of each side inside layer blocks that the other side's pruning removed."""
    gaps_a, gaps_b = has_pruning_gaps(a), has_pruning_gaps(b)
    if gaps_a and gaps_b:  # both pruned, perhaps by other numbers: what each lacks, from the twins
        return set_aside_by_twins(a, b)
    if gaps_a == gaps_b:
        return [], []
    # One side pruned, the other not: set aside the whole side's calls that the pruned side's files lack, found from
    # the twins (twin_leaves.py: what the pruned side's twin ran in its gaps), else by the format's rule on the whole
    # side's numbered blocks, or its named ones (unnumbered.py). The twins first: another house's stack need not be
    # the one pruning thinned (jax-resnet's ``layers.2…9`` blocks in a list with its stem and head, against
    # transformers' ``stages.0…3`` of two blocks each: the rule would keep four blocks where the files kept one).
    if gaps_a:
        return [], (set_aside_by_twins(a, b)[1] or [n for block in would_be_pruned(b) for n in block.walk()]
                    or unnumbered_pruned(a, b))
    return (set_aside_by_twins(a, b)[0] or [n for block in would_be_pruned(a) for n in block.walk()]
            or unnumbered_pruned(b, a)), []


def _in_gaps(pairs: list[tuple[Node, Node]], nodes_a: list[Node], b: Trace) -> list[Node]:
    """a's unpaired calls that ran where b's pruning left a gap: between the counterparts of the two layer blocks
    of b around the gap (another house's stages need not be numbered, or numbered alike, for pruning to thin one
    side only: a's ``layer2``, ``layer3`` against b's ``stages.1``, ``stages.2`` gone from its files)."""
    a_of = {id(y): x for x, y in pairs}
    order = {id(n): i for i, n in enumerate(nodes_a)}
    paired = {id(x) for x, _ in pairs}
    found: list[Node] = []
    for node in b.nodes():
        for gap in node.pruned_layers() if len(node.children) >= 2 else ():
            before, after = node.children[gap.position - 1], node.children[gap.position]
            ends = [order[id(a_of[id(n)])] for n in before.walk() if id(n) in a_of]
            starts = [order[id(a_of[id(n)])] for n in after.walk() if id(n) in a_of]
            if ends and starts:
                found += [n for n in nodes_a[max(ends) + 1:min(starts)] if id(n) not in paired]
    return found


# -- by path ---------------------------------------------------------------------
def _by_path(nodes_a: list[Node], nodes_b: list[Node], rules) -> list[tuple[Node, Node]]:
    """Pair by (renamed path, call index). Rules whose pattern holds ``#`` see ``path#k`` (b's k-th call of the
    renamed path) and may write ``path#j`` (a's j-th call): one module called twice on one side pairs with two
    modules on the other. Without ``#``, several of b's modules renamed onto one path take its calls in order."""
    plain = [(regex, to) for regex, to in rules if "#" not in regex.pattern]
    by_call = [(regex, to) for regex, to in rules if "#" in regex.pattern]
    index: dict[tuple[str, int], Node] = {}
    seen: dict[str, int] = {}
    for node in nodes_b:
        path = apply_rename(node.module_path, plain)
        call = seen.get(path, 0)
        seen[path] = call + 1
        if by_call:
            renamed = apply_rename(f"{path}#{call}", by_call)
            path, _, told = renamed.rpartition("#")
            if not path or not told.isdigit():
                path, told = renamed, str(call)
            call = int(told)
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
def _by_sequence(nodes_a: list[Node], nodes_b: list[Node], flows: tuple[Flow, Flow], idle: set[int]
                 ) -> tuple[list[tuple[Node, Node]], list[tuple[Node, Node]]]:
    """Pair by call order (the module docstring); ``idle``: ids of the calls that compute nothing, left out."""
    if not nodes_a or not nodes_b:
        return [], []
    pairs = [(nodes_a[0], nodes_b[0])]  # the roots
    fa = features(nodes_a[1:], flows[0], idle)
    fb = features(nodes_b[1:], flows[1], idle)
    seg_a, seg_b = _segments(fa), _segments(fb)
    for part_a, part_b in _match_segments(seg_a, seg_b):
        pairs.extend(align_run(part_a, part_b))
    if len(pairs) - 1 < _REORDERED * len(fa):  # most calls left: the parts may run in another order (two towers)
        by_part = [pairs[0], *_by_parts(fa, fb)]
        if len(by_part) > len(pairs):
            pairs = by_part
    if _leaves_left(pairs, fa, fb):  # another house's containers and numbers: its leaves still run in order
        by_leaves = [pairs[0], *leaf_pairs(pairs[0], fa, fb)]
        if _leaves_paired(by_leaves) > _leaves_paired(pairs):  # containers paired by their leaves: not ambiguous
            pairs, fa, fb = by_leaves, [f for f in fa if f.leaf], [f for f in fb if f.leaf]
    pairs, ambiguous = settle_ambiguous(pairs, fa, fb, flows)
    pairs = [pairs[0], *innermost_pairs(pairs[1:], (flows[0].cache.fingerprint, flows[1].cache.fingerprint),
                                        (flows[0].trace.twin, flows[1].trace.twin))]
    pairs += fused_pairs(pairs, idle)  # a leaf that computes in one call what a container computes in parts
    order = {id(n): i for i, n in enumerate(nodes_a)}
    pairs.sort(key=lambda pair: order[id(pair[0])])
    return pairs, ambiguous


def _by_parts(fa: list[CallFeatures], fb: list[CallFeatures]) -> list[tuple[Node, Node]]:
    """Align each part of a (the calls under one child of the root: a text tower, a vision tower) with the part of
    b it aligns with best, whatever their order: a dual encoder whose port runs its towers the other way round.
    Larger parts choose first; a part of b may serve several of a's (a final norm a keeps apart, b inside)."""
    parts_a, parts_b = _parts(fa), _parts(fb)
    pairs: list[tuple[Node, Node]] = []
    taken: set[int] = set()
    for part in sorted(parts_a, key=len, reverse=True):
        best: list[tuple[Node, Node]] = []
        for other in parts_b:
            left = [f for f in other if id(f.node) not in taken]
            found = align_run(part, left) if left else []
            if len(found) > len(best):
                best = found
        pairs.extend(best)
        taken.update(id(y) for _, y in best)
    done = {id(x) for x, _ in pairs}  # what no part took (a projection one side keeps in a tower, one beside it)
    pairs.extend(align_run([f for f in fa if id(f.node) not in done], [f for f in fb if id(f.node) not in taken]))
    return pairs


def _parts(features: list[CallFeatures]) -> list[list[CallFeatures]]:
    """The calls grouped by the child of the root they run in (the child itself first), in call order."""
    groups: dict[int, list[CallFeatures]] = {}
    for f in features:
        top = f.node
        while top.parent is not None and top.parent.parent is not None:
            top = top.parent
        groups.setdefault(id(top), []).append(f)
    return list(groups.values())


def settle_ambiguous(pairs: list[tuple[Node, Node]], fa: list[CallFeatures], fb: list[CallFeatures],
                     flows: tuple[Flow, Flow]) -> tuple[list[tuple[Node, Node]], list[tuple[Node, Node]]]:
    """Find pairs an unmatched call under the same parent scores at least as well for; let values decide those.

    Calls matched elsewhere are not rivals: the order of calls settled them (k_proj before v_proj).
    """
    by_a = {id(f.node): f for f in fa}
    by_b = {id(f.node): f for f in fb}
    b_of = {id(x): y for x, y in pairs}
    taken_a = {id(x) for x, _ in pairs}
    taken_b = {id(y) for _, y in pairs}
    alone_a: dict[int, list[CallFeatures]] = {}
    alone_b: dict[int, list[CallFeatures]] = {}
    for group, side, taken in ((alone_a, fa, taken_a), (alone_b, fb, taken_b)):
        for f in side:
            if id(f.node) not in taken:
                group.setdefault(id(f.node.parent), []).append(f)
    ambiguous = []
    for position, (x, y) in enumerate(pairs):
        fx, fy = by_a.get(id(x)), by_b.get(id(y))
        mine = pair_score(fx, fy) if fx is not None and fy is not None and x.parent is not None else None
        if mine is None:
            continue
        parent = b_of.get(id(x.parent))
        rivals_b = [f.node for f in alone_b.get(id(parent), []) if id(f.node) not in taken_b
                    and (s := pair_score(fx, f)) is not None and s >= mine]
        rivals_a = [f.node for f in alone_a.get(id(x.parent), []) if id(f.node) not in taken_a
                    and (s := pair_score(f, fy)) is not None and s >= mine]
        if not rivals_a and not rivals_b:
            continue
        best_y = min([y, *rivals_b], key=lambda other: _value_distance(x, other, flows))
        best_x = min([x, *rivals_a], key=lambda other: _value_distance(other, best_y, flows))
        taken_a.symmetric_difference_update({id(x), id(best_x)} if best_x is not x else set())
        taken_b.symmetric_difference_update({id(y), id(best_y)} if best_y is not y else set())
        pairs[position] = (best_x, best_y)
        ambiguous.append((best_x, best_y))
    return pairs, ambiguous


def _value_distance(x: Node, y: Node, flows: tuple[Flow, Flow]) -> float:
    """How far apart the first outputs (else inputs) of two calls are: the last tie-break of the alignment."""
    for io in ("output", "input"):
        mine, theirs = flows[0].slots(x, io), flows[1].slots(y, io)
        if mine and theirs and mine[0].tensor.shape == theirs[0].tensor.shape:
            a, b = flows[0].cache.load(mine[0].tensor), flows[1].cache.load(theirs[0].tensor)
            if a is not None and b is not None:
                return float((b.double() - a.double()).norm() / a.double().norm().clamp_min(1e-300))
            sa, sb = mine[0].tensor, theirs[0].tensor
            if sa.mean is not None and sb.mean is not None and sa.std is not None and sb.std is not None:
                return abs(sa.mean - sb.mean) + abs(sa.std - sb.std)
    return float("inf")


def _segments(features: list[CallFeatures]) -> list[tuple[int | None, list[CallFeatures]]]:
    """Consecutive calls grouped by the layer they belong to (None outside layers)."""
    segments: list[tuple[int | None, list[CallFeatures]]] = []
    for f in features:
        layer = layer_number(f.node.module_path)
        if segments and segments[-1][0] == layer:
            segments[-1][1].append(f)
        else:
            segments.append((layer, [f]))
    return segments


def _match_segments(seg_a, seg_b) -> list[tuple[list[CallFeatures], list[CallFeatures]]]:
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


def _leaves_left(pairs: list[tuple[Node, Node]], fa: list[CallFeatures], fb: list[CallFeatures]) -> bool:
    """Leaves that compute something are left unpaired on both sides."""
    paired = {id(n) for pair in pairs for n in pair}
    return any(f.leaf and id(f.node) not in paired for f in fa) and any(
        f.leaf and id(f.node) not in paired for f in fb)


def _leaves_paired(pairs: list[tuple[Node, Node]]) -> int:
    return sum(1 for x, _ in pairs if not x.children)
