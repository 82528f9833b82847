"""An attention's core, judged from two folders without a twin: the code between its projections, made plain.

The core of an attention (rotary, ``q·kᵀ/√d``, mask, softmax, the sum of values) is a call's own code between its
children, which no module holds. It is read from what the files show: the glue of a call that reads three of its
children's outputs ``q`` (as wide as the result), ``k`` and ``v`` (as wide as each other, dividing it), and makes a
tensor of ``q``'s shape; the rotary tables are two float tensors ``[…, S, d]`` it reads, the mask a ``[…, S, S]``
one. The reference's result must be ``measure/attention_bound.attention`` of its inputs within a correct kernel's
rounding (``rounding``), else nothing is claimed. Then the port's result is held against the same function of the
port's own inputs: beyond a correct kernel's rounding, no correct attention made it (a scaling, a softmax, a mask
or a rotary applied otherwise). Only where the port's ``q``, ``k`` and ``v`` agree with the reference's (``AGREE``):
the same function of other layouts is not this one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...core.dtypes import is_float
from ..measure import attention_bound
from ..measure.bounds import TF32
from ..measure.noise import unit_roundoff
from .evidence import Evidence
from .operation import b_values

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..align.flow import Producer, Slot
    from .files_verdict import FileVerdict

HEAD_SIZES = (64, 128, 32, 80, 96, 256, 16)  # tried in order where no rotary table gives the head size
#: q, k and v are judged as the same inputs only within this relative difference of the reference's: a port whose
#: projections lay heads out otherwise (rows permuted for an interleaved rotary) differs by about √2
AGREE = 0.1


def attention_evidence(judge: FileVerdict, producer: Producer, slot: Slot, what: str) -> Evidence | None:
    """The ``bound`` test of an attention core's result (None: the files do not show one plainly)."""
    if producer.kind != "glue" or len(slot.tensor.shape) != 3 or not is_float(slot.tensor.dtype):
        return None
    batch, length, width = slot.tensor.shape
    floats = [s for s in producer.inputs if is_float(s.tensor.dtype)]
    made = [s for s in floats if s.io == "output" and s.node.parent is producer.node
            and tuple(s.tensor.shape[:2]) == (batch, length) and len(s.tensor.shape) == 3]
    q_at = next((i for i, s in enumerate(made) if s.tensor.shape[-1] == width), None)
    if q_at is None or len(made) < q_at + 3:
        return None
    q, k, v = made[q_at:q_at + 3]
    kv = k.tensor.shape[-1]
    if v.tensor.shape[-1] != kv or width % kv:
        return None
    tables = [s for s in floats if len(s.tensor.shape) == 3 and s.tensor.shape[-2] == length
              and s.tensor.shape[0] in (1, batch) and s not in (q, k, v) and kv % s.tensor.shape[-1] == 0]
    masks = [s for s in producer.inputs if len(s.tensor.shape) == 4 and tuple(s.tensor.shape[-2:]) == (length, length)]
    mine = {name: _load(judge, s, "a") for name, s in (("q", q), ("k", k), ("v", v))}
    theirs = {name: _load(judge, s, "b") for name, s in (("q", q), ("k", k), ("v", v))}
    if any(t is None for t in (*mine.values(), *theirs.values())):
        return None
    if any(_norm(theirs[n] - mine[n], judge.valid) > AGREE * _norm(mine[n], judge.valid) for n in mine):
        return None  # q, k, v laid out otherwise (an interleaved rotary's permuted heads): not the same inputs
    cos = sin = None
    if len(tables) >= 2 and tables[0].tensor.shape == tables[1].tensor.shape:
        cos, sin = _load(judge, tables[0], "a"), _load(judge, tables[1], "a")
    mask = _load(judge, masks[0], "a", raw=True) if masks else None
    y_a, y_b = _load(judge, slot, "a"), _load(judge, slot, "b")
    if y_a is None or y_b is None or (cos is None) != (sin is None):
        return None
    u = unit_roundoff(slot.tensor.dtype, q.tensor.dtype)
    u_op = TF32 if u == unit_roundoff("float32") and _tf32_possible(judge) else u
    sizes = (cos.shape[-1],) if cos is not None else tuple(d for d in HEAD_SIZES if kv % d == 0)
    for d in sizes:
        exact_a, _ = attention_bound.attention(mine["q"], mine["k"], mine["v"], d, cos, sin, mask)
        own_a = attention_bound.rounding(mine["q"], mine["k"], mine["v"], exact_a, d, u, u_op, judge.valid)
        if _norm(y_a - exact_a, judge.valid) > own_a:
            continue
        exact_b, _ = attention_bound.attention(theirs["q"], theirs["k"], theirs["v"], d, cos, sin, mask)
        own_b = attention_bound.rounding(theirs["q"], theirs["k"], theirs["v"], exact_b, d, u, u_op, judge.valid)
        difference = _norm(y_b - exact_b, judge.valid)
        score = difference / own_b if own_b > 0 else (float("inf") if difference > 0 else 0.0)
        sentence = (f"{what} differ from the reference's attention (heads of {d}, softmax(q·kᵀ/√{d} + mask)·v"
                    f"{', rotary' if cos is not None else ''}) of the port's own q, k, v by {difference:.3g} (2-norm), "
                    f"where a correct kernel rounds by at most {own_b:.3g}; the reference's result is that function "
                    f"of its inputs within its rounding")
        return Evidence("bound", difference, own_b, score, sentence)
    return None


def _load(judge: FileVerdict, slot: Slot, side: str, raw: bool = False) -> Any:
    """One side's values of a's tensor ``slot`` (b: its counterpart), float64 unless ``raw`` (a boolean mask)."""
    import torch

    if side == "a":
        tensor, cache = slot.source.tensor, judge.flow_a.cache
    else:
        place, diff = judge.place(slot)
        tensor = b_values(judge, place) if diff is not None else None
        cache = judge.flow_b.cache
        if tensor is None or tuple(tensor.shape) != tuple(slot.tensor.shape):
            return None
    values = cache.load(tensor)
    if values is None or values.is_complex():
        return None
    if raw and values.dtype == torch.bool:
        return values
    return values.detach().to(torch.float64)


def _norm(x: torch.Tensor, rows: torch.Tensor | None) -> float:
    per = x.square().sum(-1)
    if rows is not None and tuple(rows.shape) == tuple(per.shape):
        per = per[rows]
    return float(per.sum().sqrt())


def _tf32_possible(judge: FileVerdict) -> bool:
    """Whether either side's float32 matrix products may have run on TF32 (unknown where not recorded)."""
    for trace in (judge.flow_a.trace, judge.flow_b.trace):
        numerics = getattr(trace, "numerics", None) or {}
        if not numerics or numerics.get("matmul_tf32") or numerics.get("float32_matmul_precision", "highest") != \
                "highest":
            return True
    return False
