"""nbtrace: trace every module of a PyTorch forward pass, explore it in Jupyter, find where two implementations part ways."""

from typing import Any

from .capture import Recorder, model_addition_debugger_context, trace
from .compare import Comparison, compare  # needs torch alone; eager, or `import nbtrace.compare` would shadow the function
from .errors import TraceFormatError
from .files import load_trace
from .trace import Node, TensorValue, Trace

__version__ = "0.1.0"

# Names whose modules need the optional notebook/analysis dependencies load on first use,
# so `import nbtrace` needs torch alone.
_LAZY = {
    "to_dataframe": "frame",
    "plot_stats": "plot",
    "TraceView": "widget",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        module = importlib.import_module(f".{_LAZY[name]}", __name__)
        return getattr(module, name)
    raise AttributeError(f"module 'nbtrace' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext nbtrace``: registers the ``%%modeltrace`` cell magic."""
    from .magic import register

    register(ipython)


__all__ = [
    "Comparison",
    "Node",
    "Recorder",
    "TensorValue",
    "Trace",
    "TraceFormatError",
    "TraceView",
    "compare",
    "load_trace",
    "model_addition_debugger_context",
    "plot_stats",
    "to_dataframe",
    "trace",
]
