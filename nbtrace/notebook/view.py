"""TraceView: the interactive call-tree widget (anywidget; the ES module and CSS sit beside this file)."""

from __future__ import annotations

import json
import os
from typing import Any

import anywidget
import traitlets

from ..core.node import Node
from ..core.trace import Trace
from .assets import CSS, ESM, ESM_PARTS
from .shown import Shown, is_comparison, open_source, resolve_source

__all__ = ["CSS", "ESM", "ESM_PARTS", "TraceView", "is_comparison", "resolve_source"]


class TraceView(anywidget.AnyWidget):
    """An interactive, virtualized call tree of a Trace (or of trace ``a`` of a comparison).

    ``TraceView(trace)``, ``TraceView("out/")`` or ``TraceView(nbtrace.compare(a, b))``.
    Click a row (or move with the arrow keys) to select it: ``view.selected`` holds its
    module path, ``view.selected_node`` the exact call, and the detail pane shows every
    input and output. ``view.filter`` narrows the tree to matching module paths.

    Several forwards (``TraceView(rec)``, a folder written by a traced ``generate``, a list
    of Traces, or a step-by-step comparison) get a step picker: ``view.step`` is the
    forward shown (0: the prefill), and a comparison colours each step by its verdict.

    A trace recorded with ``backward=True`` gets a plot of gradient norms across layers under the tree (and,
    beside it, the forward's hidden-state RMS): click a point to select its layer. ``view.gradients`` holds it.

    ``view.save_html("port.html")`` saves what it shows as one self-contained, interactive HTML file.
    """

    _esm = ESM
    _css = CSS

    # The rows payload (see payload.py) as compact JSON: Jupyter's message packer would
    # otherwise add a space after every one of the ~150,000 numbers of a 20,000-call trace.
    payload = traitlets.Unicode("{}").tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    selected_row = traitlets.Int(-1).tag(sync=True)
    filter = traitlets.Unicode("").tag(sync=True)
    visible_rows = traitlets.Int(18).tag(sync=True)
    #: the forward shown, for several forwards (0 otherwise); ``steps`` holds the picker's per-step facts
    step = traitlets.Int(0).tag(sync=True)
    steps = traitlets.Unicode("").tag(sync=True)
    #: the gradient plot's data (``gradient_plot.py``) as compact JSON, "" for a trace without a backward pass
    gradients = traitlets.Unicode("").tag(sync=True)

    def __init__(
        self, source: Trace | str | os.PathLike | Any, *, expand_depth: int = 2, step: int | None = None, **kwargs: Any
    ) -> None:
        self._expand_depth = expand_depth
        self._steps, shown, (trace, report, comparison) = open_source(source, step)
        if self._steps is not None:
            kwargs["steps"] = json.dumps(self._steps.facts(), separators=(",", ":"), allow_nan=False)
            kwargs["step"] = shown
        initial = self._show(trace, report, comparison)
        super().__init__(**initial, **kwargs)
        self.on_msg(self._on_frontend_msg)

    def _show(self, trace: Trace, report: list[dict[str, Any]] | None, comparison: Any) -> dict[str, Any]:
        """Make ``trace`` the one shown; returns the traits that show it (payload, and the selection it opens on)."""
        divergence = self._steps.divergence(trace) if self._steps is not None and report is not None else None
        self._shown = Shown(trace, report, comparison, expand_depth=self._expand_depth, divergence=divergence)
        return {"selected_row": self._shown.selected_row, "selected": self._shown.selected,
                "payload": self._shown.payload_json(), "gradients": self._shown.gradients_json()}

    # what is shown, for Python-side inspection
    @property
    def trace(self) -> Trace:
        """The Trace shown (trace ``a`` of a comparison; the current step's of several forwards)."""
        return self._shown.trace

    @property
    def rows(self) -> dict[str, Any]:
        """The rows payload as a dict (``payload`` holds it as JSON)."""
        return self._shown.rows

    @property
    def comparison(self) -> Any:
        """The comparison shown (the current step's of a step-by-step comparison), or None."""
        return self._shown.comparison

    @property
    def _report(self) -> list[dict[str, Any]] | None:
        return self._shown.report

    @property
    def _row_nodes(self) -> list[Node | None]:
        return self._shown.row_nodes

    @property
    def _row_of_node(self) -> dict[int, int]:
        return self._shown.row_of_node

    # -- steps ---------------------------------------------------------------------------
    @property
    def step_count(self) -> int:
        """How many forwards the view can show (1 for a single forward)."""
        return self._steps.count if self._steps is not None else 1

    @traitlets.validate("step")
    def _valid_step(self, proposal: dict[str, Any]) -> int:
        step = proposal["value"]
        if not 0 <= step < self.step_count:
            raise traitlets.TraitError(f"step {step} is out of range: this view has {self.step_count} step(s)")
        return step

    @traitlets.observe("step")
    def _step_changed(self, change: dict[str, Any]) -> None:
        if self._steps is None or change["new"] == change["old"]:
            return
        shown = self._steps.get(change["new"])
        if shown[0] is self.trace:  # already on screen (the step the view was built with)
            return
        keep = self.selected_node
        initial = self._show(*shown)
        if keep is not None:  # the same call in the new step, if it has it (else the step's first divergence)
            node = self.trace.get(keep.module_path, keep.call_index)
            if node is not None and id(node) in self._row_of_node:
                initial.update(selected_row=self._row_of_node[id(node)], selected=node.module_path)
        with self.hold_sync():
            self.selected_row = initial.pop("selected_row")
            self.selected = initial.pop("selected")
            self.gradients = initial.pop("gradients")
            self.payload = initial.pop("payload")

    # -- selection ---------------------------------------------------------------
    @property
    def selected_node(self) -> Node | None:
        """The selected call (the exact call when a module path is called more than once)."""
        if 0 <= self.selected_row < len(self._row_nodes):
            node = self._row_nodes[self.selected_row]
            if node is not None and node.module_path == self.selected:
                return node
        return self.trace.get(self.selected) if self.selected else None

    @traitlets.observe("selected")
    def _selected_changed(self, change: dict[str, Any]) -> None:
        path = change["new"]
        if not path:
            self.selected_row = -1
            return
        current = self._row_nodes[self.selected_row] if 0 <= self.selected_row < len(self._row_nodes) else None
        if current is not None and current.module_path == path:
            return
        node = self.trace.get(path)
        if node is None:
            self.selected = change["old"]
            raise traitlets.TraitError(f"no module call {path!r} in this trace of {self.trace.model_name}")
        self.selected_row = self._row_of_node[id(node)]

    # -- details on demand ------------------------------------------------------------
    def detail(self, row: int) -> dict[str, Any]:
        """The detail pane's content for payload row ``row`` (what the front end asks for)."""
        return self._shown.detail(row)

    def _on_frontend_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        # NB: never call this `_handle_msg` -- that name is ipywidgets' own comm handler.
        if not isinstance(content, dict) or content.get("type") != "detail":
            return
        row = content.get("row")
        try:
            detail = self.detail(int(row))  # type: ignore[arg-type]
        except (TypeError, ValueError, IndexError) as exc:
            self.send({"type": "detail", "row": row, "error": str(exc)})
            return
        self.send({"type": "detail", "row": row, "detail": detail})

    # -- a file to send ------------------------------------------------------------------
    def page_state(self) -> Any:
        """What a saved page opens on: this view's steps, step, filter and selection (see ``save_html``)."""
        from .html_file import PageState

        return PageState(self._steps, self.step, self._shown, filter=self.filter, selected_row=self.selected_row,
                         selected=self.selected, expand_depth=self._expand_depth)

    def save_html(self, path: str | os.PathLike, *, values: bool = False) -> Any:
        """Save what this view shows (every step, the step, filter and selection it is at) as one
        self-contained, interactive HTML file; returns its path. See ``nbtrace.save_html``."""
        from .html_file import save_html

        return save_html(self, path, values=values)

    # -- display -----------------------------------------------------------------------
    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The widget, plus a static HTML tree for places without a kernel (nbconvert, GitHub)."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = dict(data)
        data["text/html"] = self._static_html()
        return data, metadata

    def _static_html(self) -> str:
        """What a place without a kernel shows: a comparison's verdict, evidence and tree, else the tree."""
        if self._steps is not None and self._steps.comparison is not None:  # every step's verdict, then the first
            return self._steps.comparison._repr_html_()
        if self.comparison is not None and callable(getattr(self.comparison, "_repr_html_", None)):
            return self.comparison._repr_html_()
        from ..render.html import tree_html

        status = [entry.get("status") for entry in self._report] if self._report is not None else None
        html = tree_html(self.trace, status=status, max_rows=200)
        return f"<div>step {self.step} of {self.step_count}</div>{html}" if self._steps is not None else html

    def __repr__(self) -> str:
        kind = "comparison" if self._report is not None else "trace"
        steps = f", step {self.step} of {self.step_count}" if self._steps is not None else ""
        return f"<TraceView of {kind} {self.trace.model_name}: {len(self.trace)} calls{steps}>"
