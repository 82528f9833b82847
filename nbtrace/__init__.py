"""nbtrace: trace every module of a PyTorch forward pass, explore it in Jupyter, find where two implementations part ways."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the lazy names below are, for type checkers and editors
    from .capture.context import model_addition_debugger_context, trace
    from .capture.recorder import Recorder
    from .core.forwards import load_traces
    from .core.load import load_trace
    from .core.node import Node
    from .core.tensor import TensorValue
    from .core.trace import Trace
    from .diff.compare import compare
    from .diff.comparison import Comparison
    from .diff.operations import narrow
    from .diff.steps.steps import StepsComparison
    from .diff.verdict.as_dict import verdict_schema
    from .errors import TraceFormatError
    from .notebook.html_file import save_html
    from .notebook.view import TraceView
    from .render.backward_plot import plot_gradient_norms
    from .render.divergence_plot import plot_divergence
    from .render.frame import to_dataframe
    from .render.plot import plot_stats

__version__ = "0.1.0"

# Every public name loads on first use: `import nbtrace` itself imports nothing heavy, so that
# `nbtrace.jax` (the capture of a JAX model) runs where torch is not installed, and the names whose
# modules need the optional notebook/analysis dependencies cost nothing until used.
_LAZY = {
    "model_addition_debugger_context": "capture.context",
    "trace": "capture.context",
    "Recorder": "capture.recorder",
    "load_traces": "core.forwards",
    "load_trace": "core.load",
    "Node": "core.node",
    "TensorValue": "core.tensor",
    "Trace": "core.trace",
    "Comparison": "diff.comparison",
    "narrow": "diff.operations",
    "compare": "diff.compare",
    "StepsComparison": "diff.steps.steps",
    "verdict_schema": "diff.verdict.as_dict",
    "TraceFormatError": "errors",
    "to_dataframe": "render.frame",
    "plot_stats": "render.plot",
    "plot_divergence": "render.divergence_plot",
    "plot_gradient_norms": "render.backward_plot",
    "TraceView": "notebook.view",
    "save_html": "notebook.html_file",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nbtrace' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    "plot_gradient_norms",
    "plot_stats",
    "save_html",
    "to_dataframe",
    "trace",
    "verdict_schema",
]
