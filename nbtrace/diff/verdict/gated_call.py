"""A gated feed-forward's product, judged from two folders without a twin: ``f(a) ⊙ b`` in a call's own code.

A gated MLP (Llama's, litgpt's ``LLaMAMLP``) multiplies two of its children's outputs in its own code, one of them
through an activation (``silu(fc_1(x)) * fc_2(x)``; transformers applies the activation in a leaf of its own, leaving
a plain product). It is read from what the files show: the glue of a call that reads two of its children's outputs
``a`` and ``b`` of its result's shape, where the reference's result is ``f(a)·b`` for one of ``bounds.py``'s
elementwise functions (the identity included) within a correct kernel's rounding. The port's result is then held
against the same function of the port's own ``a`` and ``b``: beyond a correct kernel's rounding of it
(``(3u|f(a)| + 2uL|a|)|b| + 2u|y|`` per element: the function's own roundings, the product's and a cast's), no
correct implementation of that product made it (another activation, a product taken otherwise).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.dtypes import is_float
from ..measure import bounds
from ..measure.noise import unit_roundoff
from .attention_call import _load
from .evidence import Evidence

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..align.flow import Producer, Slot
    from .files_verdict import FileVerdict


def _rounding(f_a: torch.Tensor, a: torch.Tensor, b: torch.Tensor, y: torch.Tensor, u: float,
              slope: float) -> torch.Tensor:
    return (3 * u * f_a.abs() + 2 * u * slope * a.abs()) * b.abs() + 2 * u * y.abs()


def gated_evidence(judge: FileVerdict, producer: Producer, slot: Slot, what: str) -> Evidence | None:
    """The ``bound`` test of a gated product a call's own code made (None: the files do not show one plainly)."""
    if producer.kind != "glue" or not is_float(slot.tensor.dtype) or len(slot.tensor.shape) < 2:
        return None
    made = [s for s in producer.inputs if is_float(s.tensor.dtype) and s.io == "output"
            and s.node.parent is producer.node and tuple(s.tensor.shape) == tuple(slot.tensor.shape)]
    if len(made) != 2:
        return None
    mine = [_load(judge, s, "a") for s in made]
    theirs = [_load(judge, s, "b") for s in made]
    y_a, y_b = _load(judge, slot, "a"), _load(judge, slot, "b")
    if any(t is None for t in (*mine, *theirs, y_a, y_b)) or not all(
            bool(t.isfinite().all()) for t in (*mine, *theirs, y_a, y_b)):
        return None
    u = max(unit_roundoff(slot.tensor.dtype), *(unit_roundoff(s.tensor.dtype) for s in made))
    functions, slopes = bounds._functions(), bounds.slopes()
    for gate in (0, 1):
        a_a, b_a = mine[gate], mine[1 - gate]
        for name, f in functions.items():
            f_a = f(a_a)
            own = _rounding(f_a, a_a, b_a, y_a, u, slopes[name])
            if bounds._norm(y_a - f_a * b_a) > bounds._norm(own) or float(y_a.abs().max()) == 0:
                continue
            a_b, b_b = theirs[gate], theirs[1 - gate]
            f_b = f(a_b)
            difference = bounds._norm(y_b - f_b * b_b)
            allowed = bounds._norm(_rounding(f_b, a_b, b_b, y_b, u, slopes[name]))
            score = difference / allowed if allowed > 0 else (float("inf") if difference > 0 else 0.0)
            sentence = (f"{what} differ from the reference's gated product ({name}(a)·b of "
                        f"{made[gate].node.module_path} and {made[1 - gate].node.module_path}) of the port's own a and "
                        f"b by {difference:.3g} (2-norm), where a correct kernel rounds by at most {allowed:.3g} "
                        "((3u|f(a)| + 2uL|a|)|b| + 2u|y|); the reference's result is that product within its rounding")
            return Evidence("bound", difference, allowed, score, sentence)
    return None
