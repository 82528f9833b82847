"""Skipping the work for layer blocks that pruning will drop, without ever being wrong.

With ``do_prune_layers=True`` the format keeps only the first and last layer
block among a call's children, so most blocks' values are computed only to be
thrown away. When block ``i`` of a ``ModuleList``/``Sequential`` of length ``L``
starts, ``i < L - 1``, and blocks ``0 … i-1`` of the same container ran in order
under the same parent, the block is *predicted* pruned: its calls are recorded
but their values are held, not serialized. The prediction is settled later:

- the next layer block under the same parent makes its first submodule call:
  the held block is certainly pruned, its values are released unserialized;
- the parent returns first (an early exit, ``layers[:n]``): the held block is
  kept by pruning after all, and its held values are serialized then, exactly
  as they would have been (a warning names any tensor changed in place since).

Values are held from the block's start until the next block begins: no longer
than the block's own tensors are alive in most models.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..core.paths import split_layer_path
from .prune import is_layer_block
from .serialize import local_tensor

_BROKEN = -2


def named_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``list(model.named_modules())`` (same order, same names), without a generator per level of nesting."""
    out: list[tuple[str, nn.Module]] = []
    memo: set[nn.Module] = set()
    stack: list[tuple[str, nn.Module]] = [("", model)]
    while stack:
        prefix, module = stack.pop()
        if module in memo:
            continue
        if type(module).named_modules is not nn.Module.named_modules:  # a module that walks its own way
            return list(model.named_modules())
        memo.add(module)
        out.append((prefix, module))
        children = [(f"{prefix}.{name}" if prefix else name, child) for name, child in module._modules.items()
                    if child is not None]
        stack.extend(reversed(children))
    return out


def numbered_containers(model: nn.Module, class_name: str) -> dict[str, int]:
    """Module path -> number of children, for modules whose children are named 0, 1, … N-1."""
    found = {}
    for name, module in named_modules(model):
        keys = list(module._modules)
        if keys and all(key.isdigit() for key in keys) and sorted(map(int, keys)) == list(range(len(keys))):
            found[f"{class_name}.{name}" if name else class_name] = len(keys)
    return found


class Site:
    """One wrapped module: its path and where it sits in a layer stack, worked out once when it is wrapped."""

    __slots__ = ("has_children", "marker", "path", "split")

    def __init__(self, path: str, has_children: bool) -> None:
        self.path = path
        self.has_children = has_children
        self.split = split_layer_path(path)  # ("….layers", 3) for a block of a layer stack
        self.marker = f".{self.split[1]}." if self.split else None  # a child path with it makes it a layer block


class Frame:
    """One open call: its JSON node plus what the speculation tracks about it."""

    __slots__ = ("held", "marker", "node", "progress", "split", "started")

    def __init__(self, node: dict[str, Any], site: Site) -> None:
        self.node = node
        self.started = 0.0  # time.perf_counter() when the call began
        self.split = site.split
        self.marker = site.marker
        self.progress: dict[str, int] = {}  # container -> last block index of an unbroken 0, 1, 2 … run
        self.held: list[Deferred] = []


class Deferred:
    """The held values of one predicted-pruned layer block (and every call inside it)."""

    __slots__ = ("entries", "node")

    def __init__(self, node: dict[str, Any]) -> None:
        self.node = node
        self.entries: list[tuple[dict[str, Any], str, Any, str, bool, list[tuple[torch.Tensor, int]]]] = []

    def hold(self, node: dict[str, Any], key: str, value: Any, name: str) -> None:
        tensors: list[torch.Tensor] = []
        _tensors(value, tensors)
        versions = [(t, t._version) for t in tensors if not t.is_inference()]
        self.entries.append((node, key, value, name, torch.is_grad_enabled(), versions))

    def settle(self, serialize: Callable[[Any, str], Any]) -> None:
        """Serialize every held value into its node, as it would have been at the time."""
        changed = []
        for node, key, value, name, grad, versions in self.entries:
            changed += [node["module_path"] for t, version in versions if t._version != version]
            with torch.set_grad_enabled(grad):
                node[key] = serialize(value, name)
        self.entries = []
        if changed:
            warnings.warn(
                f"nbtrace: values of {', '.join(sorted(set(changed)))} were changed in place after they were "
                "recorded; the trace shows them as they were at the end of the layer block",
                stacklevel=4,
            )

    def release(self) -> None:
        self.entries = []


class Speculation:
    """Decides which calls to defer, and settles deferred blocks when the truth is known."""

    def __init__(self, containers: dict[str, int], serialize: Callable[[Any, str], Any]) -> None:
        self.containers = containers
        self.serialize = serialize
        self.deferring: Deferred | None = None

    def begin(self, node: dict[str, Any], parent: Frame | None, site: Site) -> bool:
        """At the start of a call: True when its values (and its subtree's) are to be held."""
        if self.deferring is not None:
            return True
        if parent is None or site.split is None:
            return False
        prefix, index = site.split
        length = self.containers.get(prefix)
        if length is None or index >= length - 1 or parent.progress.get(prefix) != index - 1:
            return False
        deferred = Deferred(node)
        parent.held.append(deferred)
        self.deferring = deferred
        return True

    def hold(self, node: dict[str, Any], key: str, value: Any, name: str) -> None:
        assert self.deferring is not None
        self.deferring.hold(node, key, value, name)

    def opened(self, frame: Frame, parent: Frame | None, grandparent: Frame | None) -> None:
        """A call opened: if it makes its parent a layer block, blocks held before it are settled."""
        if parent is None or grandparent is None or parent.marker is None:
            return
        if parent.marker not in frame.node["module_path"] or not grandparent.held:
            return
        parent.marker = None  # confirmed once is enough
        keep = []
        for deferred in grandparent.held:
            if deferred.node is parent.node:
                keep.append(deferred)
            elif is_layer_block(deferred.node):
                deferred.release()  # neither first nor last among the layer blocks: pruned
            else:
                deferred.settle(self.serialize)  # it turned out not to be a layer block: kept
        grandparent.held = keep

    def closed(self, frame: Frame, parent: Frame | None) -> None:
        """A call closed: blocks still held under it are kept by pruning; track the parent's run of blocks."""
        if self.deferring is not None and self.deferring.node is frame.node:
            self.deferring = None
        for deferred in frame.held:
            deferred.settle(self.serialize)
        frame.held = []
        if parent is None or frame.split is None or not is_layer_block(frame.node):
            return
        prefix, index = frame.split
        previous = parent.progress.get(prefix)
        expected = 0 if previous is None else previous + 1
        parent.progress[prefix] = index if index == expected and previous != _BROKEN else _BROKEN


def _tensors(value: Any, out: list[torch.Tensor]) -> None:
    """Append every tensor in ``value`` (nested lists, tuples, dicts; DTensor shards) to ``out``."""
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is torch.Tensor or isinstance(item, torch.Tensor):
            out.append(item)
        elif kind is tuple or kind is list or isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif kind is dict or isinstance(item, dict):
            stack.extend(reversed(item.values()))
        elif item is not None and kind not in (str, int, float, bool):
            local = local_tensor(item)
            if local is not None:
                out.append(local)
