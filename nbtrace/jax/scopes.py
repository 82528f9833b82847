"""Flax scopes named by where their parameters live: a module that shares its caller's scope is a call of its own.

``nn.share_scope(self, child)`` gives ``child`` the very scope object of ``self`` (gemma's ``FeedForward`` builds its
``gating_einsum`` and ``linear`` Einsum projections so, to keep the layout of its checkpoints): the child's variables
live in the parent's dict (``mlp/gating_einsum``, ``mlp/linear``), and a name read from the scope alone would file
the child's calls and kernels under the parent, where a port's ``gate_proj``/``down_proj`` can never meet them.

Such a call (a module other than the running call's whose scope *is* the running call's scope) is named as a child of
the call it runs in: by the one parameter it reads where Flax named the module after its class (``Einsum_0`` ->
``mlp.gating_einsum``), else by the module's own name (a setup attribute, ``name=``: ``mlp.child``). The variables it
reads while it is the innermost call are its own: the sidecar's ``parameters`` section files them under its path.
Where a wrapper takes over its child's scope instead (``share_scope``'s other direction), the inner module is the
call of its own, the same way. Calls are seen while ``Scope.get_variable`` is wrapped (``watching_reads``), for the
recorded forward only; it is restored on exit, whatever happened.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def is_shared(module: Any, running: Any) -> bool:
    """True when ``module`` shares the scope of ``running`` (a ``Call``) without being its module."""
    if running is None or module is running.module:
        return False
    scope = getattr(module, "scope", None)
    return scope is not None and scope is getattr(running.module, "scope", None)


def flax_made(module: Any) -> bool:
    """True when the module's name is the one Flax made from its class (``Einsum_0``), not one the model gave."""
    return bool(re.fullmatch(rf"{re.escape(type(module).__name__)}_\d+", getattr(module, "name", None) or ""))


class SharedScopes:
    """One model's shared-scope calls: the name each module was given, and the call scope owning each variable read
    in a shared scope. Kept by ``CallNames``, so the float64 twin names its calls as the recorded forward did."""

    def __init__(self) -> None:
        self._names: dict[tuple[tuple[str, ...], str], str] = {}  # (scope path, module name) -> the call's name
        self.owners: dict[tuple[str, tuple[str, ...], str], tuple[str, ...]] = {}  # (collection, scope, var) -> owner

    @staticmethod
    def _key(module: Any) -> tuple[tuple[str, ...], str]:
        return tuple(module.scope.path), str(getattr(module, "name", None) or type(module).__name__)

    def name(self, module: Any) -> str:
        """The name of a shared-scope module's call: as learnt from the recorded forward, else the module's."""
        key = self._key(module)
        return self._names.get(key, key[1])

    def settle(self, module: Any, owns: set[tuple[str, str]]) -> None:
        """Learn the name of a shared-scope module from the variables its call read (``(collection, name)``)."""
        params = sorted({name for collection, name in owns if collection == "params"})
        if len(params) == 1 and flax_made(module):
            self._names[self._key(module)] = params[0]

    def own(self, module: Any, owns: set[tuple[str, str]], scope: tuple[str, ...]) -> None:
        """File the variables a shared-scope call read under its call scope ``scope``."""
        real = tuple(module.scope.path)
        for collection, name in owns:
            self.owners.setdefault((collection, real, name), scope)

    def owner(self, collection: str, keys: tuple[str, ...]) -> tuple[str, ...]:
        """The scope whose module a variable (``keys``: its scope path, then its name) belongs to."""
        return self.owners.get((collection, keys[:-1], keys[-1]), keys[:-1])


@contextmanager
def watching_reads(recorder: Any) -> Iterator[None]:
    """While active, every variable a Flax scope hands out is told to ``recorder.read(scope, collection, name)``."""
    from flax.core.scope import Scope

    original = Scope.get_variable

    def get_variable(scope: Any, col: str, name: str, default: Any = None) -> Any:
        recorder.read(scope, col, name)
        return original(scope, col, name, default)

    Scope.get_variable = get_variable
    try:
        yield
    finally:
        Scope.get_variable = original
