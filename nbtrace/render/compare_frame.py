"""A Comparison as a pandas table: one row per compared tensor pair, one per unmatched call."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .shards import rule_label
from .table import Columns
from .verdict import evidence_words, verdict_words

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from ..diff.comparison import Comparison

SCHEMA = (
    ("node", "Int64"),
    ("module_path", "str"),
    ("b_path", "str"),
    ("call_index", "Int64"),
    ("layer", "Int64"),
    ("status", "str"),
    ("io", "str"),
    ("arg", "str"),
    ("b_arg", "str"),
    ("shape", "tuple"),
    ("b_shape", "tuple"),
    ("dtype", "str"),
    ("b_dtype", "str"),
    ("basis", "str"),
    ("max_abs", "float"),
    ("max_rel", "float"),
    ("cosine", "float"),
    ("mean_diff", "float"),
    ("std_diff", "float"),
    ("min_diff", "float"),
    ("max_diff", "float"),
    ("score", "float"),
    ("rtol", "float"),
    ("atol", "float"),
    ("ok", "boolean"),
    ("rule", "str"),
    ("wrong_ranks", "tuple"),
)
COLUMNS = tuple(name for name, _ in SCHEMA)
#: a call's difference as the verdict measured it (``Match.difference``), in units of u: present only
#: when the comparison has them (full tensors); repeated on each tensor row of the call
DIFFERENCE_SCHEMA = (("own", "float"), ("inherited", "float"), ("out", "float"), ("unit", "float"),
                     ("call_score", "float"))
#: the evidence sentences of a call (``CallDifference.evidence``) and, on the row of the tensor where the
#: first divergence was seen, the verdict's own (``FirstDivergence.evidence``); present when there is any
EVIDENCE_SCHEMA = (("evidence", "str"),)
ORDERS = ("calls", "difference")


def comparison_frame(comparison: Comparison, order: str = "calls") -> pandas.DataFrame:
    """The rows of ``Comparison.to_dataframe()``.

    ``status`` is the call's status from ``node_report()`` (``"only_b"`` for calls
    of b without counterpart); ``*_diff`` are the relative stat differences (compared on
    the printed and stats bases; NaN where full tensors were compared); ``ok`` is a
    nullable boolean (``<NA>`` when nothing could be compared). With a tensor-parallel
    side, ``rule`` says how its tensor was reassembled (``Shard(2) (DTensor)``,
    ``Replicate() (inferred)``) and ``wrong_ranks`` holds the ranks whose own piece differs.
    ``own``, ``inherited``, ``out``, ``unit``, ``call_score`` (``DIFFERENCE_SCHEMA``) and
    ``evidence`` exist only when the comparison measured them. ``order="difference"`` puts
    the rows that differ first: the tensor where the first divergence was seen, then the
    tensors that differ (by the call's score where there is one, else their own), then the rest.
    ``df.attrs`` holds the ``verdict``, its ``headline``, the ``notes``, which rule decided (``decided_by``) and
    each side's ``numerics``.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}; got {order!r}")
    report = comparison.node_report()
    matches = [comparison.match_of(node) for node in comparison.a.nodes()]
    with_difference = any(m is not None and m.difference is not None for m in matches)
    first = comparison.first_divergence
    seen = _seen_match(first, matches)
    with_evidence = seen is not None or any(m is not None and m.difference is not None and m.difference.evidence
                                            for m in matches)
    schema = SCHEMA + (DIFFERENCE_SCHEMA if with_difference else ()) + (EVIDENCE_SCHEMA if with_evidence else ())
    rows = Columns(schema)
    seen_rows: set[int] = set()  # the row of the tensor where the first divergence was seen
    for i, (node, match) in enumerate(zip(comparison.a.nodes(), matches)):
        base = {
            "node": i,
            "module_path": node.module_path,
            "b_path": report[i]["b_path"],
            "call_index": node.call_index,
            "layer": node.layer,
            "status": report[i]["status"],
        }
        if match is None:
            rows.add(**base)
            continue
        call = _call_columns(match.difference)
        call_evidence = call.pop("evidence", None)
        for d in match.diffs:
            evidence = call_evidence
            if match is seen and (d.io, d.arg) == (first.io, first.arg):
                seen_rows.add(len(rows.data["node"]))
                evidence = "; ".join(e.line for e in verdict_words(comparison).divergence.evidence) or evidence
            rows.add(
                **base,
                **call,
                evidence=evidence,
                io=d.io,
                arg=d.arg,
                b_arg=d.b_arg,
                shape=d.shape,
                b_shape=d.b_shape,
                dtype=d.dtype,
                b_dtype=d.b_dtype,
                basis=d.basis,
                max_abs=d.max_abs,
                max_rel=d.max_rel,
                cosine=d.cosine,
                mean_diff=d.stat_diffs.get("mean"),
                std_diff=d.stat_diffs.get("std"),
                min_diff=d.stat_diffs.get("min"),
                max_diff=d.stat_diffs.get("max"),
                score=d.score,
                rtol=d.rtol,
                atol=d.atol,
                ok=d.ok,
                rule=rule_label(d) or None,
                wrong_ranks=tuple(sorted(getattr(d, "wrong_ranks", {}))) or None,
            )
    for node in comparison.unmatched_b:
        rows.add(b_path=node.module_path, call_index=node.call_index, layer=node.layer, status="only_b")
    frame = rows.frame("Comparison.to_dataframe")
    if order == "difference":
        frame = frame.iloc[_difference_order(rows, with_difference, seen_rows)].reset_index(drop=True)
    words = verdict_words(comparison)
    frame.attrs.update(verdict=words.verdict, headline=words.headline, notes=list(words.notes),
                       decided_by=words.decided_by, numerics=list(words.numerics), end_to_end=words.end_to_end)
    return frame


def _seen_match(first, matches: list) -> object | None:
    """The match whose tensors the first divergence was seen in (its ``diffs``; else by path)."""
    if first is None or not hasattr(first, "observed_path"):
        return None
    found = [m for m in matches if m is not None and m.diffs is first.diffs]
    found = found or [m for m in matches if m is not None and m.a.module_path == first.observed_path]
    return found[0] if found else None


def _call_columns(difference) -> dict:
    if difference is None:
        return {}
    evidence = "; ".join(e.line for e in evidence_words(list(difference.evidence))) or None
    return {"own": difference.own, "inherited": difference.inherited, "out": difference.out,
            "unit": difference.unit, "call_score": difference.score, "evidence": evidence}


def _difference_order(rows: Columns, with_difference: bool, seen_rows: set[int]) -> list[int]:
    """Row positions, differing rows first (see ``comparison_frame``)."""
    data = rows.data
    count = len(data["node"])

    def key(k: int):
        call_score = data["call_score"][k] if with_difference else None
        score = data["score"][k]
        differs = data["ok"][k] is False
        return (
            k not in seen_rows,
            not differs,
            -(call_score if call_score is not None and call_score == call_score else -1.0),
            -(score if score is not None and score == score else -1.0),
            k,
        )

    return sorted(range(count), key=key)
