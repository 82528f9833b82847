"""A run of several forwards against another, step by step (``compare``'s path for runs: ``diff/compare.py``).

A side holds several forwards when it is a folder with ``forward_<i>/`` folders, a list or
tuple of Traces (or trace paths), or a Recorder (``rec.traces``). Then the forwards pair up
in order and each pair goes through the single-forward ``comparison.compare``; the KV cache
update and the picked token of each step are compared too (``cache_check.py``,
``core/generation.py``). Two traces loaded at a time, whatever the length of the runs.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from ...core.forwards import forward_sources, holds_several_forwards
from ...core.generation import CacheFacts, cache_facts, fed_tokens, input_length, picked_tokens, token_margins
from ...core.load import load_trace
from ...core.trace import Trace
from .cache_check import CacheDivergence, cache_difference, cache_user
from ..comparison import Comparison
from ..comparison import compare as compare_forward
from .steps import StepResult, StepsComparison

_ACCEPTS = "a Trace, a trace file or folder, a list of Traces or paths, or a Recorder"


def holds_several(side: Any) -> bool:
    """True when ``side`` stands for several forwards (see the module docstring)."""
    if isinstance(side, Trace):
        return False
    if isinstance(side, (str, os.PathLike)):
        return holds_several_forwards(side)
    if isinstance(side, (list, tuple)):
        return True
    return _recorder_traces(side) is not None or (
        isinstance(side, Sequence) and not isinstance(side, (str, bytes)) and hasattr(side, "sources")
    )


def _recorder_traces(side: Any) -> Sequence[Trace] | None:
    traces = getattr(side, "traces", None)
    return traces if isinstance(traces, Sequence) and hasattr(side, "class_name") else None


def step_sources(side: Any, name: str) -> Sequence[Any]:
    """The forwards of one side, in order, as Traces or trace files (read one at a time)."""
    if isinstance(side, Trace):
        return [side]
    if isinstance(side, (str, os.PathLike)):
        return forward_sources(side)
    traces = _recorder_traces(side)
    if traces is not None:
        return traces
    if isinstance(side, Sequence) and not isinstance(side, (str, bytes)):
        for position, item in enumerate(side):
            if not isinstance(item, (Trace, str, os.PathLike)):
                raise TypeError(f"{name}[{position}] is a {type(item).__name__}; each forward must be a Trace or a path")
        return side
    raise TypeError(f"{name} must be {_ACCEPTS}; got {type(side).__name__}")


def check_side(side: Any, name: str, also: str = "") -> None:
    """TypeError naming ``name`` and what it accepts when ``side`` cannot be a side of a comparison."""
    if isinstance(side, (Trace, str, os.PathLike, list, tuple)) or holds_several(side):
        return
    raise TypeError(f"compare: {name} is {_kind(side)}; it accepts {_ACCEPTS}{also}")


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    shape = getattr(value, "shape", None)
    shown = f" of shape {tuple(shape)}" if shape is not None else f" ({value!r})" if isinstance(value, (int, float)) else ""
    return f"a {type(value).__name__}{shown}"


def _load(source: Any) -> Trace:
    return source if isinstance(source, Trace) else load_trace(source)


def compare_steps(a: Any, b: Any, *, check_cache: bool = True, **options: Any) -> StepsComparison:
    """Compare two runs of several forwards step by step (see the module docstring); always a StepsComparison.
    ``first_divergence.step`` is the index of the first forward that diverges and ``.module_path`` the module
    inside it; ``check_cache`` compares each step's KV cache update too (a cache one layer forgets to update is
    named in the step it happens, not one step later); ``options`` (rename, rtol, atol, ignore) apply to each
    pair of forwards."""
    sources_a, sources_b = step_sources(a, "a"), step_sources(b, "b")

    def compare_one(trace_a: Trace, trace_b: Trace) -> Comparison:
        return compare_forward(trace_a, trace_b, **options)

    result = StepsComparison(sources_a, sources_b, _load, compare_one)
    pairs = min(result.counts)
    previous: tuple[CacheFacts | None, CacheFacts | None] = (None, None)
    for step in range(pairs):
        trace_a, trace_b = _load(sources_a[step]), _load(sources_b[step])
        if result.steps:
            _fill_tokens(result.steps[-1], trace_a, trace_b)
            _note_tokens(result, result.steps[-1])
        comparison = compare_one(trace_a, trace_b)
        report = _step_result(step, trace_a, trace_b, comparison, check_cache)
        result.steps.append(report)
        if result.first_divergence is None and report.diverged:
            report.status = "first"
            result.first_divergence = _divergence(step, comparison, report, trace_a, trace_b)
            result.keep(step, comparison)
        current = (cache_facts(trace_a), cache_facts(trace_b))
        _note_restart(result, step, previous, current)
        previous = current
        del comparison, trace_a, trace_b
    if result.steps:
        _note_tokens(result, result.steps[-1])
    _note_counts(result)
    return result


def _step_result(step: int, a: Trace, b: Trace, comparison: Comparison, check_cache: bool) -> StepResult:
    facts = (cache_facts(a), cache_facts(b))
    tokens = (picked_tokens(a), picked_tokens(b))
    report = StepResult(
        step=step,
        status="match" if comparison.agree else "no_data",
        input_length=(input_length(a), input_length(b)),
        past_length=tuple(max(f.past) if f is not None and f.past else None for f in facts),  # type: ignore[arg-type]
        tokens=tokens,
        token_source=tuple("logits" if t is not None else None for t in tokens),  # type: ignore[arg-type]
        margins=(token_margins(a), token_margins(b)),
    )
    found = cache_difference(*facts) if check_cache and facts[0] is not None and facts[1] is not None else None
    first = comparison.first_divergence
    if found is not None and (first is None or found[2]):  # beside a diverging trace: only a missed update
        report.cache_layer, report.cache = found[0], found[1]
    else:
        found = None
    if first is not None:
        report.status = "diverged"
        report.module_path, report.reason, report.exact = first.module_path, first.reason, first.exact
        inherited = first.node.parent is None and first.io == "input"
        report.kind = "inputs" if inherited else "trace"
        if inherited and step > 0:
            report.reason = "it was fed other inputs than a (an earlier step picked another token, or ran differently)"
    elif found is not None:
        report.status, report.kind, report.reason, report.exact = "diverged", "cache", report.cache, True
        report.module_path = cache_user(a, found[0]) or a.model_name
    return report


def _divergence(step: int, comparison: Comparison, report: StepResult, a: Trace, b: Trace):
    first = comparison.first_divergence
    if first is None:
        layer = report.cache_layer or 0
        return CacheDivergence(step, layer, report.module_path or a.model_name, cache_user(b, layer), report.reason or "")
    return dataclasses.replace(first, step=step)


def _fill_tokens(previous: StepResult, a: Trace, b: Trace) -> None:
    """Where the previous step's picked tokens are unknown, take the tokens this step was fed."""
    tokens, sources = list(previous.tokens), list(previous.token_source)
    for side, trace in enumerate((a, b)):
        if tokens[side] is None:
            tokens[side] = fed_tokens(trace)
            sources[side] = "next input" if tokens[side] is not None else None
    previous.tokens = (tokens[0], tokens[1])
    previous.token_source = (sources[0], sources[1])


def _note_tokens(result: StepsComparison, step: StepResult) -> None:
    if result.first_token_step is None and step.tokens_differ:
        result.first_token_step = step.step


def _note_restart(
    result: StepsComparison,
    step: int,
    previous: tuple[CacheFacts | None, CacheFacts | None],
    current: tuple[CacheFacts | None, CacheFacts | None],
) -> None:
    """Note a forward whose KV cache starts empty again after one that was not: a second ``generate`` call."""
    for side, (before, now) in enumerate(zip(previous, current)):
        if before and now and max(before.length, default=0) > 0 and max(now.past, default=1) == 0:
            result.notes.append(
                f"{'ab'[side]}'s forward {step} starts with an empty KV cache: a new sequence (a second generate "
                "call in the same traced block?); forwards still pair by order"
            )


def _note_counts(result: StepsComparison) -> None:
    count_a, count_b = result.counts
    if count_a != count_b:
        shorter = "b" if count_b < count_a else "a"
        result.notes.insert(
            0,
            f"a has {count_a} forwards, b has {count_b}: only the first {min(count_a, count_b)} are compared "
            f"({shorter} stopped early: an end-of-sequence token, another max_new_tokens, or an error?)",
        )
