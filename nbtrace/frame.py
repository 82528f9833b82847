"""A trace as a pandas table: one row per recorded tensor."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from .files import load_trace
from .trace import Trace, layer_number

if TYPE_CHECKING:  # pragma: no cover
    import pandas

COLUMNS = (
    "node",
    "module_path",
    "name",
    "depth",
    "call_index",
    "layer",
    "leaf",
    "io",
    "arg",
    "shape",
    "dtype",
    "numel",
    "mean",
    "std",
    "min",
    "max",
)


def require_pandas(what: str):
    """``(numpy, pandas)``, or an ImportError that says how to install them."""
    try:
        import numpy as np
        import pandas as pd
    except ImportError:
        raise ImportError(f"{what} needs pandas: pip install 'nbtrace[notebook]'") from None
    return np, pd


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
    np, pd = require_pandas("nbtrace.to_dataframe")
    trace = load_trace(trace)
    cols: dict[str, list] = {name: [] for name in COLUMNS}
    node_col, path_col, name_col = cols["node"], cols["module_path"], cols["name"]
    depth_col, call_col, layer_col, leaf_col = cols["depth"], cols["call_index"], cols["layer"], cols["leaf"]
    io_col, arg_col, shape_col = cols["io"], cols["arg"], cols["shape"]
    dtype_col, numel_col = cols["dtype"], cols["numel"]
    mean_col, std_col, min_col, max_col = cols["mean"], cols["std"], cols["min"], cols["max"]
    nan = math.nan
    dtype_names: dict[str, str] = {}
    for position, node in enumerate(trace.nodes()):
        tensors = node.tensors()
        if not tensors:
            continue
        path = node.module_path
        name = node.name
        layer = layer_number(path)
        leaf = not node.children
        for io, arg, tensor in tensors:
            node_col.append(position)
            path_col.append(path)
            name_col.append(name)
            depth_col.append(node.depth)
            call_col.append(node.call_index)
            layer_col.append(layer)
            leaf_col.append(leaf)
            io_col.append(io)
            arg_col.append(arg)
            shape_col.append(tensor.shape)
            dtype = tensor.dtype
            short = dtype_names.get(dtype)
            if short is None:
                short = dtype_names[dtype] = dtype[6:] if dtype.startswith("torch.") else dtype
            dtype_col.append(short)
            numel_col.append(math.prod(tensor.shape))
            mean = tensor.mean
            mean_col.append(nan if mean is None else mean)
            std = tensor.std
            std_col.append(nan if std is None else std)
            low = tensor.min
            min_col.append(nan if low is None else low)
            high = tensor.max
            max_col.append(nan if high is None else high)
    shapes = np.empty(len(shape_col), dtype=object)
    shapes[:] = shape_col
    data = {
        "node": np.asarray(node_col, dtype=np.int64),
        "module_path": path_col,
        "name": name_col,
        "depth": np.asarray(depth_col, dtype=np.int64),
        "call_index": np.asarray(call_col, dtype=np.int64),
        "layer": pd.array(layer_col, dtype="Int64"),
        "leaf": np.asarray(leaf_col, dtype=bool),
        "io": io_col,
        "arg": arg_col,
        "shape": shapes,
        "dtype": dtype_col,
        "numel": np.asarray(numel_col, dtype=np.int64),
        "mean": np.asarray(mean_col, dtype=np.float64),
        "std": np.asarray(std_col, dtype=np.float64),
        "min": np.asarray(min_col, dtype=np.float64),
        "max": np.asarray(max_col, dtype=np.float64),
    }
    return pd.DataFrame(data, columns=list(COLUMNS))
