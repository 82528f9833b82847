"""``flax.nnx`` models: their calls seen by wrapping ``__call__`` of their modules' classes while a forward runs.

An nnx model is a tree of Python objects (as a PyTorch model is), so its calls are seen the way torch's hooks see
them: every module of the model is known by its path (``nnx.iter_modules``: ``layers.0.fc``, list items as
numbers already), and each class among them has its ``__call__`` wrapped for the forward only; a call of an
instance that is not part of the model runs untouched. The wrappers are removed on exit, whatever happened; they are
process-wide while active. The float64 twin is the model split into its graph and state, the state's float arrays
in float64, merged again (``nnx.split`` / ``nnx.merge``): the user's model is not touched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .calls import CallRecorder


def is_nnx(model: Any) -> bool:
    try:
        from flax import nnx
    except ImportError:  # a Flax without nnx
        return False
    return isinstance(model, nnx.Module)


@contextmanager
def intercepted(model: Any, recorder: CallRecorder) -> Iterator[None]:
    """Every module of ``model`` called while active is recorded by ``recorder`` under its path."""
    modules = list(_iter_modules(model))
    paths = {id(module): tuple(str(p) for p in path) for path, module in modules}
    paths[id(model)] = ()
    classes = {type(module) for _, module in modules} | {type(model)}
    originals = {cls: cls.__call__ for cls in classes}  # all read before any is wrapped: none wraps another's
    defined = {cls: "__call__" in cls.__dict__ for cls in classes}

    def wrap(original: Callable) -> Callable:
        @functools.wraps(original)  # its signature is the original's: arguments are recorded by their names
        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            scope = paths.get(id(self))
            if scope is None:
                return original(self, *args, **kwargs)
            return recorder.record_scope(self, scope, args, kwargs, lambda *a, **k: original(self, *a, **k))
        return __call__

    try:
        for cls, original in originals.items():
            cls.__call__ = wrap(original)
        yield
    finally:
        for cls, original in originals.items():
            if defined[cls]:
                cls.__call__ = original
            else:
                del cls.__call__


def _iter_modules(model: Any) -> Iterator[tuple[tuple, Any]]:
    from flax import nnx

    walk = getattr(nnx, "iter_modules", None)  # the function in newer Flax; the method before
    return walk(model) if walk is not None else model.iter_modules()


def state_arrays(model: Any) -> list[tuple[tuple[str, ...], str, Any]]:
    """``(module path, variable name, kind)`` and value of every variable of ``model``: ``(scope, name, kind,
    array)`` with kind "parameter" for ``nnx.Param``, "buffer" for the others (batch statistics, caches)."""
    from flax import nnx

    found = []
    for path, variable in nnx.to_flat_state(nnx.state(model)):
        value = variable.get_value() if hasattr(variable, "get_value") else variable.value
        kind = "parameter" if isinstance(variable, nnx.Param) else "buffer"
        found.append((tuple(str(p) for p in path[:-1]), str(path[-1]), kind, value))
    return found


def float64_copy(model: Any, widen: Callable[[Any], Any], perturb: Callable[[Any, str], Any] | None) -> Any:
    """A copy of ``model`` whose float arrays went through ``widen`` (and ``perturb``, with their path)."""
    import jax
    from flax import nnx

    graphdef, state = nnx.split(model)

    def each(path: Any, leaf: Any) -> Any:
        wide = widen(np.asarray(leaf)) if hasattr(leaf, "dtype") else leaf
        if perturb is not None and hasattr(wide, "dtype"):
            wide = perturb(wide, jax.tree_util.keystr(path))
        return wide

    return nnx.merge(graphdef, jax.tree_util.tree_map_with_path(each, state))
