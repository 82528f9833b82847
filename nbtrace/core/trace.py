"""Trace: a recorded or loaded forward pass, the in-memory call tree every consumer reads.

A Trace is built from the JSON tree of the file format (``Trace.from_tree``), both
when a forward was just recorded and when files are loaded, so a recorded trace
and the same trace loaded from disk are equal by construction.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .build import TreeBuilder
from .node import Node

if TYPE_CHECKING:  # pragma: no cover
    import pandas


class Trace:
    """A recorded or loaded forward pass: the call tree and how to reach its files.

    ``kind`` is ``"full"`` (values present) or ``"summary"``; ``source`` is the
    JSON file it came from or was written to; ``base_dir`` is where safetensors
    references resolve.
    """

    def __init__(self, root: Node, *, kind: str = "full", source: Path | None = None, base_dir: Path | None = None):
        self.root = root
        self.kind = kind
        self.source = Path(source) if source is not None else None
        self.base_dir = Path(base_dir) if base_dir is not None else None
        self._nodes: list[Node] | None = None
        self._sidecar: dict[str, Any] = {}
        self._twin: Any = None  # the parsed ``twin`` section (``core/twin.py``), read on first use
        #: every rank's Trace when this one was loaded from a folder of ``rank_<r>/`` folders (``core/ranks.py``)
        self.ranks: dict[int, Trace] = {}

    # -- construction ---------------------------------------------------------
    @classmethod
    def from_tree(
        cls,
        tree: dict[str, Any],
        *,
        kind: str = "full",
        source: Path | str | None = None,
        base_dir: Path | str | None = None,
    ) -> Trace:
        """Build a Trace from the JSON tree of the format; malformed input raises TraceFormatError."""
        where = source if source is not None else "<trace tree>"
        base = Path(base_dir) if base_dir is not None else None
        builder = TreeBuilder(where, base)
        root = builder.build(tree)
        trace = cls(root, kind=kind, source=Path(source) if source is not None else None, base_dir=base)
        trace._nodes = builder.order
        return trace

    # -- the sidecar ------------------------------------------------------------
    @property
    def sidecar(self) -> dict[str, Any]:
        """Sections of nbtrace's sidecar file (see ``core/sidecar.py``); empty when there is none."""
        return self._sidecar

    @sidecar.setter
    def sidecar(self, sections: dict[str, Any]) -> None:
        from .measured import attach_measured  # measured.py reads call names from ranks.py, which imports this

        self._sidecar = sections
        self._twin = None
        attach_measured(self)

    @property
    def twin(self) -> Any:
        """The float64 twin recorded with the trace (``core/twin.py``: fingerprints of every call's float64
        twin), or None when it was recorded without one."""
        from .twin import twin_of

        if self._twin is None and "twin" in self._sidecar:
            self._twin = twin_of(self)
        return self._twin

    @property
    def measured_rounding(self) -> bool:
        """True when the trace was recorded with ``measure_rounding`` (its nodes' ``measured`` hold numbers)."""
        from .measured import rounding_mode

        return rounding_mode(self) is not None

    @property
    def numerics(self) -> dict[str, Any]:
        """What the run computed with (TF32, matmul precision, attention backends, autocast, devices, torch);
        ``{}`` for a trace recorded before nbtrace recorded it. See ``core/measured.py``."""
        from .measured import NUMERICS_SECTION

        section = self._sidecar.get(NUMERICS_SECTION)
        return dict(section) if isinstance(section, dict) else {}

    @property
    def backward(self) -> Any:
        """The backward passes recorded with this forward (``nbtrace.trace(..., backward=True)``): a
        ``core.gradients.Backward``, or None when none was recorded."""
        from .gradients import backward_of

        return backward_of(self)

    # -- access ---------------------------------------------------------------
    @property
    def model_name(self) -> str:
        """The class name of the traced model (the root's module path)."""
        return self.root.module_path

    def nodes(self) -> list[Node]:
        """Every module call, in call order (the root first)."""
        if self._nodes is None:
            self._nodes = list(self.root.walk())
            for i, node in enumerate(self._nodes):
                node.index = i
        return self._nodes

    def __len__(self) -> int:
        return len(self.nodes())

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes())

    def find(self, pattern: str) -> list[Node]:
        """Calls whose module path matches ``pattern`` (a regular expression, searched)."""
        regex = re.compile(pattern)
        return [node for node in self.nodes() if regex.search(node.module_path)]

    def get(self, module_path: str, call: int = 0) -> Node | None:
        """The ``call``-th call (0-based) of ``module_path``, or None."""
        for node in self.nodes():
            if node.module_path == module_path and node.call_index == call:
                return node
        return None

    def __getitem__(self, module_path: str) -> Node:
        node = self.get(module_path)
        if node is None:
            raise KeyError(f"no module call {module_path!r} in this trace of {self.model_name}")
        return node

    def first_nonfinite(self) -> Node | None:
        """The first call (in call order) that produced a NaN or inf or was handed a NaN, or None."""
        for node in self.nodes():
            if node.nonfinite:
                return node
        return None

    def errors(self) -> list[Node]:
        """Calls that raised, innermost last."""
        return [node for node in self.nodes() if node.error is not None]

    def to_dict(self) -> dict[str, Any]:
        """The whole tree exactly as its file holds it."""
        return self.root.to_dict()

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per recorded tensor; see ``nbtrace.to_dataframe``."""
        from ..render.frame import to_dataframe

        return to_dataframe(self)

    def _repr_html_(self) -> str:
        from ..render.html import trace_html

        return trace_html(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Trace):
            return NotImplemented
        return self.kind == other.kind and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        where = f" from {self.source}" if self.source else ""
        return f"<Trace {self.model_name}: {len(self)} calls, {self.kind.upper()}{where}>"
