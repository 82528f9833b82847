"""Rebuilding a recorded call's arguments, to run a live module on them again (replay).

A trace keeps each tensor argument as a record (``TensorValue``) and every other argument
as its ``repr`` string ("None", "True", "3", "(1, 2)", "torch.float32"); tuples and lists
become lists, dicts stay dicts. ``rebuild`` walks that structure, turns strings back into
values where the printout allows (literals, dtypes) and puts a tensor in place of each
record (``substitute``). An argument printed as an object (a cache, ``<object at …>``)
cannot be rebuilt: ``Unreplayable`` names it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import torch

from ...core.tensor import TensorValue

_DTYPES = {f"torch.{name}": getattr(torch, name) for name in (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")}


class Unreplayable(Exception):
    """A recorded argument cannot be turned back into a value."""


Substitute = Callable[[str, TensorValue], torch.Tensor]


def literal(text: str, where: str) -> Any:
    """A printed argument back to its value; raises Unreplayable when the printout is not a literal."""
    if text in _DTYPES:
        return _DTYPES[text]
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise Unreplayable(f"argument {where} was recorded as {text[:60]!r}, which cannot be rebuilt") from None


def rebuild(recorded: Any, substitute: Substitute) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` of a call recorded as ``{"args": [...], "kwargs": {...}}``."""
    recorded = recorded if isinstance(recorded, dict) else {}
    args = tuple(_value(v, f"args.{i}", substitute, top=True) for i, v in enumerate(recorded.get("args") or []))
    kwargs = {key: _value(v, f"kwargs.{key}", substitute, top=True)
              for key, v in (recorded.get("kwargs") or {}).items()}
    return args, kwargs


def _value(value: Any, where: str, substitute: Substitute, top: bool = False) -> Any:
    if isinstance(value, TensorValue):
        return substitute(where, value)
    if isinstance(value, str):
        return literal(value, where)
    if isinstance(value, list):  # tuples are recorded as lists: a tuple of tensors is what modules take
        items = [_value(v, f"{where}.{i}", substitute) for i, v in enumerate(value)]
        return tuple(items) if top or any(isinstance(i, torch.Tensor) for i in items) else items
    if isinstance(value, dict):
        return {key: _value(v, f"{where}.{key}", substitute) for key, v in value.items()}
    if value is None:
        return None
    raise Unreplayable(f"argument {where}: unexpected recorded value of type {type(value).__name__}")


def tensors_of(value: Any) -> list[torch.Tensor]:
    """The tensors in a module's return value, in order (tuples, lists, dicts, ModelOutputs)."""
    found: list[torch.Tensor] = []
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            found.extend(tensors_of(item))
    elif isinstance(value, (list, tuple)):
        for item in value:
            found.extend(tensors_of(item))
    return found
