"""Rebuilding a recorded call's arguments, to run a live module on them again (replay).

A trace keeps each tensor argument as a record (``TensorValue``) and every other argument
as its ``repr`` string ("None", "True", "3", "(1, 2)", "torch.float32"); tuples and lists
become lists, dicts stay dicts. ``rebuild`` walks that structure, turns strings back into
values where the printout allows (literals, dtypes) and puts a tensor in place of each
record (``substitute``). An argument printed as an object (a cache, ``<object at …>``)
cannot be rebuilt: ``Unreplayable`` names it.

``bind`` hands a recorded call to a port whose ``forward`` names or orders its arguments
differently (``forward(ids)`` for ``input_ids=``): by name, then by position, then the one
tensor left for the one parameter left, else an error that names what is unmatched.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Mapping
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
    if text in _SEEN:  # replay rebuilds "None", "True", "1e-06" thousands of times
        return _SEEN[text]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise Unreplayable(f"argument {where} was recorded as {text[:60]!r}, which cannot be rebuilt") from None
    if type(value) in _IMMUTABLE and len(_SEEN) < 4096:  # a list or dict is made anew: a call may change it
        _SEEN[text] = value
    return value


_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes)
_SEEN: dict[str, Any] = {}  # printed literal -> its immutable value


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


def bind(forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
         inputs_map: Mapping[str, str] | None = None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The recorded ``args``/``kwargs`` of a call as arguments ``forward`` accepts.

    ``inputs_map`` renames recorded arguments (a keyword's name, or ``"args.N"`` for a positional one) to the
    port's parameter names. Then: keywords the port takes by name pass by name; the positional arguments
    fill the port's positional parameters in order; keywords it does not take are left out, except that when
    exactly one required parameter is still unfilled and exactly one recorded tensor is left, the tensor
    fills it. A required parameter left without a value raises ValueError naming it and what was recorded.
    """
    inputs_map = dict(inputs_map or {})
    parameters = [p for p in inspect.signature(forward).parameters.values()]
    named = {p.name: p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var_args = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    var_kwargs = any(p.kind is p.VAR_KEYWORD for p in parameters)
    unknown = [key for key in inputs_map if key not in kwargs and key not in {f"args.{i}" for i in range(len(args))}]
    if unknown:
        recorded = [f"args.{i}" for i in range(len(args))] + list(kwargs)
        raise ValueError(f"inputs_map names {unknown}, which the reference did not record; it recorded {recorded}")
    values = {f"args.{i}": value for i, value in enumerate(args)} | dict(kwargs)
    out_kwargs: dict[str, Any] = {}
    left_args: list[Any] = []
    left: dict[str, Any] = {}
    for key, value in values.items():
        name = inputs_map.get(key, None if key.startswith("args.") else key)
        if name is not None and (name in named or var_kwargs):
            out_kwargs[name] = value
        elif key.startswith("args.") and name is None:
            left_args.append(value)
        else:
            left[key] = value
    free = [p for p in positional if p.name not in out_kwargs]
    out_args = tuple(left_args) if var_args else tuple(left_args[:len(free)])
    left |= {f"args.{len(args) - len(left_args) + i}": v for i, v in enumerate(left_args[len(out_args):])}
    filled = {p.name for p in free[:len(out_args)]}
    missing = [p for p in parameters if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD,
               p.KEYWORD_ONLY) and p.name not in out_kwargs and p.name not in filled]
    tensors = {key: value for key, value in left.items() if isinstance(value, torch.Tensor)}
    if len(missing) == 1 and len(tensors) == 1 and missing[0].kind is not missing[0].POSITIONAL_ONLY:
        out_kwargs[missing[0].name] = next(iter(tensors.values()))
        missing = []
    if missing:
        shown = ", ".join(f"{key} ({_describe(value)})" for key, value in values.items())
        raise ValueError(
            f"the port's forward{inspect.signature(forward)} has no value for {[p.name for p in missing]}: the "
            f"reference recorded {shown}. Say how they map: compare(..., inputs_map={{recorded name: port's "
            f"parameter}}) or compare(..., call=lambda port, *args, **kwargs: port(...))")
    return out_args, out_kwargs


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"tensor {list(value.shape)} {str(value.dtype).removeprefix('torch.')}"
    return repr(value)[:40]
