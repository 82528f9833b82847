"""Which operation a call of two folders without a twin computes, and the bound a correct implementation keeps.

"Plain evidence needs no twin" (DESIGN.md): where a call's output differs beyond the largest difference any
correct implementation of the same function could make from the inputs it was handed, it is named from two
folders alone. The operation is read from what the files show, never from a name:

- a leaf whose module holds no float tensor, one float input the output's shape, and whose reference output is a
  known elementwise function of its input within the reference's own rounding (GELU, its tanh approximation,
  SiLU, quick GELU, ReLU, tanh, sigmoid);
- a leaf whose module holds a matrix ``[out, in]`` (or ``[in, out]``, GPT-2's Conv1D) matching the last sizes of
  its input and output: a linear map, its Frobenius norm from the fingerprint;
- a leaf that looks up rows of such a matrix for integer ids: an embedding, exact;
- a leaf whose module holds a vector of the last size (and maybe a bias): a LayerNorm or RMSNorm, when the
  reference's output at the fingerprint's sampled gains is the normalised input times them (eps only shrinks
  each row);

a call's own code where it is an attention's core (``attention_call.py``) or a gated product (``gated_call.py``);
operations along another axis (a channels-first norm, a BatchNorm at eval, a layer scale, a convolution) are
``operation_axes.py``'s; tensors one side holds in another layout are read in a's (``measure/layouts.py``);
each only where both sides' tensors of the module are the same bit for bit (the fingerprints' checksums; a weight
that differs is named by the weights test). The bounds are ``measure/bounds.py``'s.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...core.dtypes import is_float
from ...capture.numpy_parameters import sample_positions
from ..measure import bounds
from ..measure.layouts import in_a_layout, same_values
from ..measure.noise import as_matrix, unit_roundoff
from .evidence import Evidence
from .operation_axes import along_axis

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from ..align.flow import Producer, Slot
    from .files_verdict import FileVerdict

_SAMPLE_DIGITS = 1e-6  # a fingerprint's numbers hold 7 significant digits


def bound_evidence(judge: FileVerdict, producer: Producer, slot: Slot, what: str) -> Evidence | None:
    """The ``bound`` test of a leaf's output (None: the operation is not one the files show plainly)."""
    node = producer.node
    if producer.kind == "glue":
        from .attention_call import attention_evidence
        from .gated_call import gated_evidence

        return attention_evidence(judge, producer, slot, what) or gated_evidence(judge, producer, slot, what)
    if producer.kind != "leaf" or slot.node is not node or slot.io != "output":
        return None
    match = judge.matches.get(id(node))
    if match is None:
        return None
    outputs = _pair(judge, slot)
    inputs = [p for p in (_pair(judge, s) for s in judge.flow_a.slots(node, "input")) if p is not None]
    if outputs is None or len(inputs) != 1 or not is_float(slot.tensor.dtype):
        return None
    (x_a, x_b, x_slot, *raw_x), (y_a, y_b, _, *raw_y) = inputs[0], outputs
    if x_a.shape != y_a.shape and x_a.numel() == y_a.numel() and _long(list(raw_x[0].shape)) == _long(
            list(raw_y[0].shape)):  # a flatten or a view: the same values in the same flat order
        x_a, x_b = x_a.reshape(y_a.shape), x_b.reshape(y_a.shape)
    u = unit_roundoff(slot.tensor.dtype)
    mine = _held(judge.flow_a.trace, node.module_path)
    theirs = _held(judge.flow_b.trace, match.b.module_path)
    if mine is None and theirs is None or mine == {} and theirs == {}:  # no sidecar, or nothing held
        found = _elementwise(x_a, x_b, y_a, y_b, u, x_slot)
    elif mine is None or theirs is None or not _same_tensors(mine, theirs):
        found = None
    elif not mine:
        found = _elementwise(x_a, x_b, y_a, y_b, u, x_slot)
    else:
        found = _with_weights(mine, x_a, x_b, y_a, y_b, u, x_slot, slot)
        if found is None and is_float(x_slot.tensor.dtype):
            found = along_axis(mine, (*raw_x, *raw_y), max(u, unit_roundoff(x_slot.tensor.dtype)),
                               any("float32" in str(d) for d in (x_slot.tensor.dtype, slot.tensor.dtype)))
    if found is None:
        return None
    sentence = (f"{what} differ by {found.difference:.3g} (2-norm) where any correct {found.what} allows "
                f"{found.allowed:.3g} from the inputs it was handed ({found.formula})")
    return Evidence("bound", found.difference, found.allowed, found.score, sentence)


