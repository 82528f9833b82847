"""The reference's calls as its float64 twin saw them, in order, and each one's counterpart in b's twin.

A trace's tree holds the calls its files hold; with ``do_prune_layers=True`` (the format's default) the layer
blocks between the first and the last are left out, but the twin saw them and kept their fingerprints, with the
order in which every call started and ended (``Twin.events``). ``call_events`` walks that order: a call the tree
holds is its ``Node``; one pruning left out is a ``HiddenCall`` (its module path, call index, the call it ran in,
the calls inside it), so a verdict can look inside pruned layers. Without ``events`` (a trace that pruned
nothing) it walks the tree.

``Counterparts`` finds b's fingerprints of a call: the aligned call's where the alignment paired it, else the call
of b at the same place by role: the alignment's pairs in the blocks both traces kept give each of a's paths with
its layer numbers masked (``model.layers.#.mlp.act_fn``) the masked path of b (``blocks.#.ffn.act``), and a's
numbers fill it in (``blocks.1.ffn.act``), where every pair of those paths holds the same numbers on both sides;
a's leaves set aside where b's files were pruned, which hold no numbers alike, pair with the calls b's twin kept
there by their kind and order (``hidden_pairs.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ...core.node import Node
from ...core.ranks import call_key
from ...core.twin import Twin, TwinPrint
from .hidden_pairs import hidden_counterparts

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison

_NUMBER = re.compile(r"(?<=\.)\d+(?=\.|$)")


class HiddenCall:
    """A call of a's model that pruning left out of its files, as its twin saw it."""

    __slots__ = ("module_path", "call_index", "parent", "children")

    def __init__(self, key: str, parent: Any) -> None:
        path, _, count = key.partition("@")
        self.module_path = path
        self.call_index = int(count) - 1 if count.isdigit() else 0
        self.parent = parent
        self.children: list[HiddenCall] = []

    @property
    def name(self) -> str:
        return self.module_path.rsplit(".", 1)[-1]

    def ancestors(self) -> list[Any]:
        found, walker = [], self.parent
        while walker is not None:
            found.append(walker)
            walker = walker.parent
        return found

    def walk(self) -> Iterator[HiddenCall]:
        yield self
        for child in self.children:
            yield from child.walk()

    def visible(self) -> Node:
        """The innermost call of a's tree that holds this one."""
        walker = self.parent
        while isinstance(walker, HiddenCall):
            walker = walker.parent
        return walker

    def __repr__(self) -> str:
        return f"<HiddenCall {self.module_path}>"


def call_events(comparison: Comparison, twin: Twin) -> list[tuple[Any, str]]:
    """``(call, "input" | "output")`` of a's calls in the order they started and ended (see the module docstring)."""
    if not twin.events:
        return list(_tree_events(comparison.a.root))
    nodes = {call_key(n.module_path, n.call_index): n for n in comparison.a.nodes()}
    stack: list[Any] = []
    found: list[tuple[Any, str]] = []
    for event in twin.events:
        key = event[1:]
        if event[0] == "(":
            call = nodes.get(key)
            if call is None:
                parent = stack[-1] if stack else comparison.a.root
                call = HiddenCall(key, parent)
                if isinstance(parent, HiddenCall):
                    parent.children.append(call)
            stack.append(call)
            found.append((call, "input"))
        elif stack:
            found.append((stack.pop(), "output"))
    return found


def _tree_events(root: Node) -> Iterator[tuple[Node, str]]:
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        yield node, "output" if done else "input"
        if not done:
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(node.children))


class Counterparts:
    """b's twin fingerprints of each of a's calls (see the module docstring)."""

    def __init__(self, comparison: Comparison, twin_b: Twin) -> None:
        self.comparison, self.twin_b = comparison, twin_b
        self.hidden = hidden_counterparts(comparison, twin_b)
        #: (a's masked path, call index) -> (b's masked path, call index): one module called twice on one side can
        #: stand for two modules on the other (a rename with ``#k``)
        #: numbers, taken as the same numbers: a role is kept where every pair of its paths bears it out (a's
        #: ``mlp.0``…``mlp.3``, the parts of one block's MLP, against b's ``layers.0.mlp.fc1``, ``.act``, ``.fc2`` are
        #: no role: a's numbers there are not b's)
        roles: dict[tuple[str, int], set[tuple[str, int] | None]] = {}
        for match in comparison.matches:
            a, b = match.a.module_path, match.b.module_path
            if _NUMBER.search(a):
                same = _NUMBER.findall(a) == _NUMBER.findall(b)
                roles.setdefault((_NUMBER.sub("#", a), match.a.call_index), set()).add(
                    (_NUMBER.sub("#", b), match.b.call_index) if same else None)
        self.roles: dict[tuple[str, int], tuple[str, int]] = {
            key: next(iter(found)) for key, found in roles.items() if len(found) == 1 and None not in found}

    def key_of(self, call: Any) -> str | None:
        """The twin key of ``call``'s counterpart in b, or None."""
        return self.of(call)[0]

    def of(self, call: Any) -> tuple[str | None, dict[str, TwinPrint]]:
        """``(b's call name, its fingerprints)``; ``(None, {})`` where b has no counterpart."""
        match = self.comparison.match_of(call) if isinstance(call, Node) else None
        if match is not None:
            return call_key(match.b.module_path, match.b.call_index), self.twin_b.of(match.b)
        key = None
        role = self.roles.get((_NUMBER.sub("#", call.module_path), call.call_index))
        if role is not None:
            pattern, call_index = role
            numbers = iter(_NUMBER.findall(call.module_path))
            key = call_key(re.sub(r"#", lambda _: next(numbers), pattern), call_index)
            if key in self.twin_b.calls:
                return key, self.twin_b.calls[key]
        hidden = self.hidden.get(call_key(call.module_path, call.call_index))
        if hidden is not None:  # a leaf the files did not pair, where pruning thinned the houses differently
            return hidden, self.twin_b.calls.get(hidden, {})
        return key, {}
