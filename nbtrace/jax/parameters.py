"""The sidecar's ``parameters`` section of a JAX trace: a fingerprint of every variable, by module path.

Flax keeps a model's variables as nested dicts, ``{"params": {"layers_0": {"attn": {"q_proj": {"kernel": a}}}}}``;
all keys but the last name the module (the same module path the calls get: ``Model.layers.0.attn.q_proj``), the
last the variable (a variable a module sharing its caller's scope read is filed under that module's call,
``scopes.py``: ``mlp.gating_einsum``). ``params`` are parameters, other collections (``batch_stats``, ``cache``) buffers. Each
fingerprint is the PyTorch capture's for the same values (``capture/numpy_parameters.py``), so a kernel held as
``(in, out)`` compares with its port's ``(out, in)`` weight through the fingerprint's mirrored samples.
"""

from __future__ import annotations

from typing import Any

from ..capture.numpy_parameters import fingerprint_array
from .calls import CallNames
from .nnx import is_nnx, state_arrays
from .serialize import host, is_array


def parameters_section(variables: Any, names: CallNames) -> dict[str, dict[str, Any]]:
    """The section, from a linen model's variables, or from an nnx model (which holds its variables)."""
    section: dict[str, dict[str, Any]] = {}
    if is_nnx(variables):
        for scope, name, kind, value in state_arrays(variables):
            section.setdefault(names.module_path(scope), {})[name] = fingerprint_array(host(value), kind)
        return section

    def walk(value: Any, keys: tuple[str, ...], collection: str) -> None:
        if is_array(value):
            module = names.module_path(names.shared.owner(collection, keys))
            kind = "parameter" if collection == "params" else "buffer"
            section.setdefault(module, {})[keys[-1]] = fingerprint_array(host(value), kind)
        elif hasattr(value, "items"):
            for key, item in value.items():
                walk(item, (*keys, str(key)), collection)

    for collection, tree in variables.items():
        walk(tree, (), collection)
    return section
