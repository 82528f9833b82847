"""Precision findings: where the port computes the same function as the reference but its run lost what the
reference's kept. A finding of its own kind, beside the verdict, never turning "agree" into "diverge".

Only a measured rule that no correct kernel breaks names one. Rounding more than the reference at a call is not
such a rule: measured on a CPU, a bf16 RMSNorm without its float32 upcast rounds about 1.3 times what the
reference's does at its call, and eager attention 4 to 5 times what sdpa does, so a factor either way is a
kernel's choice, not a finding. What no correct kernel produces: a NaN or an infinity the reference does not
have (float16 overflowing in ``x.pow(2)``). The first call of the port whose outputs hold one while its
inputs hold none, and whose counterpart in the reference is finite, is named (``rule == "non-finite"``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison


@dataclass(frozen=True)
class PrecisionFinding:
    """A call where the port's run lost precision the reference kept: ``module_path`` in a's naming."""

    module_path: str
    b_path: str
    rule: str
    sentence: str


def precision_findings(comparison: Comparison) -> list[PrecisionFinding]:
    """The precision findings of a comparison (at most the first of each rule)."""
    for match in comparison.matches:
        outputs_b = [t for io, _, t in match.b.tensors() if io == "output"]
        if not any(t.nonfinite for t in outputs_b):
            continue
        if any(t.nonfinite for io, _, t in match.a.tensors() if io == "output"):
            continue
        if any(t.has_nan for io, _, t in match.b.tensors() if io == "input"):
            continue
        if not outputs_b or any(io == "input" and t.nonfinite and t.has_nan for io, _, t in match.b.tensors()):
            continue
        sentence = (f"the port's run produced a NaN or an infinity in {match.b.module_path}'s output where the "
                    "reference's stays finite and the port was handed none: its dtype overflowed (a computation "
                    "the reference does in a wider dtype, such as x.pow(2) in float16)")
        return [PrecisionFinding(match.a.module_path, match.b.module_path, "non-finite", sentence)]
    return []
