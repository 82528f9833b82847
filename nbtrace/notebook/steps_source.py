"""What TraceView shows for several forwards (``generate``): one step at a time, and a line of facts per step.

A run (a folder of forwards, a list of Traces or paths, a Recorder) or a StepsComparison
becomes a ``StepSource``: ``count`` steps, ``get(step)`` the Trace (and, for a
comparison, its node report and Comparison) of one step, read when it is first shown and
kept for the last few, and ``facts()`` the picker's per-step facts, read from the
sidecars alone, so a long run opens as fast as a short one.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core.forwards import forwards_with_sidecars
from ..core.generation import GENERATION_SECTION
from ..core.load import load_trace
from ..core.ranks import rank_folders
from ..core.sidecar import read_sidecar
from ..core.trace import Trace
from ..diff.steps.step_compare import holds_several, step_sources
from ..diff.steps.steps import StepsComparison
from ..render.steps_text import format_tokens, step_where
from ..render.vocabulary import STATUS_WORDS

KEEP = 4  # steps whose Trace (and payload) stay in memory while others are shown


def is_several(source: object) -> bool:
    """True for what TraceView shows with a step picker."""
    return isinstance(source, StepsComparison) or holds_several(source)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class StepSource:
    """The steps of a run or of a step-by-step comparison (see the module docstring)."""

    def __init__(self, source: Any) -> None:
        self.comparison = source if isinstance(source, StepsComparison) else None
        self._facts: tuple[list[int | None], list[str]] | None = None
        if isinstance(source, (str, os.PathLike)) and not rank_folders(source):  # one pass; only the facts are kept
            found = forwards_with_sidecars(source)
            self._items: Sequence[Any] = [file for file, _ in found]
            self._facts = _run_facts(sidecar for _, sidecar in found)
        else:
            self._items = [] if self.comparison is not None else step_sources(source, "source")
        self.count = len(self.comparison) if self.comparison is not None else len(self._items)
        if self.count == 0:
            raise ValueError("TraceView needs at least one forward; this run holds none")
        self._cache: OrderedDict[int, tuple[Trace, list[dict[str, Any]] | None, Any]] = OrderedDict()

    def check(self, step: int) -> int:
        if not 0 <= step < self.count:
            raise IndexError(f"step {step} is out of range: this run has {self.count} step(s), 0…{self.count - 1}")
        return step

    def initial_step(self) -> int:
        """Where the view opens: a comparison's first diverging step (else the first token difference), else 0."""
        if self.comparison is not None:
            for step in (self.comparison.first_step, self.comparison.first_token_step):
                if step is not None and step < self.count:
                    return step
        return 0

    def get(self, step: int) -> tuple[Trace, list[dict[str, Any]] | None, Any]:
        """The Trace of ``step`` and, for a comparison, its node report and Comparison."""
        self.check(step)
        if step in self._cache:
            self._cache.move_to_end(step)
            return self._cache[step]
        if self.comparison is not None:
            comparison = self.comparison.comparison(step)
            report = comparison.node_report()
            result = self.comparison.steps[step]
            if result.kind == "cache" and result.module_path:  # the tensors agree: the cache's user is to blame
                _mark(comparison.a, report, result.module_path, "first" if result.status == "first" else "diverged")
            entry: tuple[Trace, list[dict[str, Any]] | None, Any] = (comparison.a, report, comparison)
        else:
            item = self._items[step]
            entry = (item if isinstance(item, Trace) else load_trace(item), None, None)
        self._cache[step] = entry
        while len(self._cache) > KEEP:
            self._cache.popitem(last=False)
        return entry

    def divergence(self, trace: Trace) -> Any:
        """The run's first divergence when ``trace`` is the step it was found in (else None)."""
        first = self.comparison.first_divergence if self.comparison is not None else None
        if first is None or first.step not in self._cache or self._cache[first.step][0] is not trace:
            return None
        return first

    # -- the picker's facts ---------------------------------------------------------------
    def facts(self) -> dict[str, Any]:
        """Per step: input length, picked token(s), and for a comparison the status and where it diverges."""
        if self.comparison is not None:
            steps = self.comparison.steps
            return {
                "n": self.count,
                "first": self.comparison.first_step if self.comparison.first_step is not None else -1,
                "input": [s.input_length[0] for s in steps],
                "token": [format_tokens(s.tokens[0]) if s.tokens[0] is not None else "" for s in steps],
                "b_token": [format_tokens(s.tokens[1]) if s.tokens[1] is not None else "" for s in steps],
                "status": [s.status for s in steps],
                "where": [step_where(s) for s in steps],
                "words": STATUS_WORDS,
            }
        if self._facts is None:
            self._facts = _run_facts(self._sidecars())
        inputs, tokens = self._facts
        return {"n": self.count, "first": -1, "input": inputs, "token": tokens, "b_token": None, "status": None,
                "where": None, "words": STATUS_WORDS}

    def _sidecars(self) -> Iterator[dict[str, Any]]:
        """Each step's sidecar sections, from its file where it has one (a Recorder's earlier steps included)."""
        files = self._items.sources() if hasattr(self._items, "sources") else list(self._items)
        for step, item in enumerate(files):
            if isinstance(item, (str, os.PathLike)):
                try:
                    yield read_sidecar(Path(item))
                except Exception:  # noqa: BLE001 - no facts for a step it cannot read; showing it says why
                    yield {}
            else:
                trace = item if isinstance(item, Trace) else self._items[step]
                yield trace.sidecar


def _run_facts(sidecars: Iterable[dict[str, Any]]) -> tuple[list[int | None], list[str]]:
    """The input length and picked token(s) of each step, from its ``generation`` section."""
    inputs: list[int | None] = []
    tokens: list[str] = []
    for sidecar in sidecars:
        section = sidecar.get(GENERATION_SECTION)
        section = section if isinstance(section, dict) else {}
        inputs.append(_int(section.get("input_length")))
        picked = section.get("tokens")
        tokens.append(",".join(str(t) for t in picked) if isinstance(picked, list) else "")
    return inputs, tokens


def _mark(trace: Trace, report: list[dict[str, Any]], module_path: str, status: str) -> None:
    """Give ``module_path``'s first call ``status`` in a node report, and its ancestors "diverged"."""
    node = trace.get(module_path)
    if node is None:
        return
    report[node.index]["status"] = status
    for up in node.ancestors():
        if report[up.index]["status"] in ("match", "no_data"):
            report[up.index]["status"] = "diverged"
