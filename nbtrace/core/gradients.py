"""The backward passes a trace recorded: the file ``<Class>_debug_tree_BACKWARD.json``, read as ``trace.backward``.

``nbtrace.trace(model, ..., backward=True)`` lets the forward build its graph and records every backward pass run
inside the block (``loss.backward()``, ``torch.autograd.grad``). Each pass is a call tree shaped like the forward's
(pruned as it is), in the format's own records, where a call's ``outputs`` is the gradient that reached its
outputs and its ``inputs`` the gradient it sent to its inputs (``"None"`` where none flowed), and each parameter's
gradient of that pass (a tied weight's summed over its uses)::

    {"format": "nbtrace-backward", "version": 1, "forward": "<digest of the forward's FULL file>",
     "tensors": "<folder of the safetensors files>" | null,
     "passes": [{"tree": {<call tree>}, "parameters": {"<Class>.<module path>.<name>": <tensor record>},
                 "seed": {"shape": [..], "dtype": ".."} | null,
                 "norms": {"<call name>": {"outputs.<i>" | "inputs.<i>": <norm> | null}}}]}

``norms`` (optional) keeps, for each layer block pruning left out of the tree, the norm of the gradient that reached
each output and of what it sent to each input: the picture of gradients across layers stays whole.

``forward`` ties the file to the forward it belongs to: a file left by another run (its digest differs) is not
read. ``twin`` (optional) holds the fingerprints of the forward's float64 twin run backward from a fixed cotangent
(``capture/backward/twin.py``): ``{"seed": n, "order": [call names as they began], "calls": {"<call name>":
{"outputs.<i>" | "inputs.<i>" | "param.<name>": <fingerprint as in core/twin.py>}}}``, or ``{"skipped": why}``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TraceFormatError
from .build import TreeBuilder
from .json_text import parse_json
from .tensor import TensorValue

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from .node import Node
    from .trace import Trace

BACKWARD_SUFFIX = "_debug_tree_BACKWARD.json"
BACKWARD_FORMAT = "nbtrace-backward"
BACKWARD_VERSION = 1
_TRACE_SUFFIXES = ("_debug_tree_FULL_TENSORS.json", "_debug_tree_SUMMARY.json")


def backward_path(trace_file: Path) -> Path:
    """The backward file beside a FULL or SUMMARY trace file."""
    name = trace_file.name
    for suffix in _TRACE_SUFFIXES:
        if name.endswith(suffix):
            return trace_file.with_name(name[: -len(suffix)] + BACKWARD_SUFFIX)
    return trace_file.with_name(trace_file.stem + BACKWARD_SUFFIX)


def full_file(trace_file: Path) -> Path:
    """The FULL file of the forward a trace file belongs to (the digest is of its bytes)."""
    name = trace_file.name
    if name.endswith(_TRACE_SUFFIXES[1]):
        return trace_file.with_name(name[: -len(_TRACE_SUFFIXES[1])] + _TRACE_SUFFIXES[0])
    return trace_file


def forward_digest(full: Path) -> str | None:
    """A short digest of a forward's FULL file, or None when it cannot be read."""
    try:
        return hashlib.blake2b(full.read_bytes(), digest_size=12).hexdigest()
    except OSError:
        return None


