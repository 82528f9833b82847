"""What the verdicts find, before it becomes the public objects (``FirstDivergence``, ``CallDifference``).

A ``Finding`` judges one piece of a's code (a call, its own code, the code after it) on one
tensor it made; a ``Verdict`` is the answer of one method (``"files"``: the two traces;
``"replay"``: the port run on the reference's inputs): the first flagged finding, or why
there is none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...core.node import Node
from .evidence import Evidence
from ..align.flow import Producer, Slot
from ..measure.noise import DiffStats
from ..measure.rounding import DECISIVE, SUSPECT


@dataclass(eq=False)
class Finding:
    """One call of a (``node``) judged on one tensor: how far from rounding, and the numbers that show it.

    ``stats`` is the difference of the tensor it made, ``inherited`` the relative difference of the
    tensors it could read (0 when replayed: nothing is inherited), ``evidence`` every test.
    """

    node: Node
    stats: DiffStats
    inherited: float
    evidence: list[Evidence] = field(default_factory=list)
    producer: Producer | None = None
    slot: Slot | None = None  # the tensor of a it was seen in (files)
    note: str = ""
    own: float | None = None  # the difference its own code added, relative (None: not separable)

    @property
    def score(self) -> float:
        """The best score of a decisive test (one whose flag proves a difference of function)."""
        return max((e.score for e in self.evidence if e.test in DECISIVE), default=0.0)

    @property
    def open(self) -> float:
        """The best score of a test that is not decisive (a model of rounding, files without measurements)."""
        return max((e.score for e in self.evidence if e.test not in DECISIVE), default=0.0)

    @property
    def flagged(self) -> bool:
        return self.score >= 1.0

    @property
    def unresolved(self) -> bool:
        """Beyond what a model of rounding allows, yet proven by nothing: replay or measured rounding decides."""
        return not self.flagged and self.open >= 1.0

    def top(self) -> Evidence | None:
        decisive = [e for e in self.evidence if e.test in DECISIVE] or self.evidence
        return max(decisive, key=lambda e: e.score) if decisive else None


@dataclass
class Verdict:
    """One method's answer: ``state`` is "diverge" (``finding`` is where it is born), "unresolved" (``finding``:
    the first call that differs beyond a model of rounding, nothing measured proves it), "rounding" (outputs
    differ within measured rounding), "equal" (bit for bit) or "nothing" (nothing comparable)."""

    method: str
    state: str
    finding: Finding | None = None
    reason: str = ""
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def suspects(self) -> list[Finding]:
        """Findings that came close to a flag (score >= SUSPECT), before the first divergence if there is one."""
        close = []
        for finding in self.findings:
            if finding is self.finding:
                break
            if SUSPECT <= finding.score < 1.0:
                close.append(finding)
        return sorted(close, key=lambda f: -f.score)
