"""The calls of one Flax forward, as a tree: ``flax.linen.intercept_methods`` sees every module method called.

A call is named as the PyTorch capture names one, so both kinds of trace read alike: the root is the model's class
name, a submodule's path its Flax path joined with dots (``FlaxDecoder.layers.0.attn.q_proj``), where a name Flax
made for the n-th module of a list attribute (``layers_0``) is written as a layer of a stack (``layers.0``) — the
layer rule of the format (pruning, plots across layers, alignment) then applies. So is a group of two or more
siblings of one class the model itself numbers from 0 (``layer_0``… as Gemma names the items of its list
``blocks``, ``encoderblock_0``… of a compact method): the recorded forward shows the whole group, then every call is
named again (``CallNames.learn``). Every other name is kept as the model wrote it (``ln_1``; ``Dense_0``, a name
Flax made from the class). A method other than ``__call__`` is a call of
its own, named after it (``FlaxDecoder.embedder.decode``); ``setup`` and private methods are not calls. A module that
shares the scope of the call it runs in (``nn.share_scope``) is a call of its own, named as ``scopes.py`` says.

A call's arguments are recorded by the names of the method's parameters (``kwargs.x``, ``kwargs.attn_mask``), as a
PyTorch model's call recorded with keywords reads: a position says nothing across frameworks, where a name does.
Only the values of a ``*args`` parameter, which have no name, stay positional (``args.0``); the root's arguments
are recorded as the user passed them to ``apply``, as the PyTorch capture records a top-level forward.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .scopes import SharedScopes, is_shared

_LIST_ITEM = re.compile(r"^(.+)_(\d+)$")


@dataclass
class Call:
    """One method call of one module: its path, what it was given (``args``/``kwargs`` as recorded: by parameter
    name; ``given``: as passed, to run it) and what it returned."""

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
    given: tuple[tuple, dict[str, Any]] = ((), {})
    shared: bool = False  # its module shares the scope of the call it runs in (``scopes.py``)
    owns: set[tuple[str, str]] = field(default_factory=set)  # (collection, name): variables it read, if shared

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
        self.shared = SharedScopes()

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
        counts: dict[str, int] = {}
        for call, running in _with_running(top):
            if call.shared:  # named under the call it runs in, as that one is named now; its variables filed there
                call.scope = (*running.scope, self.shared.name(call.module))
                self.shared.own(call.module, call.owns, call.scope)
            call.path = self.call_path(call.scope, call.method)
            call.index = counts.get(call.path, 0)
            counts[call.path] = call.index + 1

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


def _with_running(top: Call) -> list[tuple[Call, Call]]:
    """Every call below ``top`` in call order, each with the call it ran in."""
    found, stack = [], [(child, top) for child in reversed(top.children)]
    while stack:
        call, running = stack.pop()
        found.append((call, running))
        stack.extend((child, call) for child in reversed(call.children))
    return found


def method_signature(module: Any, method: str) -> inspect.Signature | None:
    """The signature of ``module``'s method ``method`` as bound to it (no ``self``; through Flax's and nbtrace's
    wrappers, which keep ``__wrapped__``), or None where it cannot be read."""
    try:
        return inspect.signature(getattr(module, method))
    except (AttributeError, TypeError, ValueError):
        return None


def named_arguments(signature: inspect.Signature | None, args: tuple,
                    kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """``args`` and ``kwargs`` of a call bound to the parameter names of ``signature`` (in its order; a ``*args``
    parameter's values stay positional, a ``**kwargs`` one's keep their keys); as given where there is no signature
    or it does not take them (the call then raises on its own)."""
    try:
        bound = signature.bind(*args, **kwargs) if signature is not None else None
    except TypeError:
        bound = None
    if bound is None:
        return tuple(args), dict(kwargs)
    rest: tuple = ()
    named: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            rest = tuple(value)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named.update(value)
        else:
            named[name] = value
    return rest, named


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
        self._signatures: dict[tuple[type, str], inspect.Signature | None] = {}  # for this forward only

    def __call__(self, next_fun: Callable, args: tuple, kwargs: dict[str, Any], context: Any) -> Any:
        method = context.method_name
        if not is_recorded_method(method):
            return next_fun(*args, **kwargs)
        module = context.module
        if self.top is None and not self._stack:
            return self.record(self.names.root, module, self.names.scope_of(module), method, args, kwargs, next_fun)
        running = self._stack[-1] if self._stack else None
        if is_shared(module, running):
            scope = (*running.scope, self.names.shared.name(module))
            return self.record(self.names.call_path(scope, method), module, scope, method, args, kwargs, next_fun,
                               shared=True)
        return self.record(self.names.path(module, method), module, self.names.scope_of(module), method, args, kwargs,
                           next_fun)

    def read(self, scope: Any, collection: str, name: str) -> None:
        """A variable a Flax scope handed out (``scopes.watching_reads``): the running call's own, if it shares
        that scope."""
        if self._stack and self._stack[-1].shared and scope is getattr(self._stack[-1].module, "scope", None):
            self._stack[-1].owns.add((collection, name))

    def record_scope(self, module: Any, scope: tuple[str, ...], args: tuple, kwargs: dict[str, Any],
                     next_fun: Callable) -> Any:
        """A call of a module known by its path in the model (``scope``: a ``flax.nnx`` module's, ``nnx.py``)."""
        path = self.names.root if self.top is None and not self._stack else self.names.call_path(scope, "__call__")
        return self.record(path, module, scope, "__call__", args, kwargs, next_fun)

    def record(self, path: str, module: Any, scope: tuple[str, ...], method: str, args: tuple,
               kwargs: dict[str, Any], next_fun: Callable, shared: bool = False) -> Any:
        index = self._counts.get(path, 0)
        self._counts[path] = index + 1
        root = self.top is None and not self._stack
        if root:
            named = (tuple(args), dict(kwargs))
        else:
            key = (type(module), method)
            if key not in self._signatures:
                self._signatures[key] = method_signature(module, method)
            named = named_arguments(self._signatures[key], args, kwargs)
        call = Call(path, module, scope, method, *named, index=index, given=(tuple(args), dict(kwargs)),
                    shared=shared)
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
            if shared:
                self.names.shared.settle(module, call.owns)
        if self._on_return is not None:
            self._on_return(call)
        return call.out
