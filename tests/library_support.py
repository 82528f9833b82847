"""Published model libraries as the originals of a port, in the tests: imported where they are installed.

They are not dependencies of nbtrace (``.ci/run`` installs them with ``--no-deps``; a user's machine may lack them),
so a test that uses one calls ``require_library(name)``: the module, or a skip where it is absent. With
``NBTRACE_REQUIRE_LIBRARIES`` set (CI sets it) a missing library fails the test instead, so the suite cannot go
green by skipping them. Some libraries import a package at import time that nothing of theirs runs when a model
is built from code: timm imports torchvision (whose PyPI wheels do not load beside the CPU torch), whisper's
transcription imports numba, gemma's modules import kauldron (for its typing annotations and an identity layer),
litgpt's package imports lightning (its training and checkpoint utilities);
those get stand-ins for the import only (docs: shared recipe "published libraries"). A name may be a module of a
library (``gemma.gm.nn._modules``): the stand-ins are its library's.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from typing import Any

import pytest

#: what each library's import needs that no model built from code runs
_STAND_INS = {"timm": ("torchvision",), "whisper": ("numba",), "gemma": ("kauldron",), "litgpt": ("lightning", "lightning_utilities")}


def _placeholder(name: str) -> type:
    """A class standing in for a name: made with anything, called it gives back what it was given (``Identity``)."""
    return _Placeholder(name, (), {"__init__": lambda self, *args, **kwargs: None,
                                   "__call__": lambda self, *args, **kwargs: args[0] if args else None})


class _Placeholder(type):
    """A placeholder class's class: any attribute it is asked for is another placeholder (``Mode.NEAREST``)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder(name)
        setattr(cls, name, value)
        return value

    def __getitem__(cls, key: Any) -> Any:  # an annotation such as kauldron.typing's Int['B L']: the class itself
        return cls


class _StandIn(types.ModuleType):
    """A module whose every attribute is a placeholder class (a name to import, never called)."""

    __path__: list[str] = []

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "jit":  # numba.jit(...) as a decorator: the function itself
            return lambda *args, **kwargs: (args[0] if args and callable(args[0]) else (lambda function: function))
        value = _placeholder(name)
        setattr(self, name, value)
        return value


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: tuple[str, ...]) -> None:
        self.roots = roots

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return _StandIn(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _import_with_stand_ins(name: str) -> types.ModuleType:
    """Import ``name`` with stand-ins for the packages it imports but never runs here, then take them away again
    (so transformers' availability checks never see them)."""
    roots = tuple(root for root in _STAND_INS.get(name.split(".")[0], ()) if _missing(root))
    if not roots:
        return importlib.import_module(name)
    finder = _StandInFinder(roots)
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(name)
    finally:
        sys.meta_path.remove(finder)
        for key in [key for key, module in sys.modules.items() if isinstance(module, _StandIn)]:
            del sys.modules[key]


def _missing(package: str) -> bool:
    try:
        importlib.import_module(package)
    except Exception:  # noqa: BLE001 - absent, or present but unable to load (torchvision beside the CPU torch)
        sys.modules.pop(package, None)
        return True
    return False


def require_library(name: str) -> types.ModuleType:
    """The published library ``name`` (``timm``, ``whisper``, ``litgpt``, ...; or a module of one,
    ``gemma.gm.nn._modules``), or a skip where it is not installed (a failure when ``NBTRACE_REQUIRE_LIBRARIES`` is
    set)."""
    if name in sys.modules:
        return sys.modules[name]
    try:
        return _import_with_stand_ins(name)
    except ImportError as error:
        if os.environ.get("NBTRACE_REQUIRE_LIBRARIES"):
            pytest.fail(f"NBTRACE_REQUIRE_LIBRARIES is set but {name} does not import: {error}")
        library = name.split(".")[0]
        pytest.skip(f"{library} is not installed (pip install --no-deps {library}): {error}")
