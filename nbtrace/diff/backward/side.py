"""``Comparison.backward``: the backward side of a comparison, as a base class so ``comparison.py`` stays one idea."""

from __future__ import annotations

from typing import Any


class BackwardSide:
    """Gives a Comparison its ``backward`` verdict (``verdict.py``), computed once on first use."""

    @property
    def backward(self) -> Any:
        """Where the two backward passes part ways (``diff/backward/``): the first module in backward order whose
        gradient is born wrong, for traces recorded with ``backward=True`` (``state == "none"`` otherwise)."""
        found = self.__dict__.get("_backward_verdict")
        if found is None:
            from .verdict import compare_backward

            found = self.__dict__["_backward_verdict"] = compare_backward(self)  # type: ignore[arg-type]
        return found
