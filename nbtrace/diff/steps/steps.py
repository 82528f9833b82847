"""The comparison of two runs of several forwards (``generate``), step by step: ``StepsComparison``.

``compare(a, b)`` returns one when either side holds several forwards (``step_compare.py``
computes it). Forwards pair up in order; each pair is compared as a single forward is
(``compare`` of two Traces), so everything a single comparison tells applies per step.
Only small per-step results are kept; the Comparison of a step is rebuilt on demand
(``comparison(step)``), except the first diverging step's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cache_check import CacheDivergence
from ..verdict.divergence import FirstDivergence

if TYPE_CHECKING:  # pragma: no cover
    import pandas

    from ...core.trace import Trace
    from ..comparison import Comparison

#: where a run first diverges: in a step's trace (a FirstDivergence with its ``step``), or in its KV cache
StepDivergence = FirstDivergence | CacheDivergence

Tokens = tuple[int, ...] | None


@dataclass
class StepResult:
    """One step of the two runs, side by side.

    ``status`` is one of ``diff.verdict.report.STATUSES``: "match", "first" (the run's first
    divergence), "diverged" or "no_data" (nothing could be compared). Pairs are (a, b):
    ``input_length`` (positions fed), ``past_length`` (positions in the KV cache before the
    step), ``tokens`` (the token each sequence picked; None when the traces cannot tell) and
    ``token_source`` ("logits", or "next input": the token the next step was fed).
    ``module_path`` is where the step diverges (a's naming), ``kind`` how it was seen:
    "trace" (its tensors), "cache" (its KV cache update) or "inputs" (it was fed other
    inputs: an earlier step's doing); ``cache_layer`` the KV cache layer of a "cache" divergence;
    ``margins`` how far each picked token's logit was above the runner-up's (from the sidecar);
    ``cache`` what differs in the step's KV cache update, if anything.
    """

    step: int
    status: str
    input_length: tuple[int | None, int | None]
    past_length: tuple[int | None, int | None]
    tokens: tuple[Tokens, Tokens]
    token_source: tuple[str | None, str | None]
    module_path: str | None = None
    reason: str | None = None
    exact: bool | None = None
    kind: str | None = None
    cache_layer: int | None = None
    margins: tuple[tuple[float, ...] | None, tuple[float, ...] | None] = (None, None)
    cache: str | None = None

    @property
    def tokens_differ(self) -> bool | None:
        """True when both sides' tokens are known and differ; None when one is unknown."""
        a, b = self.tokens
        return None if a is None or b is None else a != b

    @property
    def diverged(self) -> bool:
        return self.status in ("first", "diverged")


class StepsComparison:
    """Run ``b`` against the reference run ``a``, step by step; see ``nbtrace.compare``.

    ``steps`` holds a StepResult per paired step; ``counts`` the number of forwards on each
    side; ``first_divergence`` is None or where the runs part ways, with ``.step`` (the
    forward) and ``.module_path`` (a's naming); ``first_token_step`` the first step whose
    picked tokens differ (what a user of the model sees); ``notes`` what else is worth
    knowing (counts that differ, a KV cache that starts over).
    """

    def __init__(
        self,
        sources_a: Sequence[Any],
        sources_b: Sequence[Any],
        load: Callable[[Any], Trace],
        compare_one: Callable[[Trace, Trace], Comparison],
    ) -> None:
        self.sources_a = sources_a
        self.sources_b = sources_b
        self.counts = (len(sources_a), len(sources_b))
        self.steps: list[StepResult] = []
        self.first_divergence: StepDivergence | None = None
        self.first_token_step: int | None = None
        self.notes: list[str] = []
        self._load = load
        self._compare_one = compare_one
        self._kept: dict[int, Comparison] = {}

    # -- the verdict -----------------------------------------------------------------
    @property
    def count_mismatch(self) -> bool:
        return self.counts[0] != self.counts[1]

    @property
    def agree(self) -> bool:
        """Same number of forwards, every step compared and within tolerance, the same tokens picked."""
        return (
            bool(self.steps)
            and not self.count_mismatch
            and self.first_token_step is None
            and all(step.status == "match" for step in self.steps)
        )

    @property
    def verdict(self) -> str:
        """``"diverge"`` (a step diverges, the picked tokens or the number of forwards differ), ``"agree"``, or
        ``"unresolved"`` (a step nothing could decide)."""
        from ..verdict.as_dict import steps_verdict

        return steps_verdict(self)

    @property
    def first_step(self) -> int | None:
        """The index of the first diverging step, or None."""
        return self.first_divergence.step if self.first_divergence is not None else None

    def __len__(self) -> int:
        """How many steps were paired and compared."""
        return len(self.steps)

    def __getitem__(self, step: int) -> StepResult:
        return self.steps[step]

    # -- one step in full ------------------------------------------------------------
    def comparison(self, step: int) -> Comparison:
        """The full comparison of step ``step`` (its two traces read again unless kept)."""
        if not 0 <= step < len(self.steps):
            raise IndexError(f"step {step} is out of range: the runs have {len(self.steps)} paired steps")
        kept = self._kept.get(step)
        if kept is None:
            kept = self._compare_one(self._load(self.sources_a[step]), self._load(self.sources_b[step]))
            self._kept = {k: v for k, v in self._kept.items() if k == self.first_step}
            self._kept[step] = kept
        return kept

    def keep(self, step: int, comparison: Comparison) -> None:
        """Hold on to a step's Comparison (the first diverging step's, while comparing)."""
        self._kept[step] = comparison

    # -- views -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The verdict as plain data, step by step (``Comparison.to_dict``'s layout, with ``steps``)."""
        from ..verdict.as_dict import steps_dict

        return steps_dict(self)

    def summary(self) -> str:
        """A few lines for a terminal: steps, tokens, the first diverging step and module, and why."""
        from ...render.steps_text import steps_summary

        return steps_summary(self)

    def to_dataframe(self) -> pandas.DataFrame:
        """One row per paired step: step, input length, tokens, status, module, reason."""
        from ...render.steps_frame import steps_frame

        return steps_frame(self)

    def _repr_html_(self) -> str:
        from ...render.steps_html import steps_html

        return steps_html(self)

    def __repr__(self) -> str:
        verdict = "agree" if self.agree else "diverge" if self.first_divergence is not None else "differ"
        where = ""
        if self.first_divergence is not None:
            where = f" at step {self.first_divergence.step}: {self.first_divergence.module_path}"
        elif self.first_token_step is not None:
            where = f" (tokens from step {self.first_token_step})"
        return f"<StepsComparison of {self.counts[0]} and {self.counts[1]} forwards: {verdict}{where}>"
