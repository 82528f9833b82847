"""The operations of a narrowed call as a pandas table: one row per operation of each side."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .operations_words import OPERATION_STATUS_WORDS
from .table import Columns

if TYPE_CHECKING:  # pragma: no cover
    import pandas

SCHEMA = (
    ("side", "str"),
    ("index", "int"),
    ("operation", "str"),
    ("module", "str"),
    ("file", "str"),
    ("line", "int"),
    ("code", "str"),
    ("arg_shapes", "tuple"),
    ("arg_dtypes", "tuple"),
    ("shape", "tuple"),
    ("dtype", "str"),
    ("status", "str"),
    ("mean", "float"),
    ("std", "float"),
    ("min", "float"),
    ("max", "float"),
    ("own_rounding_u", "float"),
    ("error_u", "float"),
    ("counterparts", "tuple"),
    ("reaches_output", "bool"),
)


def operations_rows(diff: Any) -> list[dict[str, Any]]:
    """Plain rows (both sides, reference first) for the table and the widget."""
    rows = []
    u = diff.u
    for side, record in (("reference", diff.reference), ("port", diff.port)):
        if record is None:
            continue
        alignment = diff.alignment
        paired = {} if alignment is None else alignment.of_reference if side == "reference" else alignment.of_port
        for op in record.operations:
            status = diff.status(side, op.index)
            found = paired.get(op.index, [])
            rows.append({
                "side": side, "index": op.index, "operation": op.name, "module": op.module,
                "file": op.source.short.rsplit(":", 1)[0], "line": op.source.line, "code": op.source.text,
                "arg_shapes": tuple(op.arg_shapes), "arg_dtypes": tuple(op.arg_dtypes),
                "shape": tuple(op.shape), "dtype": op.dtype, "status": status,
                "status_words": OPERATION_STATUS_WORDS[status],
                "own_rounding_u": op.own / u if op.own is not None and u else None,
                "error_u": op.error / u if op.error is not None and u else None,
                "counterparts": tuple(c if isinstance(c, int) else c.index for c in found),
                "reaches_output": op.reaches_output,
                **{key: op.summary().get(key) for key in ("mean", "std", "min", "max")},
            })
    return rows


def operations_frame(diff: Any) -> pandas.DataFrame:
    """``OperationDiff.to_dataframe()``: ``status`` is "agrees", "differs" (the first divergence), "uncertain"
    or "only" (no counterpart); rounding in units of the compared dtype's unit roundoff."""
    columns = Columns(SCHEMA)
    for row in operations_rows(diff):
        columns.add(**{name: row[name] for name, _ in SCHEMA})
    return columns.frame("OperationDiff.to_dataframe()")
