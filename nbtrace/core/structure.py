"""Questions about a whole trace's structure: its layer stacks, and what pruning removed or would remove.

Questions about one call's place in the tree are ``Node`` methods; these need the whole trace.
"""

from __future__ import annotations

from .node import Node
from .paths import split_layer_path
from .tensor import TensorValue
from .trace import Trace


def layer_blocks(trace: Trace) -> list[Node]:
    """Every layer block of the trace, in call order (blocks inside blocks included)."""
    return [node for node in trace.nodes() if node.is_layer_block]


def outer_layer_blocks(trace: Trace) -> list[Node]:
    """Layer blocks that are not inside another layer block: the model's main stacks."""
    return [
        node
        for node in trace.nodes()
        if node.is_layer_block and not any(up.is_layer_block for up in node.ancestors())
    ]


def has_pruning_gaps(trace: Trace) -> bool:
    """True when layer pruning removed blocks from this trace (a gap in some stack's numbering)."""
    return any(node.pruned_layers() for node in trace.nodes() if len(node.children) >= 2)


def shows_pruning(trace: Trace) -> bool:
    """True when layer pruning removed blocks from this trace: a gap in a stack's numbering, or a stack whose first
    block held is not its block 0 (the format keeps the first and the last layer block among a call's children,
    which may belong to two stacks: an encoder's block 0 and a decoder's last)."""
    if has_pruning_gaps(trace):
        return True
    first: dict[str, int] = {}
    for node in layer_blocks(trace):
        prefix, number = split_layer_path(node.module_path)  # type: ignore[misc]
        first[prefix] = min(first.get(prefix, number), number)
    return any(number > 0 for number in first.values())


def would_be_pruned(trace: Trace) -> list[Node]:
    """The layer blocks the format's pruning would remove from this (unpruned) trace.

    Among each call's children, layer blocks other than the first and the last go.
    """
    removed: list[Node] = []
    stack = [trace.root]
    while stack:
        node = stack.pop()
        blocks = [child for child in node.children if child.is_layer_block]
        dropped = {id(child) for child in blocks[1:-1]} if len(blocks) > 2 else set()
        removed.extend(child for child in node.children if id(child) in dropped)
        stack.extend(reversed([child for child in node.children if id(child) not in dropped]))
    return removed


def handed_on(node: Node) -> tuple[Node, str, TensorValue] | None:
    """The tensor a call hands on, and where it was recorded: ``(node, arg, tensor)``.

    A leaf's first output. The format drops a parent's outputs, so for a parent it
    is the first input of the next call by the same parent with the shape of the
    parent's own first input (a layer block's output is the next block's input),
    when no layers were pruned in between. None when nothing records it: a value
    recorded elsewhere (the last leaf's output, say) is not the call's output.
    """
    own = [(arg, t) for io, arg, t in node.tensors() if io == "output"]
    if own:
        return node, own[0][0], own[0][1]
    inputs = node.input_tensors()
    follower = node.next_sibling()
    if follower is None or not inputs or follower.gap_before() is not None:
        return None
    want = inputs[0].shape
    for io, arg, tensor in follower.tensors():
        if io == "input" and tensor.shape == want:
            return follower, arg, tensor
    return None
