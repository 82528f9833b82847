"""The two pruning passes of the trace format.

Both work on the plain JSON tree (dicts with ``module_path``, ``inputs``,
``outputs``, ``children``) and mutate it in place, exactly as transformers'
``model_addition_debugger_context`` does, so the written bytes match.
"""

from __future__ import annotations

from typing import Any

from ..core.paths import is_layer_block_call

Tree = dict[str, Any]

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
