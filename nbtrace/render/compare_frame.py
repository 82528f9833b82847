"""A Comparison as a pandas table: one row per compared tensor pair, one per unmatched call."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .shards import rule_label
from .table import Columns

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


def comparison_frame(comparison: Comparison) -> pandas.DataFrame:
    """The rows of ``Comparison.to_dataframe()``.

    ``status`` is the call's status from ``node_report()`` (``"only_b"`` for calls
    of b without counterpart); ``*_diff`` are the relative stat differences; ``ok``
    is a nullable boolean (``<NA>`` when nothing could be compared). With a
    tensor-parallel side, ``rule`` says how its tensor was reassembled
    (``Shard(2) (DTensor)``, ``Replicate() (inferred)``) and ``wrong_ranks`` holds the
    ranks whose own piece differs.
    """
    report = comparison.node_report()
    rows = Columns(SCHEMA)
    for i, node in enumerate(comparison.a.nodes()):
        match = comparison.match_of(node)
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
        for d in match.diffs:
            rows.add(
                **base,
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
    return rows.frame("Comparison.to_dataframe")
