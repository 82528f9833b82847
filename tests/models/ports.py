"""An "original" model and a from-scratch "port" of it, for the comparison tests and docs.

The original is transformers' ``LlamaForCausalLM`` built from a tiny config (random
init from a fixed seed, nothing downloaded). The port, ``TinyLlamaPort``, is plain
torch written independently, the way a porter would: other module names, a fused
qkv projection, a fused gate/up projection, an extra wrapper around the output
projection, an attention "core" module, an extra Dropout and Identity, bf16-free,
and its root class is different. It loads the original's weights
(``TinyLlamaPort.from_original``) and computes the same function — unless one of
the ``BUGS`` is switched on.

``BUGS`` maps each injected bug to the module of the ORIGINAL (a's naming) where
the difference originates.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import nn

VOCAB = 128
HIDDEN = 32
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 64
LAYERS = 3
EPS = 1e-6
ROOT = "LlamaForCausalLM"
P = f"{ROOT}.model"

#: bug -> the module of the original where it originates (a's naming)
BUGS: dict[str, str] = {
    "eps": f"{P}.layers.0.input_layernorm",  # every RMSNorm uses eps=1e-5 instead of 1e-6
    "final_eps": f"{P}.norm",  # only the final norm has the wrong eps
    "rotary_k": f"{P}.layers.0.self_attn",  # rotary embedding not applied to k
    "softmax_fp16": f"{P}.layers.0.self_attn",  # attention softmax computed in float16
    "no_padding_mask": f"{P}.layers.0.self_attn",  # the padding mask is ignored
    "transposed_o": f"{P}.layers.2.self_attn.o_proj",  # layer 2 loads o_proj's weight transposed
    "gate_up_swapped": f"{P}.layers.2.mlp",  # layer 2's fused gate/up halves in the wrong order
    "residual": f"{P}.layers.2",  # layer 2 forgets the residual around the MLP
    "rope_theta": f"{P}.rotary_emb",  # rotary base 1e4 instead of the config's
    "layer1_transposed_o": f"{P}.layers.1.self_attn.o_proj",  # inside a block that pruning removes
    "rounded_scale": f"{P}.layers.2.self_attn",  # layer 2 scales attention scores by 0.35, not 1/sqrt(8)
    "gelu_tanh": f"{P}.layers.0.mlp",  # tanh-approximated GELU (against build_original(hidden_act="gelu"))
}

#: b's module paths -> a's, for ``compare(..., rename=RENAME)``
RENAME: dict[str, str] = {
    r"^TinyLlamaPort$": ROOT,
    r"^TinyLlamaPort\.tok$": f"{P}.embed_tokens",
    r"^TinyLlamaPort\.rope$": f"{P}.rotary_emb",
    r"^TinyLlamaPort\.blocks\.": f"{P}.layers.",
    r"^TinyLlamaPort\.final_norm$": f"{P}.norm",
    r"^TinyLlamaPort\.head$": f"{ROOT}.lm_head",
    r"\.attn_norm$": ".input_layernorm",
    r"\.ffn_norm$": ".post_attention_layernorm",
    r"\.attn$": ".self_attn",
    r"\.attn\.out\.linear$": ".self_attn.o_proj",
    r"\.ffn$": ".mlp",
    r"\.ffn\.down$": ".mlp.down_proj",
}


def build_original(layers: int = LAYERS, hidden_act: str = "silu") -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=64,
        rms_norm_eps=EPS,
        rope_theta=500000.0,
        hidden_act=hidden_act,
        attn_implementation="eager",
    )
    return LlamaForCausalLM(config).eval()


def make_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, VOCAB, (2, 7), generator=generator)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0  # left padding in the second row
    return ids, mask


# -- the port -------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


class Rope(nn.Module):
    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim)), False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions[..., None].float() * self.inv_freq
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos(), angles.sin()


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class AttentionCore(nn.Module):
    """Rotary, grouped-query attention with causal and padding masks (no weights)."""

    def __init__(self, bugs: set[str]) -> None:
        super().__init__()
        self.bugs = bugs
        self.scale: float | None = None  # None: 1/sqrt(head_dim)

    def forward(self, q, k, v, cos, sin, mask):
        cos, sin = cos[:, None], sin[:, None]
        q = _rotate(q, cos, sin)
        if "rotary_k" not in self.bugs:
            k = _rotate(k, cos, sin)
        groups = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scale = self.scale if self.scale is not None else 1 / math.sqrt(q.shape[-1])
        scores = (q @ k.transpose(-1, -2)) * scale
        length = q.shape[2]
        allowed = torch.ones(length, length, dtype=torch.bool).tril()[None, None]
        if "no_padding_mask" not in self.bugs:
            allowed = allowed & mask[:, None, None, :].bool()
        scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
        if "softmax_fp16" in self.bugs:
            weights = scores.clamp(min=-6e4).half().softmax(-1).to(scores.dtype)
        else:
            weights = scores.softmax(-1)
        return (weights @ v).transpose(1, 2).flatten(2)


class OutProj(nn.Module):
    """A wrapper the original does not have."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x):
        return self.linear(x)


class Attention(nn.Module):
    def __init__(self, bugs: set[str]) -> None:
        super().__init__()
        self.head_dim = HIDDEN // HEADS
        self.qkv = nn.Linear(HIDDEN, HIDDEN + 2 * KV_HEADS * self.head_dim, bias=False)
        self.core = AttentionCore(bugs)
        self.drop = nn.Dropout(0.0)
        self.out = OutProj()

    def forward(self, x, cos, sin, mask):
        batch, length, _ = x.shape
        q, k, v = self.qkv(x).split([HIDDEN, KV_HEADS * self.head_dim, KV_HEADS * self.head_dim], dim=-1)
        q = q.view(batch, length, HEADS, self.head_dim).transpose(1, 2)
        k = k.view(batch, length, KV_HEADS, self.head_dim).transpose(1, 2)
        v = v.view(batch, length, KV_HEADS, self.head_dim).transpose(1, 2)
        return self.out(self.drop(self.core(q, k, v, cos, sin, mask)))


