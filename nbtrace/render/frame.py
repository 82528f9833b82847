"""A trace as a pandas table: one row per recorded tensor."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from ..core.dtypes import short_dtype
from ..core.load import load_trace
from ..core.node import Node
from ..core.trace import Trace
from .table import Columns

if TYPE_CHECKING:  # pragma: no cover
    import pandas

SCHEMA = (
    ("node", "int"),
    ("module_path", "str"),
    ("name", "str"),
    ("depth", "int"),
    ("call_index", "int"),
    ("layer", "Int64"),
    ("leaf", "bool"),
    ("io", "str"),
    ("arg", "str"),
    ("shape", "tuple"),
    ("dtype", "str"),
    ("numel", "int"),
    ("mean", "float"),
    ("std", "float"),
    ("min", "float"),
    ("max", "float"),
)
COLUMNS = tuple(name for name, _ in SCHEMA)


def to_dataframe(trace: Trace | str | os.PathLike) -> pandas.DataFrame:
    """One row per recorded tensor: module call × input/output × argument.

    ``trace`` is a Trace or anything ``load_trace`` reads. Columns:

    - ``node``: the call's position in ``trace.nodes()`` (call order); ``module_path``,
      ``name`` (last path component), ``depth`` (root 0), ``call_index`` (0 for a
      module's first call, 1 for its second, ...), ``leaf`` (the call has no children);
    - ``layer``: the layer the call belongs to, from its outermost ``.N`` path
      component (nullable ``Int64``, ``<NA>`` outside layer stacks);
    - ``io`` (``"input"``/``"output"``), ``arg`` (``args.0``, ``kwargs.attention_mask``,
      ``out``, ``out.1``, ``out.logits``, ...);
    - ``shape`` (tuple of ints), ``dtype`` (``"float32"``, without ``torch.``), ``numel``;
    - ``mean``, ``std``, ``min``, ``max``: float64 parsed from the format's stat strings,
      NaN where the format writes none (integer and bool tensors).
    """
    trace = load_trace(trace)
    rows = Columns(SCHEMA)
    add = rows.add
    for position, node in enumerate(trace.nodes()):
        tensors = node.tensors()
        if not tensors:
            continue
        call = call_columns(position, node)
        for io, arg, tensor in tensors:
            add(
                **call,
                io=io,
                arg=arg,
                shape=tensor.shape,
                dtype=short_dtype(tensor.dtype),
                numel=math.prod(tensor.shape),
                mean=tensor.mean,
                std=tensor.std,
                min=tensor.min,
                max=tensor.max,
            )
    return rows.frame("nbtrace.to_dataframe")


def call_columns(position: int, node: Node) -> dict[str, Any]:
    """The columns that say which call a row's tensor belongs to (``node`` its position in call order)."""
    return {"node": position, "module_path": node.module_path, "name": node.name, "depth": node.depth,
            "call_index": node.call_index, "layer": node.layer, "leaf": not node.children}
