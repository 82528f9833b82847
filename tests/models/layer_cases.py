"""One decoder layer of transformers' Llama and the same layer of ``ports.TinyLlamaPort``, with the inputs
each takes, for narrowing a call to its operations (tests/test_narrow.py, benchmarks/bench_narrow.py)."""

from __future__ import annotations

import torch

from tests.models.ports import TinyLlamaPort, build_original, make_inputs


def layer_pair(bugs=(), hidden_act: str = "silu", scale: float | None = None, dtype: torch.dtype = torch.float32):
    """(reference layer 0, port block 0, reference args, reference kwargs, port args): the same weights;
    ``scale`` sets the port's attention scale (the ``rounded_scale`` bug of layer 0). The additive mask is
    built in ``dtype``, as transformers builds it in the model's dtype (float32's minimum is -inf in bfloat16)."""
    original = build_original(1, hidden_act)
    port = TinyLlamaPort.from_original(original, set(bugs))
    if scale is not None:
        port.blocks[0].attn.core.scale = scale
    ids, mask = make_inputs()
    x = original.model.embed_tokens(ids).detach()
    cos, sin = original.model.rotary_emb(x, torch.arange(ids.shape[1])[None])
    length = ids.shape[1]
    allowed = torch.ones(length, length, dtype=torch.bool).tril()[None, None] & mask[:, None, None, :].bool()
    additive = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    kwargs = {"position_embeddings": (cos, sin), "attention_mask": additive}
    return original.model.layers[0], port.blocks[0], (x,), kwargs, (x, cos, sin, mask)
