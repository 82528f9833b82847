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
from ..measure.rounding import SUSPECT


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
        return max((e.score for e in self.evidence), default=0.0)

    @property
    def flagged(self) -> bool:
        return self.score >= 1.0

    def top(self) -> Evidence | None:
        return max(self.evidence, key=lambda e: e.score) if self.evidence else None


@dataclass
class Verdict:
    """One method's answer: ``state`` is "diverge" (``finding`` is where it is born), "rounding" (outputs differ,
    all of it explained by rounding), "equal" (bit for bit) or "nothing" (nothing comparable)."""

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