class FeedForward(nn.Module):
    def __init__(self, act: str = "silu", bugs: set[str] | frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.gate_up = nn.Linear(HIDDEN, 2 * INTERMEDIATE, bias=False)
        self.down = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)
        self.act = act  # "silu", or "gelu" for an original built with hidden_act="gelu"
        self.approximate = "tanh" if "gelu_tanh" in bugs else "none"

    def forward(self, x):
        gate, up = self.gate_up(x).chunk(2, dim=-1)
        if self.act == "gelu":
            return self.down(nn.functional.gelu(gate, approximate=self.approximate) * up)
        return self.down(nn.functional.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, eps: float, bugs: set[str], act: str = "silu") -> None:
        super().__init__()
        self.attn_norm = RMSNorm(HIDDEN, eps)
        self.attn = Attention(bugs)
        self.ffn_norm = RMSNorm(HIDDEN, eps)
        self.ffn = FeedForward(act, bugs)
        self.resid = nn.Identity()
        self.skip_residual = False

    def forward(self, x, cos, sin, mask):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask)
        out = self.ffn(self.ffn_norm(x))
        return self.resid(out if self.skip_residual else x + out)


class TinyLlamaPort(nn.Module):
    def __init__(self, layers: int = LAYERS, bugs: set[str] | frozenset[str] = frozenset(), act: str = "silu") -> None:
        super().__init__()
        bugs = set(bugs)
        unknown = bugs - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}")
        eps = 1e-5 if "eps" in bugs else EPS
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.rope = Rope(HIDDEN // HEADS, 10000.0 if "rope_theta" in bugs else 500000.0)
        self.blocks = nn.ModuleList(Block(eps, bugs, act) for _ in range(layers))
        self.final_norm = RMSNorm(HIDDEN, 1e-5 if bugs & {"eps", "final_eps"} else EPS)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.bugs = bugs

    def forward(self, input_ids, attention_mask):
        x = self.tok(input_ids)
        cos, sin = self.rope(torch.arange(input_ids.shape[1])[None])
        for block in self.blocks:
            x = block(x, cos, sin, attention_mask)
        return self.head(self.final_norm(x))

    @classmethod
    def from_original(cls, original: nn.Module, bugs: set[str] | frozenset[str] = frozenset()) -> TinyLlamaPort:
        """The port with the original's weights (converted, as a porter's script would)."""
        layers = len(original.model.layers)
        port = cls(layers, bugs, getattr(original.config, "hidden_act", "silu")).eval()
        sd = original.state_dict()
        with torch.no_grad():
            port.tok.weight.copy_(sd["model.embed_tokens.weight"])
            port.final_norm.scale.copy_(sd["model.norm.weight"])
            port.head.weight.copy_(sd["lm_head.weight"])
            for i, block in enumerate(port.blocks):
                pre = f"model.layers.{i}."
                block.attn_norm.scale.copy_(sd[pre + "input_layernorm.weight"])
                block.ffn_norm.scale.copy_(sd[pre + "post_attention_layernorm.weight"])
                block.attn.qkv.weight.copy_(
                    torch.cat([sd[pre + f"self_attn.{p}_proj.weight"] for p in "qkv"], dim=0)
                )
                o_weight = sd[pre + "self_attn.o_proj.weight"]
                if ("transposed_o" in bugs and i == 2) or ("layer1_transposed_o" in bugs and i == 1):
                    o_weight = o_weight.T
                block.attn.out.linear.weight.copy_(o_weight)
                halves = [sd[pre + "mlp.gate_proj.weight"], sd[pre + "mlp.up_proj.weight"]]
                if "gate_up_swapped" in bugs and i == 2:
                    halves.reverse()
                block.ffn.gate_up.weight.copy_(torch.cat(halves, dim=0))
                block.ffn.down.weight.copy_(sd[pre + "mlp.down_proj.weight"])
                block.skip_residual = "residual" in bugs and i == 2
                if "rounded_scale" in bugs and i == 2:
                    block.attn.core.scale = 0.35
        return port


def trace_original(folder: Path, *, use_repr: bool, prune: bool, layers: int = LAYERS, dtype=None,
                   measure_rounding: bool | str = "auto", hidden_act: str = "silu"):
    """Trace the original (its MLP's ``hidden_act``) on the shared inputs into ``folder`` (its rounding measured
    when asked); returns the Trace."""
    import nbtrace

    model = build_original(layers, hidden_act)
    if dtype is not None:
        model = model.to(dtype)
    ids, mask = make_inputs()
    with nbtrace.trace(model, debug_path=folder, do_prune_layers=prune, use_repr=use_repr,
                       measure_rounding=measure_rounding) as rec:
        model(input_ids=ids, attention_mask=mask, use_cache=False)
    return rec.trace


def trace_port(folder: Path, bugs=(), *, use_repr: bool, prune: bool, layers: int = LAYERS,
               measure_rounding: bool | str = "auto", hidden_act: str = "silu"):
    """Trace the port (with ``bugs``, of an original with ``hidden_act``) on the shared inputs into ``folder`` (its
    rounding measured when asked); returns the Trace."""
    import nbtrace

    port = TinyLlamaPort.from_original(build_original(layers, hidden_act), set(bugs))
    ids, mask = make_inputs()
    with nbtrace.trace(port, debug_path=folder, do_prune_layers=prune, use_repr=use_repr,
                       measure_rounding=measure_rounding) as rec:
        port(ids, mask)
    return rec.trace
