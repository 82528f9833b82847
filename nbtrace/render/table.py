"""The one way a list of rows becomes a pandas DataFrame with typed columns (shared by every table)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import pandas

#: Column kinds: ``int`` (int64), ``Int64`` (nullable), ``float`` (float64, None -> NaN),
#: ``bool``, ``boolean`` (nullable), ``tuple`` (an object column of tuples), ``str`` (as given).
Schema = Sequence[tuple[str, str]]


def require_pandas(what: str) -> tuple[Any, Any]:
    """``(numpy, pandas)``, or an ImportError that says how to install them."""
    try:
        import numpy as np
        import pandas as pd
    except ImportError:
        raise ImportError(f"{what} needs pandas: pip install 'nbtrace[notebook]'") from None
    return np, pd


class Columns:
    """Column lists filled row by row, turned into a typed DataFrame by ``frame()``."""

    def __init__(self, schema: Schema) -> None:
        self.schema = list(schema)
        self.data: dict[str, list] = {name: [] for name, _ in self.schema}

    def add(self, **values: Any) -> None:
        """One row; columns not given are None (NaN, <NA> or None by kind)."""
        for name, column in self.data.items():
            column.append(values.get(name))

    def frame(self, what: str) -> pandas.DataFrame:
        np, pd = require_pandas(what)
        out: dict[str, Any] = {}
        for name, kind in self.schema:
            values = self.data[name]
            if kind == "float":
                out[name] = np.asarray([math.nan if v is None else v for v in values], dtype=np.float64)
            elif kind == "int":
                out[name] = np.asarray(values, dtype=np.int64)
            elif kind == "bool":
                out[name] = np.asarray(values, dtype=bool)
            elif kind in ("Int64", "boolean"):
                out[name] = pd.array(values, dtype=kind)
            elif kind == "tuple":
                column = np.empty(len(values), dtype=object)
                column[:] = values
                out[name] = column
            else:
                out[name] = values
        return pd.DataFrame(out, columns=[name for name, _ in self.schema])