def _pair(judge: FileVerdict, slot: Slot) -> tuple[torch.Tensor, torch.Tensor, Slot] | None:
    """Both sides' values of one tensor of a's call at exactly that place, as float64 rows (padding rows out), then
    the slot, then both sides' whole tensors in a's layout (for operations along another axis than the last)."""
    other = b_values(judge, slot)
    if other is None or not slot.tensor.shape or (tuple(other.shape) != tuple(slot.tensor.shape)
                                                  and not same_values(slot.tensor.shape, other.shape)):
        return None
    x, y = judge.flow_a.cache.load(slot.source.tensor), judge.flow_b.cache.load(other)
    if x is None or y is None or x.numel() == 0 or x.is_complex() or y.is_complex():
        return None
    y = in_a_layout(x, y)
    return as_matrix(x, judge.valid), as_matrix(y, judge.valid), slot, x, y


def b_values(judge: FileVerdict, slot: Slot) -> Any:
    """b's counterpart of the tensor at exactly this place of a, as the slot where its values first appeared in b
    (a repeat's file is a hard link already read there: each file is read once)."""
    diff = judge._diff(slot)
    if diff is None or diff.basis != "tensors":
        return None
    found = judge.flow_b.slot(judge.matches[id(slot.node)].b, slot.io, diff.b_arg)
    return found.source.tensor if found is not None else judge._b_tensor(slot)


def _held(trace: Any, path: str) -> dict[str, dict[str, Any]] | None:
    """The float tensors a module holds (name -> fingerprint); {} for none; None without a sidecar."""
    section = trace.sidecar.get("parameters")
    if not isinstance(section, dict) or not section:
        return None
    found = section.get(path.split(" ", 1)[0], {})
    if not isinstance(found, dict):
        return None
    return {name: fp for name, fp in found.items() if isinstance(fp, dict) and is_float(str(fp.get("dtype", "")))}


def _same_tensors(mine: dict[str, dict], theirs: dict[str, dict]) -> bool:
    """The same names, shapes and bits (checksums) on both sides."""
    if set(mine) != set(theirs):
        return False
    keys = ("dtype", "checksum")
    return all(all(mine[n].get(k) == theirs[n].get(k) for k in keys) and mine[n].get("checksum")
               and _long(mine[n].get("shape")) == _long(theirs[n].get("shape")) for n in mine)


def _long(shape: Any) -> tuple | None:
    """A shape without its sizes one: a 1x1 convolution's ``[out, in, 1, 1]`` holds a linear map's ``[out, in]``
    in the same flat order (the checksums then say the same bits)."""
    return tuple(n for n in shape if n != 1) if isinstance(shape, list) else None


def _elementwise(x_a, x_b, y_a, y_b, u: float, x_slot: Slot) -> bounds.Bound | None:
    if not is_float(x_slot.tensor.dtype) or x_a.shape != y_a.shape:
        return None
    u = max(u, unit_roundoff(x_slot.tensor.dtype))
    name = bounds.identify(x_a.reshape(-1), y_a.reshape(-1), u)
    if name is None:
        return None
    keep = _finite(x_a, x_b, y_a, y_b)
    return bounds.elementwise(name, x_a[keep], x_b[keep], y_a[keep], y_b[keep], u)


def _finite(*tensors):
    keep = None
    for t in tensors:
        ok = t.isfinite()
        keep = ok if keep is None else keep & ok
    return keep


