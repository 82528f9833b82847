"""A comparison as plain data: the verdict a port's CI reads (``Comparison.to_dict()``, ``nbtrace diff --json``).

Only JSON types (str, int, float, bool, None, list, dict); non-finite numbers become None. The layout is
``verdict_schema.json`` beside this file, versioned by ``SCHEMA_VERSION``: a field is added in a minor change and
the version goes up when one is removed or changes its meaning, so a consumer checks ``schema_version``.
"""

from __future__ import annotations

import json
import math
import platform
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison
    from ..steps.steps import StepsComparison

SCHEMA_NAME = "nbtrace-verdict"
SCHEMA_VERSION = 1
#: fields added within a version (a consumer of version 1 reads them or ignores them): 1 added ``end_to_end``,
#: 2 ``backward`` (the backward passes' verdict, ``diff/backward/``)
SCHEMA_MINOR = 2
#: what ``verdict`` can be, and the exit status ``nbtrace diff`` gives each (2 is a bad input)
EXIT_STATUS = {"agree": 0, "diverge": 1, "unresolved": 3}


@cache
def verdict_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) that ``Comparison.to_dict()`` and ``nbtrace diff --json`` follow."""
    text = resources.files(__package__).joinpath("verdict_schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def comparison_dict(comparison: Comparison) -> dict[str, Any]:
    """One forward's comparison as plain data (see ``verdict_schema.json``)."""
    return _envelope("forward", comparison.verdict, _comparison_body(comparison, step=0), comparison.summary())


def steps_dict(steps: StepsComparison) -> dict[str, Any]:
    """A comparison of runs of several forwards (a traced ``generate``) as plain data, step by step."""
    verdict = steps_verdict(steps)
    body: dict[str, Any] = {
        "decided_by": None, "first_divergence": None, "unresolved": [], "precision": [], "notes": list(steps.notes),
        "numerics": {"a": {}, "b": {}},
    }
    first = steps.first_step
    if first is not None:
        inner = _comparison_body(steps.comparison(first), step=first) if steps.steps[first].kind != "cache" else None
        if inner is not None:
            body.update({k: inner[k] for k in ("decided_by", "first_divergence", "precision", "numerics")})
        if body["first_divergence"] is None:
            body["first_divergence"] = _step_divergence(steps)
    for result in steps.steps:
        if result.status == "no_data":  # a step nothing decided: read again, rare
            body["unresolved"] += _unresolved(steps.comparison(result.step), result.step)
    body["steps"] = {
        "counts": list(steps.counts),
        "first_step": first,
        "first_token_step": steps.first_token_step,
        "each": [_step(result) for result in steps.steps],
    }
    return _envelope("steps", verdict, body, steps.summary())


def steps_verdict(steps: StepsComparison) -> str:
    """"diverge" (a step diverges, the tokens or the number of forwards differ), "agree", or "unresolved"."""
    if steps.first_divergence is not None or steps.first_token_step is not None or steps.count_mismatch:
        return "diverge"
    return "agree" if steps.agree else "unresolved"


def _envelope(kind: str, verdict: str, body: dict[str, Any], summary: str) -> dict[str, Any]:
    import torch

    from ... import __version__

    return _clean({
        "schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION, "schema_minor": SCHEMA_MINOR, "kind": kind,
        "verdict": verdict,
        **body, "summary": summary,
        "versions": {"nbtrace": __version__, "torch": torch.__version__, "python": platform.python_version()},
    })


def _comparison_body(comparison: Comparison, step: int) -> dict[str, Any]:
    a_numerics, b_numerics = comparison.numerics
    return {
        "decided_by": comparison.decided_by or "tolerance",
        "resolution": comparison.resolution,
        "first_divergence": _divergence(comparison.first_divergence, step),
        "unresolved": _unresolved(comparison, step),
        "precision": [{"module": f.module_path, "b_module": f.b_path, "rule": f.rule, "sentence": f.sentence,
                       "step": step} for f in comparison.precision],
        "notes": list(comparison.notes),
        "coverage": comparison.coverage,
        "compared": comparison.compared,
        "unmatched": {"a": [n.module_path for n in comparison.unmatched_a],
                      "b": [n.module_path for n in comparison.unmatched_b]},
        "numerics": {"a": dict(a_numerics), "b": dict(b_numerics)},
        "end_to_end": _end_to_end(comparison),
        **_backward(comparison),
    }


