"""The widget's front end as text: one ES module joined from its parts and one stylesheet (no build step).

TraceView (``view.py``) ships them to the notebook; ``save_html`` (``html_file.py``) inlines them in a page.
"""

from __future__ import annotations

from pathlib import Path

_HERE = Path(__file__).parent

# The ES module's parts, split by purpose: the step picker first (trace_view.js mounts it when it is
# there), the pure tree helpers, a row, the detail pane, a comparison's header and legend, the gradient plot
# of a trace with a backward pass (mounted by the view when its `gradients` trait has one), then the view.
ESM_PARTS = ("step_bar.js", "tree_model.js", "tree_row.js", "detail_pane.js", "compare_head.js", "gradient_plot.js",
             "trace_view.js")
CSS_PARTS = ("trace_view.css", "compare_view.css", "step_bar.css", "gradient_plot.css")


def joined(*names: str) -> str:
    """The files ``names`` of this folder, one after the other."""
    return "\n".join((_HERE / name).read_text(encoding="utf-8") for name in names)


ESM = joined(*ESM_PARTS)
CSS = joined(*CSS_PARTS)
