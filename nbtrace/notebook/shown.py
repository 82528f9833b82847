"""What a view shows, without a widget: the source opened (one forward, or the steps of several), and one
forward on screen (its rows payload, the node of each row, each row's details).

TraceView (``view.py``) is this plus the synced traits of a widget; ``save_html`` (``html_file.py``) writes
the same payloads and details into one file. Neither needs anywidget here.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

from ..core.load import load_trace
from ..core.node import Node
from ..core.trace import Trace
from .compare_payload import comparison_detail, comparison_payload
from .backward_detail import add_b_gradients, add_gradients
from .detail import node_detail
from .gradient_plot import gradient_plot_json
from .payload import tree_payload
from .steps_source import StepSource, is_several

ACCEPTS = (
    "a Trace, a path to a trace file or folder, several forwards (a list of Traces, a Recorder), "
    "or a comparison from nbtrace.compare"
)


def is_comparison(obj: object) -> bool:
    """True for a comparison (duck-typed: ``.a`` and ``.b`` Traces and ``node_report()``)."""
    return (
        isinstance(getattr(obj, "a", None), Trace)
        and isinstance(getattr(obj, "b", None), Trace)
        and callable(getattr(obj, "node_report", None))
    )


def resolve_source(source: object, who: str = "TraceView") -> tuple[Trace, list[dict[str, Any]] | None]:
    """The Trace to show and, for a comparison, its node report (one dict per node of ``a``)."""
    if isinstance(source, Trace):
        return source, None
    if isinstance(source, (str, os.PathLike)):
        return load_trace(source), None
    if is_comparison(source):
        report = list(source.node_report())  # type: ignore[attr-defined]
        trace = source.a  # type: ignore[attr-defined]
        if len(report) != len(trace.nodes()):
            raise ValueError(
                f"the comparison's node_report() has {len(report)} entries but trace a has {len(trace.nodes())} calls"
            )
        return trace, report
    raise TypeError(f"{who} needs {ACCEPTS}; got {type(source).__name__}: {source!r:.80}")


def open_source(
    source: Any, step: int | None = None, who: str = "TraceView"
) -> tuple[StepSource | None, int, tuple[Trace, list[dict[str, Any]] | None, Any]]:
    """The steps of ``source`` (None for one forward), the step to show first, and what that step shows:
    its Trace, and for a comparison its node report and the comparison."""
    if is_several(source):
        steps = StepSource(source)
        shown = steps.check(step) if step is not None else steps.initial_step()
        return steps, shown, steps.get(shown)
    if step not in (None, 0):
        what = repr(str(source)) if isinstance(source, (str, os.PathLike)) else type(source).__name__
        raise ValueError(f"step={step}: {what} holds a single forward")
    trace, report = resolve_source(source, who)
    return None, 0, (trace, report, source if report is not None else None)


class Shown:
    """One forward as a view shows it: ``rows`` (the payload), ``row_nodes`` and ``detail(row)``.

    ``divergence`` is a run's first divergence when this is the step it was found in (see
    ``StepSource.divergence``); ``selected_row`` is the row the view opens on (the first
    divergence, else -1), whose detail the payload carries as ``initial_detail``.
    """

    def __init__(
        self,
        trace: Trace,
        report: list[dict[str, Any]] | None,
        comparison: Any,
        *,
        expand_depth: int = 2,
        divergence: Any = None,
    ) -> None:
        status = [entry.get("status") for entry in report] if report is not None else None
        payload, row_nodes = tree_payload(trace, status=status, expand_depth=expand_depth)
        self.trace = trace
        self.report = report
        self.comparison = comparison
        self.divergence = divergence
        self.rows = payload
        self.row_nodes = row_nodes
        self.row_of_node = {id(node): row for row, node in enumerate(row_nodes) if node is not None}
        self._totals = Counter(node.module_path for node in trace.nodes())
        if comparison is not None and is_comparison(comparison):
            payload["compare"] = comparison_payload(comparison, row_nodes, divergence)
        self.selected_row = payload.get("first_divergence", -1)
        if self.selected_row >= 0:
            # shown at once, and where no kernel answers (a saved notebook, a saved HTML file)
            payload["initial_detail"] = {"row": self.selected_row, "detail": self.detail(self.selected_row)}

    @property
    def selected(self) -> str:
        """The module path of the row the view opens on ("" for none)."""
        node = self.row_nodes[self.selected_row] if self.selected_row >= 0 else None
        return node.module_path if node is not None else ""

    def gradients_json(self) -> str:
        """The gradient plot's data as compact JSON, "" where no side recorded a backward pass (the ``gradients``
        trait; ``gradient_plot.py``)."""
        if not hasattr(self, "_gradients"):
            self._gradients = gradient_plot_json(self.trace, self.row_of_node, self.comparison, self.report)
        return self._gradients

    def payload_json(self) -> str:
        """The payload as compact JSON (what the widget's ``payload`` trait holds)."""
        return json.dumps(self.rows, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    def row_of(self, node: Node | None) -> int:
        """The row that shows ``node`` (-1 when it is not in this forward)."""
        return self.row_of_node.get(id(node), -1) if node is not None else -1

    def detail(self, row: int) -> dict[str, Any]:
        """The detail pane's content for payload row ``row`` (what the front end asks for)."""
        if not 0 <= row < len(self.row_nodes):
            raise IndexError(f"row {row} is out of range (0..{len(self.row_nodes) - 1})")
        node = self.row_nodes[row]
        if node is None:
            return {"path": "", "marker": True}
        detail = node_detail(node, self._totals[node.module_path])
        add_gradients(self.trace, node, detail)  # a trace recorded with backward=True: its gradients too
        if self.report is not None:
            detail["comparison"] = comparison_detail(self.comparison, node, self.report[node.index], self.divergence)
            b_path = self.report[node.index].get("b_path")
            b = self.comparison.b
            add_b_gradients(b, (b.get(b_path, node.call_index) or b.get(b_path)) if b_path else None, detail)
        return detail
