"""The JSON records of a JAX forward's values, as the PyTorch capture writes them (``capture/serialize.py``).

A JAX or numpy array becomes a tensor record: torch's names for its shape and dtype (``torch.Size([2, 7])``,
``torch.bfloat16``), its printed lines as torch prints the same values (``use_repr=True``) or a safetensors file
(``use_repr=False``), and the four stats for float16, bfloat16 and float32 arrays. Lists and tuples become JSON
lists, dicts (a ``FrozenDict`` too) objects, ``None``, bools and numbers their ``repr()``, anything else its
``repr()`` with memory addresses masked. Nothing here imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ..capture.numpy_print import array_text, dtype_text, shape_text, stat_texts
from ..capture.repr_text import sanitize
from ..capture.write import unique_file_name, write_atomic


def is_array(value: Any) -> bool:
    """A JAX array (concrete) or a numpy array."""
    if isinstance(value, np.ndarray):
        return True
    return type(value).__module__.startswith("jax") and hasattr(value, "__array__") and hasattr(value, "dtype") \
        and not is_traced(value)


def is_traced(value: Any) -> bool:
    """A tracer: the value of a call that a JAX transform inside the model (``nn.vmap``, ``nn.jit``) traced."""
    from jax.core import Tracer

    return isinstance(value, Tracer)


def traced_text(value: Any) -> str:
    shape = "x".join(map(str, getattr(value, "shape", ()))) or "scalar"
    return (f"<{getattr(value, 'dtype', '?')} {shape}: traced by a JAX transform inside the model (vmap, jit), "
            "not recorded>")


def host(value: Any) -> np.ndarray:
    """The array's values on the host, as numpy (bfloat16 as ml_dtypes' bfloat16); a tracer is no array here
    (``is_array``): its value is recorded as ``traced_text``."""
    return np.asarray(value)


class Serializer:
    """Records of one forward's values; ``use_repr=False`` writes each array into ``folder`` as safetensors."""

    def __init__(self, use_repr: bool, folder: Path | None) -> None:
        if not use_repr and folder is None:
            raise ValueError("use_repr=False needs a folder to write safetensors files into")
        self.use_repr, self.folder = use_repr, folder
        self.written: list[Path] = []
        self._used: set[str] = set()

    def __call__(self, value: Any, name: str) -> Any:
        return self._value(value, None if self.use_repr else name)

    def _value(self, value: Any, name: str | None) -> Any:
        if is_array(value):
            return self.array(host(value), name)
        if is_traced(value):
            return traced_text(value)
        if isinstance(value, (list, tuple)):
            return [self._value(item, None if name is None else f"{name}_{i}") for i, item in enumerate(value)]
        if isinstance(value, dict) or _is_mapping(value):
            return {_key(key): self._value(item, None if name is None else f"{name}_{_key(key)}")
                    for key, item in value.items()}
        if value is None or type(value) in (bool, int, float):
            return repr(value)
        return sanitize(repr(value))

    def array(self, a: np.ndarray, name: str | None) -> dict[str, Any]:
        record: dict[str, Any] = {"shape": shape_text(a), "dtype": dtype_text(a)}
        record["value"] = array_text(a).splitlines() if name is None else self._save(a, name)
        stats = stat_texts(a)
        if stats:
            record.update(stats)
        return record

    def _save(self, a: np.ndarray, name: str) -> str:
        from safetensors.numpy import save

        assert self.folder is not None
        file_name = unique_file_name(name, self._used)
        path = self.folder / file_name
        write_atomic(path, save({"data": np.ascontiguousarray(a)}))
        self.written.append(path)
        return f"./{file_name}"


def _is_mapping(value: Any) -> bool:
    return hasattr(value, "items") and hasattr(value, "keys") and type(value).__name__ in ("FrozenDict",)


def _key(key: Any) -> str:
    return key if isinstance(key, str) else str(key)


def remove_files(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
