"""Where two backward passes part ways: the first module, in backward order, whose gradient is born wrong.

A module's backward takes the gradient that reached its outputs and sends gradients on to its inputs and its
parameters. It is wrong when what arrived agrees and what it sends differs beyond rounding. The walk goes through
the reference's calls in backward order (the reverse of the order they began: a parent's gradient arrives before
its last child's, and it sends its own last, after its first child's), and names the first call that is born wrong.

Three rules, in order:

1. **The forward first.** A forward that differs makes every gradient after it differ: the forward's verdict is
   reported (``state == "forward"``) and the backward is not judged.
2. **The gradient reaching the model's output** (the loss, or what the training loop does with the output: a sum
   for a mean, a scale) is the run's own: it is compared from the two runs' recorded values by the project's rule
   for recorded tensors (``measure.metrics.diff_tensors``); beyond it, the model's root is named (``what ==
   "output gradient"``).
3. **The modules' backward.** Where both sides recorded the float64 twin's backward (``capture/backward/twin.py``:
   the same fixed cotangent at the output, every call's vector-Jacobian product fingerprinted, pruned calls
   included), the two float64 functions are compared at every call, float64 against float64 (``method ==
   "twin"``): a correct kernel (sdpa against eager, fused projections, checkpointing) differs only by float64
   rounding, ``TWIN_RELATIVE`` of the gradient's RMS at most. Without twins, the run's recorded gradients are
   compared by the recorded-tensor rule (``method == "files"``): "agree" where all are within the dtype's
   tolerance, else ``"unresolved"`` with a suspect (``files_walk.py`` says why the files alone name no module).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.node import Node
from ...core.ranks import call_key
from ..measure.metrics import diff_tensors

if TYPE_CHECKING:  # pragma: no cover
    from ...core.gradients import Backward
    from ..comparison import Comparison

#: the largest relative RMS difference two float64 backward twins of one function show at a call: float64
#: rounding through a whole backward (measured on the correct variants of tests/test_backward_verdict.py: at most
#: ~1e-15 of the gradient's RMS), with room for deep models; semantic differences measured 1e-3 and up
TWIN_RELATIVE = 2.0**-30
_TAG = re.compile(r"@(\d+)$")


@dataclass
class GradientDivergence:
    """The call where the backward is born wrong (a's naming)."""

    module_path: str
    call: str  # the call's name: its path, ``<path>@<n>`` for its n-th call
    what: str  # "inputs", "parameters" or "output gradient"
    score: float  # relative difference of what the call sent (float64 twin, or the run's values)
    arrived: float | None  # relative difference of what reached its outputs
    method: str  # "twin" or "files"
    places: list[str] = field(default_factory=list)  # what differs: ``inputs.0``, ``param.weight``
    hidden: bool = False  # in a layer the files' pruning left out (the twin saw it)

    def __str__(self) -> str:
        sent = {"inputs": "the gradient it sends to its inputs", "parameters": "its parameters' gradients",
                "output gradient": "the gradient reaching the model's output (the loss)"}[self.what]
        where = " (pruned from the files)" if self.hidden else ""
        return (f"{self.module_path}{where}: {sent} differs ({', '.join(self.places) or self.what}: "
                f"{self.score:.3g} relative) while the gradient reaching its outputs agrees")


@dataclass
class BackwardVerdict:
    """The backward side of a comparison (``comparison.backward``)."""

    state: str  # "diverge", "agree", "forward", "unresolved" or "none"
    method: str | None
    reason: str
    first_divergence: GradientDivergence | None = None
    #: per compared call, in backward order: (a's call name, arrived, sent): relative differences (None: not compared)
    calls: list[tuple[str, float | None, float | None]] = field(default_factory=list)
    #: where an unresolved verdict from the files would look first (a's module path)
    suspect: str | None = None

    @property
    def module_path(self) -> str | None:
        return self.first_divergence.module_path if self.first_divergence is not None else None

    def as_dict(self) -> dict[str, Any]:
        found = self.first_divergence
        return {
            "state": self.state, "method": self.method, "reason": self.reason, "suspect": self.suspect,
            "first_divergence": None if found is None else {
                "module_path": found.module_path, "call": found.call, "what": found.what, "score": _num(found.score),
                "arrived": _num(found.arrived), "places": list(found.places), "hidden": found.hidden},
        }

    def __str__(self) -> str:
        return self.reason


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def path_of(call: str) -> str:
    """The module path of a call name (``<path>@<n>`` -> ``<path>``)."""
    return _TAG.sub("", call)


def compare_backward(comparison: Comparison) -> BackwardVerdict:
    """The backward verdict of ``comparison`` (see the module docstring)."""
    a, b = comparison.a.backward, comparison.b.backward
    if a is None or b is None:
        side = "a" if a is None else "b"
        return BackwardVerdict("none", None, f"{side} has no backward pass recorded (trace it with backward=True)")
    if comparison.first_divergence is not None:
        where = comparison.first_divergence.module_path
        return BackwardVerdict("forward", None, f"the forward differs first, at {where}: every gradient after it "
                               "differs, so the backward is not judged")
    if comparison.verdict == "unresolved":
        return BackwardVerdict("unresolved", None, "the forward's verdict is unresolved; the backward is judged once "
                               "the forward agrees")
    seed = _seed(comparison, a, b)
    if seed is not None:
        return BackwardVerdict("diverge", "files", f"the backward differs first at {seed}", seed)
    if a.twin is not None and b.twin is not None:
        from .twin_walk import twin_verdict

        return twin_verdict(comparison, a, b)
    from .files_walk import files_verdict

    return files_verdict(comparison, a, b)


def _seed(comparison: Comparison, a: Backward, b: Backward) -> GradientDivergence | None:
    """The gradient reaching the model's output, from the runs' recorded values (rule 2)."""
    root_a, root_b = a.trace.root, b.trace.root
    places = []
    worst = 0.0
    for place, (x, y) in _pairs(root_a.outputs, root_b.outputs):
        diff = diff_tensors("output", place, place, x, y, comparison.rtol, comparison.atol)
        if diff.ok is False:
            places.append(f"outputs.{place}" if place else "outputs")
            worst = max(worst, diff.score if diff.score is not None else math.inf)
    if not places:
        return None
    return GradientDivergence(root_a.module_path, root_a.module_path, "output gradient", worst, None, "files", places)


def _pairs(x: Any, y: Any, place: str = "") -> list[tuple[str, tuple[Any, Any]]]:
    """The tensor records at the same places of two gradient structures."""
    from ...core.tensor import TensorValue

    if isinstance(x, TensorValue) and isinstance(y, TensorValue):
        return [(place, (x, y))]
    out = []
    if isinstance(x, dict) and isinstance(y, dict):
        for key in x:
            if key in y:
                out += _pairs(x[key], y[key], f"{place}.{key}" if place else str(key))
    elif isinstance(x, list) and isinstance(y, list):
        for i, (p, q) in enumerate(zip(x, y)):
            out += _pairs(p, q, f"{place}.{i}" if place else str(i))
    return out


def counterpart_names(comparison: Comparison) -> dict[str, str]:
    """a's call name -> b's, for the calls the forward comparison aligned."""
    names = {}
    for match in comparison.matches:
        if match.a is not None and match.b is not None:
            names[call_key(match.a.module_path, match.a.call_index)] = call_key(match.b.module_path,
                                                                              match.b.call_index)
    return names


def renamed(name: str, rename: dict[str, str] | None) -> str:
    """b's call name in a's naming (``compare``'s ``rename``: regex -> replacement, applied to the path)."""
    if not rename:
        return name
    path, tag = path_of(name), name[len(path_of(name)):]
    for pattern, replacement in rename.items():
        path = re.sub(pattern, replacement, path)
    return path + tag


def visible_nodes(trace_nodes: list[Node]) -> dict[str, Node]:
    return {call_key(n.module_path, n.call_index): n for n in trace_nodes}
