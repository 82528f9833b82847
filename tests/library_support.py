"""Published model libraries as the originals of a port, in the tests: imported where they are installed.

They are not dependencies of nbtrace (``.ci/run`` installs them with ``--no-deps``; a user's machine may lack them),
so a test that uses one calls ``require_library(name)``: the module, or a skip where it is absent. With
``NBTRACE_REQUIRE_LIBRARIES`` set (CI sets it) a missing library fails the test instead, so the suite cannot go
green by skipping them. Some libraries import a package at import time that nothing of theirs runs when a model
is built from code: timm imports torchvision where it is installed and a stand-in where it is not, whisper's
transcription imports numba, gemma's modules import kauldron (for its typing annotations and an identity layer),
litgpt's package imports lightning (its training and checkpoint utilities);
those get stand-ins for the import only (docs: shared recipe "published libraries"). flaim (Flax Image Models) names
``jax.random.KeyArray`` in its annotations, which JAX has since dropped: it is given ``jax.Array`` under that name
(``_BEFORE_IMPORT``). jax-resnet imports as it is. torchvision's PyPI wheels hold
operators (nms, roi_align: detection only) built against the CUDA torch, which do not load beside the CPU torch: it
is imported without the registration of their fake kernels then, its models all there. Installed into site-packages
beside the CPU torch it would break transformers (which imports it when it is there), so ``.ci/run`` installs it
into ``ASIDE`` (``pip install --no-deps --target``), a folder put on the import path only when a test asks for
torchvision. A name may be a module of a
library (``gemma.gm.nn._modules``): the stand-ins are its library's.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

#: what each library's import needs that no model built from code runs
_STAND_INS = {"timm": ("torchvision",), "whisper": ("numba",), "gemma": ("kauldron",), "litgpt": ("lightning", "lightning_utilities")}


def _jax_key_array() -> None:
    import jax

    if not hasattr(jax.random, "KeyArray"):
        jax.random.KeyArray = jax.Array  # flaim 0.0.5's annotations; JAX's keys are arrays now


#: what a library's import needs done first, that no model built from code runs
_BEFORE_IMPORT = {"flaim": _jax_key_array}


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


#: a folder of libraries installed beside the environment, off its import path (``pip install --target``): torchvision,
#: which transformers would import (and fail on, beside the CPU torch) if it were in site-packages
ASIDE = Path(os.environ.get("NBTRACE_LIBRARIES_ASIDE", Path(sys.prefix) / "libraries-aside"))


def _import(name: str) -> types.ModuleType:
    """``importlib.import_module(name)``; torchvision from ``ASIDE`` where it is there, without its detection
    operators where they do not load."""
    if name.split(".")[0] == "torchvision" and (ASIDE / "torchvision").is_dir() and str(ASIDE) not in sys.path:
        sys.path.append(str(ASIDE))
    try:
        return importlib.import_module(name)
    except RuntimeError as error:  # "operator torchvision::nms does not exist": its _C built for another torch
        if name.split(".")[0] != "torchvision" or "torchvision::" not in str(error):
            raise
    for key in [key for key in sys.modules if key.split(".")[0] == "torchvision"]:
        del sys.modules[key]
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    return importlib.import_module(name)


def _import_with_stand_ins(name: str) -> types.ModuleType:
    """Import ``name`` with stand-ins for the packages it imports but never runs here, then take them away again
    (so transformers' availability checks never see them)."""
    if name.split(".")[0] in _BEFORE_IMPORT:
        _BEFORE_IMPORT[name.split(".")[0]]()
    roots = tuple(root for root in _STAND_INS.get(name.split(".")[0], ()) if _missing(root))
    if not roots:
        return _import(name)
    finder = _StandInFinder(roots)
    sys.meta_path.insert(0, finder)
    try:
        return _import(name)
    finally:
        sys.meta_path.remove(finder)
        for key in [key for key, module in sys.modules.items() if isinstance(module, _StandIn)]:
            del sys.modules[key]


def _missing(package: str) -> bool:
    try:
        _import(package)
    except Exception:  # noqa: BLE001 - absent, or present but unable to load
        sys.modules.pop(package, None)
        return True
    return False


def require_library(name: str) -> types.ModuleType:
    """The published library ``name`` (``timm``, ``torchvision``, ``whisper``, ``litgpt``, ...; or a module of one,
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
