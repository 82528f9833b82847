"""A Comparison as a pandas table: one row per compared tensor pair, one per unmatched call."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .trace import layer_number

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .compare import Comparison

COLUMNS = (
    "node",
    "module_path",
    "b_path",
    "call_index",
    "layer",
    "status",
    "io",
    "arg",
    "b_arg",
    "shape",
    "b_shape",
    "dtype",
    "b_dtype",
    "basis",
    "max_abs",
    "max_rel",
    "cosine",
    "mean_diff",
    "std_diff",
    "min_diff",
    "max_diff",
    "score",
    "rtol",
    "atol",
    "ok",
)

_FLOATS = frozenset(
    ("max_abs", "max_rel", "cosine", "mean_diff", "std_diff", "min_diff", "max_diff", "score", "rtol", "atol")
)


def comparison_frame(comparison: Comparison) -> pandas.DataFrame:
    """The rows of ``Comparison.to_dataframe()``.

    ``status`` is the call's status from ``node_report()`` (``"only_b"`` for calls
    of b without counterpart); ``*_diff`` are the relative stat differences; ``ok``
    is a nullable boolean (``<NA>`` when nothing could be compared).
    """
    from .frame import require_pandas

    np, pd = require_pandas("Comparison.to_dataframe")
    report = comparison.node_report()
    nodes = comparison.a.nodes()
    rows: dict[str, list] = {name: [] for name in COLUMNS}

    def add(**values) -> None:
        for name in COLUMNS:
            rows[name].append(values.get(name))

    for i, node in enumerate(nodes):
        match = comparison.match_of(node)
        base = {
            "node": i,
            "module_path": node.module_path,
            "b_path": report[i]["b_path"],
            "call_index": node.call_index,
            "layer": layer_number(node.module_path),
            "status": report[i]["status"],
        }
        if match is None or not match.diffs:
            if match is None:
                add(**base)
            continue
        for d in match.diffs:
            add(
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
            )
    for node in comparison.unmatched_b:
        add(
            b_path=node.module_path,
            call_index=node.call_index,
            layer=layer_number(node.module_path),
            status="only_b",
        )
    data = {}
    for name in COLUMNS:
        values = rows[name]
        if name in _FLOATS:
            data[name] = np.asarray([math.nan if v is None else v for v in values], dtype=np.float64)
        elif name in ("node", "layer", "call_index"):
            data[name] = pd.array(values, dtype="Int64")
        elif name == "ok":
            data[name] = pd.array(values, dtype="boolean")
        elif name in ("shape", "b_shape"):
            column = np.empty(len(values), dtype=object)
            column[:] = values
            data[name] = column
        else:
            data[name] = values
    return pd.DataFrame(data, columns=list(COLUMNS))
