"""The line porters check first: how far the two models' final outputs are apart, whatever decided the verdict.

The final output is the root call's recorded output, else the last call's (the format records outputs at the
leaves: a causal LM's ``lm_head``). Its largest absolute and relative difference come from the comparison of that
tensor (full tensors, printed values or stats: ``basis`` says which; padding positions left out). For logits (a float
tensor whose last dimension is the vocabulary: named ``logits``, or as long as the rows of the model's largest
table) held in full on both sides, ``top1`` is the share of positions whose highest logit is the same token and
``top5`` the share whose five highest are the same set.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from ...core.dtypes import is_float
from .noise import as_matrix, padding_rows

if TYPE_CHECKING:  # pragma: no cover
    from ..comparison import Comparison


@dataclass
class EndToEnd:
    """The final outputs' difference: ``path`` and ``arg`` name the tensor (a's naming)."""

    path: str
    arg: str
    basis: str | None
    max_abs: float | None
    max_rel: float | None
    logits: bool = False
    positions: int | None = None  # positions compared for the top-k agreement (logits held in full)
    top1: int | None = None  # positions whose top-1 token agrees
    top5: int | None = None  # positions whose top-5 tokens are the same set

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def end_to_end(comparison: Comparison) -> EndToEnd | None:
    """The final outputs' difference (None: the final call has no counterpart with a compared output)."""
    root = comparison.a.root
    node = root if any(io == "output" for io, _, _ in root.tensors()) else root.last_leaf()
    match = comparison.match_of(node)
    if match is None:
        return None
    outputs = [d for d in match.diffs if d.io == "output" and d.basis not in (None, "shape", "mask")]
    if not outputs:
        return None
    chosen = next((d for d in outputs if "logits" in d.arg), outputs[0])
    tensor = next((t for io, arg, t in node.tensors() if io == "output" and arg == chosen.arg), None)
    result = EndToEnd(node.module_path, chosen.arg, chosen.basis, chosen.max_abs, chosen.max_rel)
    if tensor is None or not is_float(tensor.dtype) or len(tensor.shape) < 2:
        return result
    result.logits = "logits" in chosen.arg or tensor.shape[-1] == _table_rows(comparison)
    if result.logits and chosen.basis == "tensors":
        other = next((t for io, arg, t in match.b.tensors() if io == "output" and arg == chosen.b_arg), None)
        _agreement(comparison, result, tensor, other)
    return result


def _table_rows(comparison: Comparison) -> int | None:
    """The row count of the largest 2-D float parameter of a (a vocabulary's table), from its fingerprints."""
    rows = [fp["shape"][0] for module in comparison.a.sidecar.get("parameters", {}).values() if isinstance(module, dict)
            for fp in module.values() if isinstance(fp, dict) and isinstance(fp.get("shape"), list)
            and len(fp["shape"]) == 2 and is_float(str(fp.get("dtype", "")))]
    return max(rows, default=None)


def _agreement(comparison: Comparison, result: EndToEnd, tensor: Any, other: Any) -> None:
    """Top-1 and top-5 agreement per position (padding positions left out)."""
    import torch

    if other is None or tuple(other.shape) != tuple(tensor.shape):
        return
    cache_a, cache_b = (f.cache for f in comparison.flows)
    x, y = cache_a.load(tensor), cache_b.load(other)
    if x is None or y is None:
        return
    valid = padding_rows(comparison.a, cache_a)
    x, y = as_matrix(x, valid), as_matrix(y.reshape(x.shape), valid)
    k = min(5, x.shape[-1])
    result.positions = x.shape[0]
    result.top1 = int((x.argmax(-1) == y.argmax(-1)).sum())
    top_a, top_b = x.topk(k, -1).indices.sort(-1).values, y.topk(k, -1).indices.sort(-1).values
    result.top5 = int(torch.all(top_a == top_b, dim=-1).sum())
