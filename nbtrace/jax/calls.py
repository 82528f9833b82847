"""The calls of one Flax forward, as a tree: ``flax.linen.intercept_methods`` sees every module method called.

A call is named as the PyTorch capture names one, so both kinds of trace read alike: the root is the model's class
name, a submodule's path its Flax path joined with dots (``FlaxDecoder.layers.0.attn.q_proj``), where a name Flax
made for the n-th module of a list attribute (``layers_0``) is written as a layer of a stack (``layers.0``) — the
layer rule of the format (pruning, plots across layers, alignment) then applies. So is a group of two or more
siblings of one class the model itself numbers from 0 (``layer_0``… as Gemma names the items of its list
``blocks``, ``encoderblock_0``… of a compact method): the recorded forward shows the whole group, then every call is
named again (``CallNames.learn``). Every other name is kept as the model wrote it (``ln_1``; ``Dense_0``, a name
Flax made from the class). A method other than ``__call__`` is a call of
its own, named after it (``FlaxDecoder.embedder.decode``); ``setup`` and private methods are not calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_LIST_ITEM = re.compile(r"^(.+)_(\d+)$")


@dataclass
class Call:
    """One method call of one module: its path, what it was given and what it returned."""

    path: str
    module: Any
    scope: tuple[str, ...]
    method: str
    args: tuple
    kwargs: dict[str, Any]
    out: Any = None
    children: list[Call] = field(default_factory=list)
    error: BaseException | None = None
    index: int = 0  # how many calls of this path came before it in the forward

    def walk(self) -> list[Call]:
        """This call and every call below it, in call order."""
        found, stack = [], [self]
        while stack:
            call = stack.pop()
            found.append(call)
            stack.extend(reversed(call.children))
        return found


def is_recorded_method(name: str) -> bool:
    return name == "__call__" or (name.isidentifier() and not name.startswith("_") and name != "setup")


class CallNames:
    """Module paths of one model: the root's class name, then the Flax path of each module, list items as layers."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._items: dict[tuple[str, ...], bool] = {}  # scope path -> an item of a list attribute of its parent
        self._classes: dict[tuple[str, ...], str] = {}

    @staticmethod
    def scope_of(module: Any) -> tuple[str, ...]:
        scope = getattr(module, "scope", None)
        return tuple(scope.path) if scope is not None else ()

    def path(self, module: Any, method: str) -> str:
        """The path of a call of ``method`` of the bound ``module``."""
        scope_path = self.scope_of(module)
        if scope_path and scope_path not in self._items:
            self._items[scope_path] = _list_item(module)
            self._classes[scope_path] = type(module).__name__
        return self.call_path(scope_path, method)

    def call_path(self, scope_path: tuple[str, ...], method: str) -> str:
        path = self.module_path(scope_path)
        return path if method == "__call__" else f"{path}.{method}"

    def learn(self, top: Call) -> None:
        """Mark the groups of siblings of one class named ``<prefix>_0``, ``<prefix>_1``, … (two or more, numbered
        from 0 without a gap, a prefix other than the class's name) as layer stacks, and name every call of
        ``top``'s tree again."""
        groups: dict[tuple, list[tuple[str, ...]]] = {}
        for scope_path, cls in self._classes.items():
            match = _LIST_ITEM.match(scope_path[-1])
            if match and match.group(1) != cls:
                groups.setdefault((scope_path[:-1], match.group(1), cls), []).append(scope_path)
        for members in groups.values():
            numbers = sorted(int(_LIST_ITEM.match(m[-1]).group(2)) for m in members)
            if len(members) >= 2 and numbers == list(range(len(members))):  # 0, 1, …: not ln_1 and ln_2
                self._items.update(dict.fromkeys(members, True))
        for call in top.walk()[1:]:
            call.path = self.call_path(call.scope, call.method)

    def module_path(self, scope_path: tuple[str, ...]) -> str:
        """The module path of a Flax scope path (also of a variable's collection keys, for ``parameters``)."""
        parts = [self.root]
        for depth, name in enumerate(scope_path):
            match = _LIST_ITEM.match(name)
            if match and self._items.get(scope_path[: depth + 1], False):
                parts.extend(match.groups())
            else:
                parts.append(name)
        return ".".join(parts)


def _list_item(module: Any) -> bool:
    """True when Flax named ``module`` ``<attr>_<i>`` for being item ``i`` of its parent's list attribute."""
    match = _LIST_ITEM.match(getattr(module, "name", None) or "")
    if not match:
        return False
    held = getattr(module.parent, match.group(1), None) if getattr(module, "parent", None) is not None else None
    index = int(match.group(2))
    return isinstance(held, (list, tuple)) and index < len(held)


class CallRecorder:
    """An interceptor for ``flax.linen.intercept_methods`` that builds the tree of calls of one forward.

    ``on_call(call, next_fun)`` may replace how a call runs (the float64 twin changes a module's dtype around it);
    ``on_return(call)`` sees each call once it returned.
    """

    def __init__(self, root: str | CallNames, on_call: Callable[[Call, Callable], Any] | None = None,
                 on_return: Callable[[Call], None] | None = None) -> None:
        self.names = root if isinstance(root, CallNames) else CallNames(root)
        self.top: Call | None = None
        self._stack: list[Call] = []
        self._counts: dict[str, int] = {}
        self._on_call, self._on_return = on_call, on_return

    def __call__(self, next_fun: Callable, args: tuple, kwargs: dict[str, Any], context: Any) -> Any:
        method = context.method_name
        if not is_recorded_method(method):
            return next_fun(*args, **kwargs)
        module = context.module
        path = self.names.root if self.top is None and not self._stack else self.names.path(module, method)
        return self.record(path, module, self.names.scope_of(module), method, args, kwargs, next_fun)

    def record_scope(self, module: Any, scope: tuple[str, ...], args: tuple, kwargs: dict[str, Any],
                     next_fun: Callable) -> Any:
        """A call of a module known by its path in the model (``scope``: a ``flax.nnx`` module's, ``nnx.py``)."""
        path = self.names.root if self.top is None and not self._stack else self.names.call_path(scope, "__call__")
        return self.record(path, module, scope, "__call__", args, kwargs, next_fun)

    def record(self, path: str, module: Any, scope: tuple[str, ...], method: str, args: tuple,
               kwargs: dict[str, Any], next_fun: Callable) -> Any:
        index = self._counts.get(path, 0)
        self._counts[path] = index + 1
        call = Call(path, module, scope, method, tuple(args), dict(kwargs), index=index)
        if self._stack:
            self._stack[-1].children.append(call)
        elif self.top is None:
            self.top = call
        self._stack.append(call)
        try:
            if self._on_call is not None:
                call.out = self._on_call(call, next_fun)
            else:
                call.out = next_fun(*args, **kwargs)
        except BaseException as exc:
            call.error = exc
            raise
        finally:
            self._stack.pop()
        if self._on_return is not None:
            self._on_return(call)
        return call.out
