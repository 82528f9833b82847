"""A step-by-step comparison as a pandas table: one row per paired step."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .table import Columns

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from ..diff.steps.steps import StepsComparison

SCHEMA = (
    ("step", "int"),
    ("input_length", "Int64"),
    ("b_input_length", "Int64"),
    ("past_length", "Int64"),
    ("b_past_length", "Int64"),
    ("token", "tuple"),
    ("b_token", "tuple"),
    ("tokens_differ", "boolean"),
    ("status", "str"),
    ("kind", "str"),
    ("module_path", "str"),
    ("exact", "boolean"),
    ("reason", "str"),
)
COLUMNS = tuple(name for name, _ in SCHEMA)


def steps_frame(comparison: StepsComparison) -> pandas.DataFrame:
    """The rows of ``StepsComparison.to_dataframe()``: ``status`` is a step's status ("match", "first",
    "diverged", "no_data"); ``kind`` how it diverged ("trace", "cache", "inputs"); ``token``/``b_token``
    the picked tokens (a tuple per batch, None when unknown)."""
    rows = Columns(SCHEMA)
    for step in comparison.steps:
        rows.add(
            step=step.step,
            input_length=step.input_length[0],
            b_input_length=step.input_length[1],
            past_length=step.past_length[0],
            b_past_length=step.past_length[1],
            token=step.tokens[0],
            b_token=step.tokens[1],
            tokens_differ=step.tokens_differ,
            status=step.status,
            kind=step.kind,
            module_path=step.module_path,
            exact=step.exact,
            reason=step.reason,
        )
    return rows.frame("StepsComparison.to_dataframe")
