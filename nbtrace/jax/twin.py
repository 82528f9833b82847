"""The float64 twin of a Flax forward: the sidecar's ``twin`` section, as the PyTorch capture writes it.

After the recorded forward, the model runs again with every float variable and input in float64
(``jax.enable_x64`` for these runs only, matmuls at the highest precision, eager), and with each module's ``dtype``
field set to float64 while it runs (Flax modules compute in their ``dtype``: a bfloat16 model's twin is float64
all the same); nothing of the user's model, variables or JAX configuration is left changed. At every call each
float input and output is fingerprinted (``fingerprint.py``); the run's own outputs were fingerprinted as it
recorded them, so ``acc`` says how far its rounding carried it. A second twin with every variable moved by one
float64 rounding measures the twin's own precision (``s64``). A float result narrower than float64 inside the twin
is avoided where the code asks for it (``widen.py``: ``astype(jnp.float32)``, ``dtype=`` of a factory); one that
remains is named in ``low``. JAX models hold no constants outside their variables,
so ``constants`` is empty and ``sconst`` unmeasured.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import numpy as np

from ..capture.twin.padding import find_in_arrays
from ..capture.twin.print_numbers import fill_calls, padding_text
from ..capture.twin.signs import SUMS
from ..core.ranks import call_key
from ..core.twin import TWIN_VERSION
from .calls import Call, CallNames, CallRecorder
from .fingerprint import fingerprint
from .nnx import float64_copy, intercepted, is_nnx
from .values import eager_remat, float_leaves, is_float, tree_map_arrays
from .widen import WidenState, widened

_NOISE_LENGTH = 65521  # the PyTorch twin's pattern: a prime, so its tiles never line up with a tensor's rows


def _noise_base() -> np.ndarray:
    rng = random.Random(0x5EED)
    return np.asarray([2.0 * rng.random() - 1.0 for _ in range(_NOISE_LENGTH)])


_NOISE = _noise_base()


class TwinCalls:
    """The fingerprints one float64 run made: call name -> place -> (shape, numbers), the first narrow result,
    and the order its calls started and ended."""

    def __init__(self, valid: np.ndarray | None) -> None:
        self.valid = valid
        self.prints: dict[str, dict[str, tuple[tuple[int, ...], list[float]]]] = {}
        self.low: dict[str, str] = {}
        self.events: list[str] = []
        self._first_low: str | None = None
        self._open: list[tuple[str, bool]] = []
        self.widen: WidenState | None = None

    def run_call(self, call: Call, next_fun: Callable) -> Any:
        import jax.numpy as jnp

        key = call_key(call.path, call.index)
        self.events.append("(" + key)
        places = {f"args.{i}": a for i, a in enumerate(call.args)}
        places.update({f"kwargs.{k}": v for k, v in call.kwargs.items()})
        found = self.prints.setdefault(key, {})
        for place, leaf in float_leaves(places):
            found[place] = (leaf.shape, fingerprint(leaf, self.valid))
        self._open.append((key, self._first_low is not None))
        saved = {name: getattr(call.module, name) for name in ("dtype", "param_dtype")
                 if getattr(call.module, name, None) is not None}
        try:
            for name in saved:
                object.__setattr__(call.module, name, jnp.float64)
            out = next_fun(*call.given[0], **call.given[1])
        finally:
            for name, value in saved.items():
                object.__setattr__(call.module, name, value)
            _, low_before = self._open.pop()
        for place, leaf in float_leaves(out, "out"):
            found[place] = (leaf.shape, fingerprint(leaf, self.valid))
        if self._first_low is None and self.widen is not None and self.widen.low is not None:
            self._first_low = self.widen.low
        if self._first_low is not None and not low_before:
            self.low[key] = self._first_low
        self.events.append(")" + key)
        return out


def run_twin(model: Any, variables: Any, args: tuple, kwargs: dict[str, Any], method: Any, root: CallNames,
             valid: np.ndarray | None, perturb: bool = False, rounded: bool = False) -> TwinCalls:
    """One float64 run of ``model`` (``perturb``: its variables moved by one float64 rounding; ``rounded``: its
    variables and float inputs rounded to bfloat16 first, as a port that stores the model in bfloat16 holds them,
    the PyTorch twin's ``forward.ROUNDED`` run); ``root``: the recorded forward's names, so the twin's calls are
    named as its calls."""
    import flax.linen as nn
    import jax

    calls = TwinCalls(valid)
    with ExitStack() as stack:
        stack.enter_context(jax.enable_x64(True))
        stack.enter_context(jax.disable_jit())
        stack.enter_context(eager_remat())
        stack.enter_context(jax.default_matmul_precision("highest"))
        widen = _widen_rounded if rounded else _widen
        wide_args = tree_map_arrays(args, widen)
        wide_kwargs = {k: v if k in ("rngs", "mutable") else tree_map_arrays(v, widen) for k, v in kwargs.items()}
        recorder = CallRecorder(root, on_call=calls.run_call)
        if is_nnx(model):
            wide = float64_copy(model, widen, _perturbed if perturb else None)
            stack.enter_context(intercepted(wide, recorder))
            calls.widen = stack.enter_context(widened())
            (getattr(wide, method) if isinstance(method, str) else wide)(*wide_args, **wide_kwargs)
            return calls
        wide_vars = tree_map_arrays(variables, widen, with_path=True)
        if perturb:
            wide_vars = tree_map_arrays(wide_vars, _perturbed, with_path=True)
        stack.enter_context(nn.intercept_methods(recorder))
        calls.widen = stack.enter_context(widened())
        model.apply(wide_vars, *wide_args, method=method, **wide_kwargs)
    return calls


def _widen(a: np.ndarray, name: str = "") -> Any:
    import jax.numpy as jnp

    if np.issubdtype(a.dtype, np.floating) or a.dtype.name == "bfloat16":
        return jnp.asarray(np.asarray(a, dtype=np.float64))
    return jnp.asarray(a)


def _widen_rounded(a: np.ndarray, name: str = "") -> Any:
    """``_widen`` of the array rounded to bfloat16 first (a float array wider than that)."""
    import ml_dtypes

    if np.issubdtype(a.dtype, np.floating) and a.dtype.itemsize > 2:
        a = np.asarray(a).astype(ml_dtypes.bfloat16)
    return _widen(a, name)


def stores_wider(variables: Any) -> bool:
    """True when the model (its variables: a linen model's, or an nnx model) holds a float array wider than
    bfloat16: a port may store it rounded to bfloat16, and the twin runs once more as such a port holds it."""
    import jax

    if is_nnx(variables):
        from flax import nnx

        variables = nnx.state(variables)
    return any(np.issubdtype(np.dtype(leaf.dtype), np.floating) and np.dtype(leaf.dtype).itemsize > 2
               for leaf in jax.tree_util.tree_leaves(variables) if hasattr(leaf, "dtype"))


def rounding_changes_nothing(variables: Any, args: tuple, kwargs: dict[str, Any]) -> bool:
    """True when rounding every float array wider than bfloat16 among the model's variables (a linen model's, or an
    nnx model's state) and its inputs (as ``run_twin`` rounds them) into bfloat16 changes no value: the rounded run
    would then be the twin bit for bit (weights published in bfloat16, loaded in float32), and is not made (the
    PyTorch twin's ``capture/twin/exact.py``). A NaN counts as changed. Stops at the first array that changes."""
    import jax
    import ml_dtypes

    if is_nnx(variables):
        from flax import nnx

        variables = nnx.state(variables)
    inputs = {k: v for k, v in kwargs.items() if k not in ("rngs", "mutable")}
    for leaf in jax.tree_util.tree_leaves((variables, args, inputs)):
        dtype = np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else None
        if dtype is None or not np.issubdtype(dtype, np.floating) or dtype.itemsize <= 2:
            continue
        host = np.asarray(leaf)
        if not np.array_equal(host.astype(ml_dtypes.bfloat16).astype(dtype), host):
            return False
    return True


def _perturbed(a: Any, name: str) -> Any:
    import jax.numpy as jnp

    host = np.asarray(a)
    if host.dtype != np.float64:
        return a
    start = zlib.crc32(name.encode()) % _NOISE_LENGTH
    repeats = -(-(host.size + start) // _NOISE_LENGTH)
    noise = np.tile(_NOISE, repeats)[start:start + host.size].reshape(host.shape)
    return jnp.asarray(host * (1 + 2.0**-53 * noise))


def twin_section(twin: TwinCalls | None, perturbed: TwinCalls | None, run: dict[str, dict[str, list[float]]],
                 written: list[str], padding: str | None, problem: str | None,
                 rounded: TwinCalls | None = None) -> dict[str, Any]:
    """The ``twin`` section for the calls of the tree as written (``written``, after pruning), pruned ones after;
    ``rounded``: the run with the model rounded to bfloat16 (``p_bf16``)."""
    section: dict[str, Any] = {"version": TWIN_VERSION, "sums": SUMS, "padding": padding, "constants": [],
                               "calls": {}}
    if twin is None or problem is not None:
        section["skipped"] = problem or "the forward raised"
        return section
    perturbed_prints = {"float64": {key: {place: numbers for place, (_, numbers) in places.items()}
                                    for key, places in perturbed.prints.items()}} if perturbed is not None else {}
    if rounded is not None:
        perturbed_prints["bfloat16"] = {key: {place: numbers for place, (_, numbers) in places.items()}
                                        for key, places in rounded.prints.items()}
    fill_calls(section, written, twin.prints, perturbed_prints, run, twin.low, twin.events)
    return section


def twin_unfit(variables: Any) -> str | None:  # variables: a linen model's, or an nnx model (it holds its own)
    """Why the twin is not recorded by default (``measure_rounding="auto"``): its float64 copy of the variables
    would take more than half the memory free where they live (the host's for the CPU backend, the device's
    ``memory_stats`` elsewhere); None when it fits or free memory cannot be told."""
    import jax

    from ..capture.twin.host_memory import SHARE, available_host_memory

    if is_nnx(variables):
        from .nnx import state_arrays

        needed = sum(8 * np.asarray(a).size for *_, a in state_arrays(variables) if is_float(np.asarray(a)))
    else:
        needed = sum(8 * a.size for _, a in float_leaves(variables))
    if jax.default_backend() == "cpu":
        free = available_host_memory()
    else:
        stats = jax.devices()[0].memory_stats() or {}
        free = stats.get("bytes_limit", 0) - stats.get("bytes_in_use", 0) if "bytes_limit" in stats else None
    if free is not None and needed > SHARE * free:
        return (f"its float64 copy needs {needed / 2**30:.1f} GiB on {jax.default_backend()}, more than half the "
                f"{free / 2**30:.1f} GiB free")
    return None


def padding_digest(valid: np.ndarray | None) -> str | None:
    """The padding mask's shape and two sums of it, written as the PyTorch capture writes them."""
    if valid is None:
        return None
    flags = valid.reshape(-1).astype(np.int64)
    weights = np.arange(flags.size) % 65521 + 1
    return padding_text(valid.shape, [int(flags.sum()), int((flags * weights).sum())])


def find_valid(args: tuple, kwargs: dict[str, Any]) -> np.ndarray | None:
    """The ``(batch, sequence)`` padding mask among the top-level inputs: the PyTorch capture's rule
    (``capture/twin/padding.py``: a keyword named ``*mask*``, else a 0/1 input shaped like the token ids)."""
    from .serialize import host, is_array

    arrays = {f"args.{i}": host(v) for i, v in enumerate(args) if is_array(v)}
    arrays.update((f"kwargs.{k}", host(v)) for k, v in kwargs.items() if is_array(v))
    return find_in_arrays(arrays)[0]
