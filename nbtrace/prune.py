"""The two pruning passes of the trace format.

Both work on the plain JSON tree (dicts with ``module_path``, ``inputs``,
``outputs``, ``children``) and mutate it in place, exactly as transformers'
``model_addition_debugger_context`` does, so the written bytes match.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

Tree = dict[str, Any]

# A path that ends in ``.<number>``: one block of a stack of layers.
LAYER_PATH = re.compile(r"^(.*)\.(\d+)$")


def split_layer_path(path: str) -> tuple[str, int] | None:
    """``("Llama.model.layers", 3)`` for ``Llama.model.layers.3``; None for a path not ending in ``.N``."""
    match = LAYER_PATH.match(path)
    return (match.group(1), int(match.group(2))) if match else None


def is_layer_block_call(path: str, child_paths: Iterable[str]) -> bool:
    """The format's rule: a path ending in ``.N`` whose recorded children include a path containing ``.N.``
    (its own submodules ran). Shared by the JSON tree here and by ``Node.is_layer_block``."""
    match = LAYER_PATH.match(path)
    if match is None:
        return False
    marker = f".{match.group(2)}."
    return any(marker in child for child in child_paths)


def is_layer_block(node: Tree) -> bool:
    """True when the JSON call ``node`` is one block of a layer stack that called submodules."""
    children = node.get("children") or []
    return is_layer_block_call(node.get("module_path", ""), (child.get("module_path", "") for child in children))


def prune_intermediate_layers(node: Tree) -> list[Tree]:
    """Keep only the first and last layer block among each node's children.

    Returns the removed subtrees (so their files can be skipped or removed).
    """
    removed: list[Tree] = []
    _prune_layers(node, removed)
    return removed


def _prune_layers(node: Tree, removed: list[Tree]) -> None:
    children = node.get("children")
    if not children:
        return
    blocks = [i for i, child in enumerate(children) if is_layer_block(child)]
    if len(blocks) > 2:
        dropped = set(blocks[1:-1])
        removed.extend(children[i] for i in blocks[1:-1])
        node["children"] = [child for i, child in enumerate(children) if i not in dropped]
    for child in node["children"]:
        _prune_layers(child, removed)


def prune_outputs_of_parents(node: Tree) -> None:
    """Drop ``outputs`` from every node that has children: outputs stay at the leaves."""
    if node.get("children"):
        node.pop("outputs", None)
        for child in node["children"]:
            prune_outputs_of_parents(child)
