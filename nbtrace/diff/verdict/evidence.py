"""What a comparison found, in the words every view shows: the evidence for a verdict, call by call.

The contract between the verdict (``divergence.py`` and the tests that judge a difference)
and the views (text, HTML, the table, the widget, ``nbtrace diff``): they read these
objects and compute nothing of their own, so every view shows the same verdict and the
same numbers for the same comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Comparison.verdict: the traces agree (within what the dtype resolves), a difference is born
#: somewhere, or too little could be aligned or compared to say either (a loud state of its own).
VERDICTS = ("agree", "diverge", "unresolved")
#: FirstDivergence.confidence: "certain" (a test scores >= 3), "likely" (>= 1).
CONFIDENCES = ("certain", "likely")


@dataclass
class Evidence:
    """One test's numbers for one call: what was measured, against what, and what it means.

    ``score`` is ``statistic / threshold``: a difference counts as born at the call when a
    score reaches 1. ``source`` is where the numbers come from: ``"files"`` (the two traces),
    ``"replay"`` (the port run on the reference's inputs) or ``"weights"`` (fingerprints).
    """

    test: str
    statistic: float
    threshold: float
    score: float
    sentence: str
    source: str = "files"


@dataclass
class CallDifference:
    """How one aligned call differs: what it added and what it inherited, in units of the dtype's rounding.

    ``out`` is the relative RMS difference of its outputs, ``inherited`` that of the inputs it
    could read (the largest), ``own`` the part its own code added (``√(out² − inherited²)``: what
    is left when the inherited difference is passed on as it came; replayed: the whole of ``out``,
    nothing being inherited), all in units of ``unit`` (the unit roundoff of the dtype compared). ``score`` is its
    best test's score (None when nothing was measured); ``evidence`` every test's numbers.
    """

    unit: float
    out: float | None = None
    inherited: float | None = None
    own: float | None = None
    score: float | None = None
    evidence: list[Evidence] = field(default_factory=list)
    replayed: bool = False
