"""Module paths and the one layer rule: what a ``.N`` component of a path means.

A module path is the root class name followed by the attribute path
(``LlamaForCausalLM.model.layers.3.mlp``). A component that is a number is a
position in a stack of layers (a ``ModuleList``/``Sequential``). Every question
about layer numbers is answered here and nowhere else.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# A path that ends in ``.<number>``: one block of a stack of layers.
LAYER_PATH = re.compile(r"^(.*)\.(\d+)$")


def split_layer_path(path: str) -> tuple[str, int] | None:
    """``("Llama.model.layers", 3)`` for ``Llama.model.layers.3``; None for a path not ending in ``.N``."""
    match = LAYER_PATH.match(path)
    return (match.group(1), int(match.group(2))) if match else None


def is_layer_block_call(path: str, child_paths: Iterable[str]) -> bool:
    """The format's rule for one block of a layer stack: a path ending in ``.N`` whose recorded
    children include a path containing ``.N.`` (its own submodules ran).

    Shared by the pruning of the JSON tree, ``Node.is_layer_block`` and the speculation.
    """
    match = LAYER_PATH.match(path)
    if match is None:
        return False
    marker = f".{match.group(2)}."
    return any(marker in child for child in child_paths)


def path_numbers(module_path: str) -> tuple[int, ...]:
    """Every ``.N`` component of a path after the root, outermost first."""
    return tuple(int(part) for part in module_path.split(".")[1:] if part.isdigit())


def layer_number(module_path: str) -> int | None:
    """The layer a path belongs to: its outermost ``.N`` component after the root, or None.

    ``Llama.model.layers.3.mlp.experts.7.w1`` belongs to layer 3 (expert 7 of layer 3).
    """
    for part in module_path.split(".")[1:]:
        if part.isdigit():
            return int(part)
    return None


def role(module_path: str) -> str | None:
    """The path with its layer number masked (``Llama.layers.#.mlp``): the same module in every layer.

    None for a path outside any layer stack.
    """
    parts = module_path.split(".")
    for i in range(1, len(parts)):
        if parts[i].isdigit():
            return ".".join(parts[:i] + ["#"] + parts[i + 1 :])
    return None


def pattern(module_path: str, mark: str = "N") -> str:
    """The path with every ``.N`` component replaced by ``mark``: ``layers.N.experts.N.w1``."""
    parts = module_path.split(".")
    return ".".join(mark if i and part.isdigit() else part for i, part in enumerate(parts))


def without_root(module_path: str) -> str:
    """The path without the root class name (``model.layers`` for ``Llama.model.layers``)."""
    return module_path.split(".", 1)[1] if "." in module_path else module_path
