"""Layer pruning of one side against blocks the other side does not number.

The format's pruning thins a stack of numbered layer blocks (``layers.0``, ``layers.1``, …) to its first and last.
A house that names its blocks instead (torchvision's ``encoder_layer_0``, ``encoder_layer_1``, … in a
``Sequential``) is never thinned, so its blocks the other side's files dropped are still there, and order alone
cannot tell which of its identical blocks pairs with the other side's last one. The pruned side's files say how many
blocks its stack held and which ones went; the stack of the whole side is the one call whose children include a run
of exactly that many alike calls (as many calls inside each, the same first input shape as the pruned side's
blocks). Its blocks at the dropped numbers are set aside, as a numbered stack's would be; where no stack or several
fit, nothing is (the alignment decides as before).
"""

from __future__ import annotations

from ...core.dtypes import dtype_kind
from ...core.node import Node
from ...core.paths import split_layer_path
from ...core.trace import Trace


def unnumbered_pruned(pruned: Trace, whole: Trace) -> list[Node]:
    """The calls of ``whole`` inside blocks that ``pruned``'s files dropped, where ``whole`` does not number them
    (the module docstring)."""
    found: list[Node] = []
    for node in pruned.nodes():
        gaps = node.pruned_layers() if len(node.children) >= 2 else []
        if not gaps:
            continue
        kept = [child for child in node.children if child.is_layer_block
                and split_layer_path(child.module_path)[0] == gaps[0].prefix]  # type: ignore[index]
        numbers = [split_layer_path(child.module_path)[1] for child in kept]  # type: ignore[index]
        if not kept or numbers[0] != 0:
            continue
        dropped = {n for gap in gaps for n in range(gap.first, gap.last + 1)}
        stack = _the_stack(whole, numbers[-1] + 1, _first_input(kept[0]))
        if stack is not None:
            found += [n for k, block in enumerate(stack) if k in dropped for n in block.walk()]
    return found


def _the_stack(whole: Trace, size: int, shape: tuple[int, ...] | None) -> list[Node] | None:
    """The one run of ``size`` alike consecutive children in ``whole`` whose first input has ``shape``."""
    if shape is None:
        return None
    runs = []
    for node in whole.nodes():
        run: list[Node] = []
        for child in [*node.children, None]:
            if child is not None and child.children and _first_input(child) == shape and (
                    not run or _calls(child) == _calls(run[0])):
                run.append(child)
                continue
            if len(run) == size:
                runs.append(run)
            run = [child] if child is not None and child.children and _first_input(child) == shape else []
    return runs[0] if len(runs) == 1 else None


def _calls(node: Node) -> int:
    return sum(1 for _ in node.walk())


def _first_input(node: Node) -> tuple[int, ...] | None:
    return next((tuple(t.shape) for t in node.input_tensors() if dtype_kind(t.dtype) == "float"), None)
