"""The two pruning passes of the trace format.

Both work on the plain JSON tree (dicts with ``module_path``, ``inputs``,
``outputs``, ``children``) and mutate it in place, exactly as transformers'
``model_addition_debugger_context`` does, so the written bytes match.
"""

from __future__ import annotations

import re
from typing import Any

Tree = dict[str, Any]

# A path that ends in ``.<number>``: one block of a stack of layers.
LAYER_PATH = re.compile(r"(.*)\.(\d+)$")


def is_layer_block(node: Tree) -> bool:
    """True when ``node`` is one block of a layer stack that called submodules.

    A block is a path ending in ``.N`` whose recorded children include a path
    containing ``.N.`` (its own submodules ran).
    """
    match = LAYER_PATH.match(node.get("module_path", ""))
    children = node.get("children")
    if match is None or not children:
        return False
    marker = f".{match.group(2)}."
    return any(marker in child.get("module_path", "") for child in children)


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
