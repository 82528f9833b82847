"""``nbtrace.jax.trace``: record one forward of a Flax model into the files the PyTorch capture writes."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..capture.prune import prune_intermediate_layers, prune_outputs_of_parents
from ..capture.recorded import named_calls
from ..capture.repr_text import error_record
from ..capture.write import write_sidecar, write_trace_files
from ..core.kept_inputs import INPUTS_SECTION, inputs_section_of_arrays
from ..core.ranks import call_key
from ..core.twin import TWIN_SECTION
from .calls import Call, CallNames, CallRecorder
from .fingerprint import fingerprint
from .nnx import intercepted, is_nnx
from .numerics import numerics_section
from .parameters import parameters_section
from .scopes import watching_reads
from .serialize import Serializer, host, is_array, remove_files
from .twin import (find_valid, padding_digest, rounding_changes_nothing, run_twin, stores_wider, twin_section,
                   twin_unfit)
from .values import eager_remat, float_leaves

MEASURE_MODES = ("auto", "twin", True, False)
_APPLY_OPTIONS = ("rngs", "mutable")  # keywords of Module.apply itself: passed on, not inputs of the model
_MAX_INPUT_BYTES = 16 * 2**20


@dataclass
class JaxTrace:
    """What ``nbtrace.jax.trace`` gives back: the model's output and the trace it wrote (``nbtrace.Trace``)."""

    output: Any
    trace: Any
    path: Path

    def __repr__(self) -> str:
        return f"<JaxTrace {self.trace.model_name}: {len(self.trace)} calls in {self.path}>"


def trace(model: Any, variables: Any = None, *args: Any, method: Any = None, debug_path: str | Path | None = None,
          do_prune_layers: bool = True, use_repr: bool = True, measure_rounding: bool | str = "auto",
          **kwargs: Any) -> JaxTrace:
    """Run ``model.apply(variables, *args, method=method, **kwargs)`` once, eagerly, and write its trace; for a
    ``flax.nnx`` model, which holds its variables, ``trace(model, *args, **kwargs)`` runs ``model(*args, **kwargs)``.

    ``rngs=`` and ``mutable=`` go to ``apply`` (its output is then ``(output, state)``, as ``apply`` gives it); trace a
    model in its evaluation mode: a float64 twin draws other random numbers than the run (dropout).

    The files are those of ``nbtrace.trace`` for a PyTorch model (transformers' debugger files, safetensors with
    ``use_repr=False``, nbtrace's sidecar), into ``debug_path`` (the working folder when None). Every call of every
    module method is recorded (``calls.py`` says how calls are named). ``measure_rounding`` ("auto": the float64
    twin, ``twin.py``, where its float64 copy of the variables takes at most half the free memory; "twin" or True:
    always; False: none) lets ``nbtrace.compare`` judge the trace against a port's.
    When the model raises, the trace of what ran is written, the calls that raised marked with the error (the
    format's ``error`` field), and the error raised. The model runs under ``jax.disable_jit()`` (a jitted function
    inside it runs eagerly too) and with ``nn.remat``/``jax.checkpoint`` running their function as it is (they
    change what a backward pass keeps, not a forward's values); values a transform inside the model still traces
    (``nn.vmap``) are recorded as text without values. Nothing of JAX's configuration is left changed. Needs jax,
    flax, numpy and safetensors; not torch.
    """
    import flax.linen as nn
    import jax

    if measure_rounding not in MEASURE_MODES:
        raise ValueError(f"measure_rounding must be one of {MEASURE_MODES}, got {measure_rounding!r}")
    nnx_model = is_nnx(model)
    if nnx_model:  # it holds its variables: what came as `variables` is its first input
        args, variables = (variables, *args), model
        if method is not None and not isinstance(method, str):
            raise TypeError(f"method= of an nnx model is the name of its method, got {type(method).__name__}")
    elif not isinstance(model, nn.Module):
        raise TypeError(f"model must be a flax.linen or flax.nnx Module, got {type(model).__name__}")
    options = {key: kwargs.pop(key) for key in _APPLY_OPTIONS if key in kwargs}  # apply's own, not the model's
    twin_wanted = measure_rounding is not False
    unfit = twin_unfit(variables) if measure_rounding == "auto" else None
    measured = twin_wanted and unfit is None  # the run's outputs are fingerprinted only for a twin that runs
    root = type(model).__name__
    folder = Path(debug_path) if debug_path is not None else Path.cwd()
    folder.mkdir(parents=True, exist_ok=True)
    valid = find_valid(args, kwargs) if measured else None
    outputs: dict[int, dict[str, list[float]]] = {}  # id(call) -> place -> the fingerprint of what it returned

    def note_run(call: Call) -> None:
        if measured:
            outputs[id(call)] = {place: fingerprint(a, valid) for place, a in float_leaves(call.out, "out")}

    recorder = CallRecorder(root, on_return=note_run)
    failure: BaseException | None = None
    output = None
    try:
        with jax.disable_jit(), eager_remat():
            if nnx_model:
                with intercepted(model, recorder):
                    output = (getattr(model, method) if method else model)(*args, **kwargs)
            else:
                with nn.intercept_methods(recorder), watching_reads(recorder):
                    output = model.apply(variables, *args, method=method, **options, **kwargs)
    except Exception as exc:  # the trace of what ran is written, marked with the error, then it is raised
        failure = exc
        if recorder.top is None:
            raise
    top = recorder.top
    if top is None:
        raise ValueError(f"{root}.apply made no call nbtrace could record (is {method!r} a method of the model?)")
    recorder.names.learn(top)  # stacks of layers the whole forward shows; every call named again
    run_prints = {call_key(call.path, call.index): outputs[id(call)] for call in top.walk() if id(call) in outputs}

    sections: dict[str, Any] = {"numerics": numerics_section(jit=False)}
    try:
        sections["parameters"] = parameters_section(variables, recorder.names)
    except Exception as exc:  # noqa: BLE001 - a fingerprint must never cost the user their trace
        warnings.warn(f"nbtrace could not fingerprint the variables of {root}: {exc}", stacklevel=2)
    tree = _tree(top, use_repr)
    if do_prune_layers:
        prune_intermediate_layers(tree)
    prune_outputs_of_parents(tree)
    if twin_wanted and failure is None:
        sections[TWIN_SECTION] = _twin(model, variables, args, {**options, **kwargs}, method, recorder.names, valid,
                                       run_prints, tree, unfit)
        if use_repr:
            kept = _input_arrays(args, kwargs)
            if kept:
                sections[INPUTS_SECTION] = inputs_section_of_arrays(kept)
    serializer = Serializer(use_repr, folder)
    try:
        _serialize(tree, serializer)
        full, _ = write_trace_files(tree, folder, root)
        write_sidecar(folder, root, sections)
    except BaseException:
        remove_files(serializer.written)
        raise
    if failure is not None:
        raise failure
    from ..core.load import load_trace

    return JaxTrace(output, load_trace(full), folder)


