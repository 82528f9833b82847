"""Where a call sits in the model: layer numbers, layer blocks, pruning gaps, the output a parent hands on.

Shared by the table, the plots and the comparison. Everything here reads the
``Trace``/``Node`` model only.
"""

from __future__ import annotations

from .prune import split_layer_path
from .trace import Node, TensorValue, Trace


def path_numbers(module_path: str) -> tuple[int, ...]:
    """Every ``.N`` component of a path after the root, outermost first."""
    return tuple(int(part) for part in module_path.split(".")[1:] if part.isdigit())


def is_layer_block(node: Node) -> bool:
    """True for one block of a layer stack, as the format's pruning sees it."""
    return node.is_layer_block


def block_prefix(node: Node) -> str | None:
    """``Llama.model.layers`` for ``Llama.model.layers.3``; None when the node is not a ``.N`` path."""
    split = split_layer_path(node.module_path)
    return split[0] if split else None


def layer_blocks(trace: Trace) -> list[Node]:
    """Every layer block of the trace, in call order (blocks inside blocks included)."""
    return [node for node in trace.nodes() if is_layer_block(node)]


def outer_layer_blocks(trace: Trace) -> list[Node]:
    """Layer blocks that are not inside another layer block: the model's main stacks."""
    found = []
    for node in trace.nodes():
        if is_layer_block(node) and not any(is_layer_block(up) for up in ancestors(node)):
            found.append(node)
    return found


def ancestors(node: Node) -> list[Node]:
    """The node's parent, grandparent, ... up to the root."""
    found = []
    walker = node.parent
    while walker is not None:
        found.append(walker)
        walker = walker.parent
    return found


def has_pruning_gaps(trace: Trace) -> bool:
    """True when layer pruning removed blocks from this trace (a gap in some stack's numbering)."""
    return any(node.pruned_layers() for node in trace.nodes() if len(node.children) >= 2)


def would_be_pruned(trace: Trace) -> list[Node]:
    """The layer blocks the format's pruning would remove from this (unpruned) trace.

    Among each call's children, layer blocks other than the first and the last go.
    """
    removed: list[Node] = []
    stack = [trace.root]
    while stack:
        node = stack.pop()
        blocks = [child for child in node.children if is_layer_block(child)]
        dropped = {id(child) for child in blocks[1:-1]} if len(blocks) > 2 else set()
        removed.extend(child for child in node.children if id(child) in dropped)
        stack.extend(reversed([child for child in node.children if id(child) not in dropped]))
    return removed


def next_sibling(node: Node) -> Node | None:
    """The call made right after this one by the same parent, or None."""
    parent = node.parent
    if parent is None:
        return None
    siblings = parent.children
    for i, child in enumerate(siblings):
        if child is node:
            return siblings[i + 1] if i + 1 < len(siblings) else None
    return None


def last_leaf(node: Node) -> Node:
    """The last call inside ``node`` that has no children (``node`` itself for a leaf)."""
    while node.children:
        node = node.children[-1]
    return node


def handed_on(node: Node) -> tuple[Node, str, TensorValue] | None:
    """The tensor a call hands on, and where it was recorded: ``(node, arg, tensor)``.

    A leaf's first output. The format drops a parent's outputs, so for a parent it
    is the first input of the next call by the same parent with the shape of the
    parent's own first input (a layer block's output is the next block's input),
    else the first output of its last leaf. None when nothing fits.
    """
    own = [(arg, t) for io, arg, t in node.tensors() if io == "output"]
    if own:
        return node, own[0][0], own[0][1]
    inputs = [t for io, _, t in node.tensors() if io == "input"]
    want = inputs[0].shape if inputs else None
    follower = next_sibling(node)
    if follower is not None and want is not None and not _pruned_between(node, follower):
        for io, arg, tensor in follower.tensors():
            if io == "input" and tensor.shape == want:
                return follower, arg, tensor
    leaf = last_leaf(node)
    if leaf is not node:
        outs = [(arg, t) for io, arg, t in leaf.tensors() if io == "output"]
        if outs:
            return leaf, outs[0][0], outs[0][1]
    return None


def _pruned_between(node: Node, follower: Node) -> bool:
    parent = node.parent
    if parent is None:
        return False
    position = parent.children.index(follower)
    return any(gap[0] == position for gap in parent.pruned_layers())
