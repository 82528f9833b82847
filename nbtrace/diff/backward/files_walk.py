"""The backward verdict from the runs' recorded gradients alone, where no float64 twin ran (``verdict.py``,
rule 3 without twins).

Each recorded gradient is compared by the rule the files use for recorded tensors (``measure.metrics.diff_tensors``:
the dtype's tolerance on printed values, stats or full tensors). That rule measures nothing of how rounding grows
through a backward: a parameter's gradient sums over every token, and a correct bf16 sdpa port's ``v_proj`` weight
gradient already differs by 1.7% from eager's (beyond bf16's tolerance), while a wrong backward in a layer pruning
left out of the files shows nowhere but in its neighbours. So the files alone never name a module: they say
"agree" where every recorded gradient is within the tolerance, and otherwise "unresolved", with the first call
whose sent gradient differs while what reached it agrees as the suspect, and the advice to record the twin
(``measure_rounding`` on, the default), which decides.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ...core.ranks import call_key
from ..measure.metrics import diff_tensors
from .verdict import BackwardVerdict, _pairs

if TYPE_CHECKING:  # pragma: no cover
    from ...core.gradients import Backward
    from ..comparison import Comparison


def _side(pairs: list, io: str, comparison: Comparison) -> tuple[float | None, list[str]]:
    worst: float | None = None
    differ = []
    for place, (x, y) in pairs:
        diff = diff_tensors(io, place, place, x, y, comparison.rtol, comparison.atol)
        if diff.ok is None:
            continue
        score = diff.score if diff.score is not None else (0.0 if diff.ok else math.inf)
        worst = score if worst is None else max(worst, score)
        if diff.ok is False:
            differ.append(f"{io}.{place}")
    return worst, differ


def files_verdict(comparison: Comparison, a: Backward, b: Backward) -> BackwardVerdict:
    """Walk a's recorded calls in backward order on the runs' own gradients (see the module docstring)."""
    grads_a, grads_b = a.trace.nodes(), b.trace.nodes()
    calls: list[tuple[str, float | None, float | None]] = []
    differs = False
    suspect: str | None = None
    for match in reversed(comparison.matches):
        if match.a is None or match.b is None or match.b.index >= len(grads_b) or match.a.index >= len(grads_a):
            continue
        node_a, node_b = grads_a[match.a.index], grads_b[match.b.index]
        name = call_key(node_a.module_path, node_a.call_index)
        arrived, arrived_differ = _side(_pairs(node_a.outputs, node_b.outputs), "outputs", comparison)
        sent_in, inputs_differ = _side(_pairs(node_a.inputs, node_b.inputs), "inputs", comparison)
        own_a = a.last.module_parameters(node_a.module_path)
        own_b = b.last.module_parameters(node_b.module_path)
        sent_par, params_differ = _side([(k, (v, own_b[k])) for k, v in own_a.items() if k in own_b], "param",
                                        comparison)
        sent = max((s for s in (sent_in, sent_par) if s is not None), default=None)
        calls.append((name, arrived, sent))
        differs = differs or bool(arrived_differ or inputs_differ or params_differ)
        if suspect is None and arrived is not None and not arrived_differ and (inputs_differ or params_differ):
            suspect = node_a.module_path
    if differs:
        where = f" (first suspect in backward order: {suspect})" if suspect is not None else ""
        verdict = BackwardVerdict("unresolved", "files", "the recorded gradients differ beyond the dtype's tolerance"
                                  f"{where}, and the files alone cannot tell a backward's rounding from a wrong one: "
                                  "record the float64 twin's backward (measure_rounding on, the default) to decide",
                                  None, calls)
        verdict.suspect = suspect
        return verdict
    return BackwardVerdict("agree", "files", "the recorded gradients agree within the dtype's tolerance at every "
                           "compared call (no float64 twin recorded)", None, calls)