def _tree(top: Call, use_repr: bool) -> dict[str, Any]:
    """The format's tree of calls, values still raw (serialized once pruning has dropped what it drops)."""
    def node(call: Call, is_root: bool) -> dict[str, Any]:
        base = call.path if call.index == 0 else f"{call.path}@{call.index + 1}"
        if is_root:
            inputs: Any = {"args": call.args, "kwargs": call.kwargs}
        elif call.kwargs:
            inputs = {"args": call.args, "kwargs": call.kwargs} if call.args else {"kwargs": call.kwargs}
        else:
            inputs = {"args": call.args} if call.args else {}
        out: dict[str, Any] = {"module_path": call.path, "inputs": _Raw(inputs, f"{base}_inputs")}
        children = [node(child, False) for child in call.children]
        if call.error is not None:
            out["error"] = error_record(call.error)
        elif not is_root or not use_repr or not children:
            out["outputs"] = _Raw(call.out, f"{base}_outputs")
        if children:
            out["children"] = children
        return out

    return node(top, True)


class _Raw:
    """A value waiting to be serialized, with the base name of its files."""

    __slots__ = ("name", "value")

    def __init__(self, value: Any, name: str) -> None:
        self.value, self.name = value, name


def _serialize(node: dict[str, Any], serializer: Serializer) -> None:
    for key in ("inputs", "outputs"):
        if isinstance(node.get(key), _Raw):
            raw = node[key]
            node[key] = serializer(raw.value, raw.name)
    for child in node.get("children", ()):
        _serialize(child, serializer)


def _twin(model: Any, variables: Any, args: tuple, kwargs: dict[str, Any], method: Any, root: CallNames,
          valid: Any, run_prints: dict[str, dict[str, list[float]]], tree: dict[str, Any],
          unfit: str | None) -> dict[str, Any]:
    written = [key for key, _ in named_calls(tree)]
    if unfit is not None:
        return twin_section(None, None, {}, written, None, f"not recorded: {unfit}")
    try:
        twin = run_twin(model, variables, args, kwargs, method, root, valid)
        perturbed = run_twin(model, variables, args, kwargs, method, root, valid, perturb=True)
        rounded = None
        if stores_wider(model if variables is None else variables):  # the run rounded to bfloat16: unless it is the twin
            same = rounding_changes_nothing(model if variables is None else variables, args, kwargs)
            rounded = twin if same else run_twin(model, variables, args, kwargs, method, root, valid, rounded=True)
    except Exception as exc:  # noqa: BLE001 - a model that cannot run in float64 keeps its trace
        text = f"{type(exc).__name__}: {exc}"
        return twin_section(None, None, {}, written, None, f"the float64 twin of the whole model failed ({text[:300]})")
    return twin_section(twin, perturbed, run_prints, written, padding_digest(valid), None, rounded)


def _input_arrays(args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    found = {f"args.{i}": host(a) for i, a in enumerate(args) if is_array(a)}
    found.update({f"kwargs.{k}": host(v) for k, v in kwargs.items() if is_array(v)})
    if sum(a.nbytes for a in found.values()) > _MAX_INPUT_BYTES:
        return {}
    return found