def _with_weights(held: dict[str, dict], x_a, x_b, y_a, y_b, u: float, x_slot: Slot, y_slot: Slot):
    weight = held.get("weight")
    if weight is None or not isinstance(weight.get("shape"), list):
        return None
    shape, rest = weight["shape"], set(held) - {"weight"}
    if rest - {"bias"}:
        return None
    n_in, n_out = x_a.shape[-1], y_a.shape[-1]
    if len(shape) == 2 and not is_float(x_slot.tensor.dtype):
        if shape[1] == n_out and bool((x_a == x_b).all()) and not rest:
            return bounds.lookup(y_a, y_b)
        return None
    if not (_finite(x_a, x_b).all() and _finite(y_a, y_b).all()):
        return None
    if len(shape) == 2 and sorted(shape) == sorted([n_in, n_out]):  # either layout: ‖W‖_F is the same
        w_norm = _number(weight, "norm")
        if w_norm is None:
            return None
        float32 = any("float32" in str(d) for d in (x_slot.tensor.dtype, y_slot.tensor.dtype, weight.get("dtype")))
        return bounds.linear(x_a, x_b, y_a, y_b, u, w_norm * (1 + _SAMPLE_DIGITS), float32)
    if len(shape) == 1 and shape[0] == n_in == n_out and x_a.shape == y_a.shape:
        bias = held.get("bias")
        if bias is not None and bias.get("shape") != shape:
            return None
        centred = _which_norm(weight, bias, x_a, y_a, max(u, unit_roundoff(x_slot.tensor.dtype)))
        if centred is None:
            return None
        gain = _number(weight, "absmax")
        b = _number(bias, "absmax") if bias is not None else 0.0
        if gain is None or b is None:
            return None
        what = "LayerNorm" if centred else "RMSNorm"
        return bounds.norm(x_a, x_b, y_a, y_b, max(u, unit_roundoff(x_slot.tensor.dtype)),
                           gain * (1 + _SAMPLE_DIGITS), b * (1 + _SAMPLE_DIGITS), f"{what} over {n_in}")
    return None


def _number(fingerprint: dict | None, key: str) -> float | None:
    value = (fingerprint or {}).get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _which_norm(weight: dict, bias: dict | None, x, y, u: float) -> bool | None:
    """Whether the reference's output is a LayerNorm (True) or an RMSNorm (False) of its input at the sampled
    gains: ``y − b = r_i · g ⊙ (x − m)/s`` with one ``0 < r_i ≤ 1`` per row (eps shrinks a row, never grows it);
    None when neither holds within the reference's own rounding."""
    import torch

    d = x.shape[-1]
    positions = sample_positions(d)
    gains = weight.get("samples")
    if not isinstance(gains, list) or len(gains) != len(positions):
        return None
    g = torch.tensor([float(v) for v in gains], dtype=torch.float64)
    if bias is not None:
        offsets = bias.get("samples")
        if not isinstance(offsets, list) or len(offsets) != len(positions):
            return None
        b = torch.tensor([float(v) for v in offsets], dtype=torch.float64)
    else:
        b = torch.zeros_like(g)
    target = y[:, positions] - b
    allowed = (2 * (5 * u + d * bounds.U32) + _SAMPLE_DIGITS) * float(y[:, positions].square().sum().sqrt()) \
        + _SAMPLE_DIGITS * float(b.abs().sum())
    for centred in ((False, True) if bias is None else (True, False)):
        z, _ = bounds.normalized(x, centred)
        made = g * z[:, positions]
        weight_rows = made.square().sum(-1)
        r = (target * made).sum(-1) / weight_rows.clamp_min(1e-300)
        r = torch.where(weight_rows > 0, r, torch.ones_like(r))
        residual = target - r.unsqueeze(-1) * made
        if float(residual.square().sum().sqrt()) <= allowed and bool((r > 0).all()) and float(r.max()) <= 1 + 1e-3:
            return centred
    return None
