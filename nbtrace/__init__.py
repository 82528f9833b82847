"""nbtrace: trace every module of a PyTorch forward pass, explore it in Jupyter, find where two implementations part ways."""

from typing import Any

from .capture.context import model_addition_debugger_context, trace
from .capture.recorder import Recorder
from .core.forwards import load_traces
from .core.load import load_trace
from .core.node import Node
from .core.tensor import TensorValue
from .core.trace import Trace
from .diff.comparison import Comparison
from .diff.operations import narrow
from .diff.compare import compare
from .diff.steps.steps import StepsComparison
from .diff.verdict.as_dict import verdict_schema
from .errors import TraceFormatError

__version__ = "0.1.0"

# Names whose modules need the optional notebook/analysis dependencies load on first use,
# so `import nbtrace` needs torch alone.
_LAZY = {
    "to_dataframe": "render.frame",
    "plot_stats": "render.plot",
    "plot_divergence": "render.divergence_plot",
    "TraceView": "notebook.view",
    "save_html": "notebook.html_file",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'nbtrace' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext nbtrace``: registers the ``%%modeltrace`` cell magic."""
    from .notebook.magic import register

    register(ipython)


__all__ = [
    "Comparison",
    "Node",
    "Recorder",
    "StepsComparison",
    "TensorValue",
    "Trace",
    "TraceFormatError",
    "TraceView",
    "compare",
    "load_trace",
    "load_traces",
    "model_addition_debugger_context",
    "narrow",
    "plot_divergence",
    "plot_stats",
    "save_html",
    "to_dataframe",
    "trace",
    "verdict_schema",
]