@dataclass
class GradPass:
    """One backward pass: the gradients at every recorded call (a Trace shaped like the forward's) and the
    parameters' gradients of that pass."""

    trace: Trace
    parameters: dict[str, TensorValue] = field(default_factory=dict)
    index: int = 0
    #: the gradient norms of each layer block pruning left out of the files: call name -> place (``outputs.0``,
    #: ``inputs.0``) -> norm (None where it was not finite)
    norms: dict[str, dict[str, float | None]] = field(default_factory=dict)

    def grad_outputs(self, node: Node) -> Any:
        """The gradient that reached ``node``'s outputs in this pass (the format's nesting)."""
        return node.outputs

    def grad_inputs(self, node: Node) -> Any:
        """The gradient ``node`` sent on to its inputs in this pass."""
        return node.inputs

    def module_parameters(self, module_path: str) -> dict[str, TensorValue]:
        """The gradients of the parameters ``module_path`` holds itself (not its submodules'), by short name."""
        prefix = module_path + "."
        return {name[len(prefix):]: value for name, value in self.parameters.items()
                if name.startswith(prefix) and "." not in name[len(prefix):]}

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per recorded gradient (``render/backward_frame.py``)."""
        from ..render.backward_frame import gradient_frame

        return gradient_frame(self)


@dataclass
class Backward:
    """Every backward pass recorded for one forward, in order (``passes``); ``last`` the latest one."""

    passes: list[GradPass]
    source: Path | None = None
    #: the float64 twin's backward (call name -> place -> ``TwinPrint``), where it ran; ``twin_order``: call names
    #: in the order they began; ``twin_skipped``: why it did not run
    twin: dict[str, dict[str, Any]] | None = None
    twin_order: list[str] = field(default_factory=list)
    twin_skipped: str | None = None

    @property
    def last(self) -> GradPass:
        return self.passes[-1]

    @property
    def trace(self) -> Trace:
        """The latest pass's gradient tree."""
        return self.last.trace

    @property
    def parameters(self) -> dict[str, TensorValue]:
        return self.last.parameters

    def __len__(self) -> int:
        return len(self.passes)

    def to_dataframe(self) -> pandas.DataFrame:
        """The gradients of every pass, one row per recorded gradient, with a ``pass`` column."""
        import pandas as pd

        frames = [p.to_dataframe().assign(**{"pass": p.index}) for p in self.passes]
        return pd.concat(frames, ignore_index=True) if frames else frames[0]

    def __repr__(self) -> str:
        return f"<Backward: {len(self.passes)} pass(es) of {self.trace.model_name}>"

    def _repr_html_(self) -> str:
        """In a notebook: the latest pass's gradient tree (a call's outputs: the gradient that reached them; its
        inputs: what it sent), as a Trace shows itself."""
        head = (f"<div><b>Backward of {self.trace.model_name}</b> · {len(self.passes)} pass(es), the latest shown "
                "(outputs: the gradient that reached each call; inputs: what it sent)</div>")
        return head + self.trace._repr_html_()


def parse_backward(document: Any, where: Path, base_dir: Path) -> Backward:
    """Build a Backward from the file's JSON (malformed: TraceFormatError naming ``where``)."""
    from .trace import Trace

    if not isinstance(document, dict) or document.get("format") != BACKWARD_FORMAT:
        raise TraceFormatError(where, f"is not an nbtrace backward file (format {BACKWARD_FORMAT!r})")
    raw_passes = document.get("passes")
    if not isinstance(raw_passes, list) or not raw_passes:
        raise TraceFormatError(where, "holds no backward pass")
    tensors = document.get("tensors")
    folder = base_dir / tensors if isinstance(tensors, str) else base_dir
    passes = []
    for i, raw in enumerate(raw_passes):
        if not isinstance(raw, dict) or not isinstance(raw.get("tree"), dict):
            raise TraceFormatError(where, f"pass {i} needs a 'tree'")
        trace = Trace.from_tree(raw["tree"], kind="full", source=where, base_dir=folder)
        builder = TreeBuilder(where, folder)
        parameters = {}
        for name, record in (raw.get("parameters") or {}).items():
            value = builder.value(record, 0)
            if isinstance(value, TensorValue):
                parameters[name] = value
        norms = raw.get("norms") or {}
        if not isinstance(norms, dict) or not all(isinstance(v, dict) for v in norms.values()):
            raise TraceFormatError(where, f"pass {i}: 'norms' must map call names to places and numbers")
        passes.append(GradPass(trace, parameters, i, {str(k): dict(v) for k, v in norms.items()}))
    backward = Backward(passes, where)
    twin = document.get("twin")
    if isinstance(twin, dict):
        if "calls" in twin:
            from .twin import parse_twin

            backward.twin = parse_twin({"version": 1, "sums": 16, "calls": twin["calls"]}).calls
            backward.twin_order = [str(name) for name in twin.get("order") or ()]
        backward.twin_skipped = twin.get("skipped")
    return backward


def read_backward(trace_file: Path) -> Backward | None:
    """The backward passes recorded beside ``trace_file``, or None: none recorded, or left by another run."""
    path = backward_path(trace_file)
    if not path.is_file():
        return None
    try:
        document = parse_json(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise TraceFormatError(path, f"cannot be read as JSON: {exc}") from None
    stamp = document.get("forward") if isinstance(document, dict) else None
    if stamp is not None and stamp != forward_digest(full_file(trace_file)):
        return None  # written for another forward that the folder held before: it does not describe this one
    return parse_backward(document, path, path.parent.resolve())


def backward_of(trace: Trace) -> Backward | None:
    """``trace.backward``: its backward passes, read once per change of the file (None when it has none)."""
    if trace.source is None:
        return None
    path = backward_path(trace.source)
    try:
        stat = path.stat()
        key = (stat.st_mtime_ns, stat.st_size)
    except OSError:
        return None
    cached = getattr(trace, "_backward_cache", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    found = read_backward(trace.source)
    trace._backward_cache = (key, found)  # type: ignore[attr-defined]
    return found