def _backward(comparison: Comparison) -> dict[str, Any]:
    """``backward``: the backward passes' verdict, where a trace recorded one (no field otherwise)."""
    a, b = comparison.a.backward, comparison.b.backward
    return {"backward": comparison.backward.as_dict()} if a is not None or b is not None else {}


def _end_to_end(comparison: Comparison) -> dict[str, Any] | None:
    found = comparison.end_to_end
    return found.to_dict() if found is not None else None


def _unresolved(comparison: Comparison, step: int) -> list[dict[str, Any]]:
    """The call where the verdict stopped undecided, then every call that holds it."""
    if comparison.unresolved is None:
        return []
    path, reason = comparison.unresolved
    rows = [{"module": path, "reason": reason, "step": step, "holds_it": False}]
    held = [row["module_path"] for row in comparison.node_report()
            if row["status"] == "unresolved" and row["module_path"] != path]
    return rows + [{"module": p, "reason": None, "step": step, "holds_it": True} for p in held]


def _divergence(first: Any, step: int) -> dict[str, Any] | None:
    if first is None:
        return None
    return {
        "module": first.module_path, "b_module": first.b_path, "step": getattr(first, "step", step) or step,
        "call_index": first.call_index, "observed": first.observed_path, "io": first.io, "arg": first.arg,
        "b_arg": first.b_arg, "reason": first.reason, "confidence": first.confidence, "exact": bool(first.exact),
        "basis": first.basis, "max_abs": first.max_abs, "max_rel": first.max_rel, "cosine": first.cosine,
        "score": max((e.score for e in first.evidence), default=first.score),
        "evidence": [{"test": e.test, "statistic": e.statistic, "threshold": e.threshold, "score": e.score,
                      "sentence": e.sentence, "source": e.source} for e in first.evidence],
        "weights": [str(w) for w in first.weights],
        "pruned": list(first.pruned) if first.pruned else None,
        "operation": _operation(first.operation),
    }


def _step_divergence(steps: StepsComparison) -> dict[str, Any] | None:
    """A step's divergence seen only in its KV cache update (or its tokens), in the divergence's layout."""
    first = steps.first_divergence
    if first is None:
        return None
    return {"module": first.module_path, "b_module": first.b_path, "step": first.step, "call_index": None,
            "observed": first.module_path, "io": "cache", "arg": None, "b_arg": None, "reason": first.reason,
            "confidence": "certain", "exact": bool(first.exact), "basis": "cache", "max_abs": None, "max_rel": None,
            "cosine": None, "score": None, "evidence": [], "weights": [], "pruned": None, "operation": None}


def _operation(found: Any) -> dict[str, Any] | None:
    """``narrow()``'s first diverging operation (an OperationDiff), when it ran."""
    first = getattr(found, "first", None)
    if first is None:
        return None

    def side(op: Any) -> dict[str, Any] | None:
        if op is None:
            return None
        return {"name": op.name, "module": op.module, "file": op.source.file, "line": op.source.line,
                "text": op.source.text}

    return {"kind": first.kind, "reference": side(first.reference), "port": side(first.port),
            "difference": first.difference, "allowed": first.allowed, "u": first.u, "sentence": str(first)}


def _step(result: Any) -> dict[str, Any]:
    differ = result.tokens_differ
    return {"step": result.step, "status": result.status, "module": result.module_path, "kind": result.kind,
            "reason": result.reason, "tokens_differ": differ}


def _clean(value: Any) -> Any:
    """JSON types only: tuples as lists, non-finite floats as None, anything else as its string."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    try:
        number = float(value)  # numpy and torch scalars
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None
