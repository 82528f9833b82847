"""A from-scratch port of the precision case set's reference, with other names and structure.

Plain torch, written as a porter would: ``tok``, ``rope``, ``blocks.N`` with ``attn_norm``,
``attn`` (``wq``/``wk``/``wv``/``wo``: q and o are both hidden -> hidden, the pair today's
alignment tells apart by values), ``ffn_norm``, ``ffn`` (a fused ``w13`` gate/up, ``act``,
``w2``), ``norm``, ``output``; sdpa attention. It keeps the reference's precision
handling (RMSNorm statistics and rotary tables in float32), so a correct port differs from
the reference by rounding only. ``RENAMED_CASES`` are cases on it (bugs in its naming,
``born`` in the reference's).
"""

from __future__ import annotations

import torch
from torch import nn

from tests.models.precision import (
    EPS,
    HEADS,
    HIDDEN,
    INTERMEDIATE,
    KV_HEADS,
    LAYERS,
    VOCAB,
    Bug,
    Case,
    P,
    _round_trip,
    _scale_weight,
)

HEAD_DIM = HIDDEN // HEADS


class RMSNorm(nn.Module):
    def __init__(self, eps: float = EPS) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(HIDDEN))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.scale * h.to(x.dtype)


class Rope(nn.Module):
    def __init__(self, theta: float = 10000.0) -> None:
        super().__init__()
        inv = 1.0 / (theta ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float) / HEAD_DIM))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions[..., None].float() * self.inv_freq.float()
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        if fused:
            self.wqkv = nn.Linear(HIDDEN, (HEADS + 2 * KV_HEADS) * HEAD_DIM, bias=False)
        else:
            self.wq = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
            self.wk = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
            self.wv = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.wo = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.scale = HEAD_DIM**-0.5
        self.fused = fused

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        if self.fused:
            q, k, v = self.wqkv(x).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
        else:
            q, k, v = self.wq(x), self.wk(x), self.wv(x)
        q = q.view(batch, length, HEADS, HEAD_DIM).transpose(1, 2)
        k = k.view(batch, length, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = v.view(batch, length, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q, k = _rotate(q, cos[:, None], sin[:, None]), _rotate(k, cos[:, None], sin[:, None])
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=self.scale)
        return self.wo(out.transpose(1, 2).reshape(batch, length, HIDDEN))


class FeedForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w13 = nn.Linear(HIDDEN, 2 * INTERMEDIATE, bias=False)
        self.act = nn.GELU()
        self.w2 = nn.Linear(INTERMEDIATE, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(self.act(gate) * up)


class Block(nn.Module):
    def __init__(self, fused: bool) -> None:
        super().__init__()
        self.attn_norm = RMSNorm()
        self.attn = Attention(fused)
        self.ffn_norm = RMSNorm()
        self.ffn = FeedForward()

    def forward(self, x, cos, sin, allowed):
        x = x + self.attn(self.attn_norm(x), cos, sin, allowed)
        return x + self.ffn(self.ffn_norm(x))


class RenamedLlama(nn.Module):
    def __init__(self, fused: bool = False) -> None:
        super().__init__()
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.rope = Rope()
        self.blocks = nn.ModuleList(Block(fused) for _ in range(LAYERS))
        self.norm = RMSNorm()
        self.output = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **_: object) -> torch.Tensor:
        x = self.tok(input_ids)
        length = input_ids.shape[1]
        cos, sin = self.rope(x, torch.arange(length)[None])
        causal = torch.ones(length, length, dtype=torch.bool).tril()
        allowed = causal[None, None] & attention_mask[:, None, None, :].bool()
        allowed = allowed | torch.eye(length, dtype=torch.bool)[None, None]  # padded queries: attend to themselves
        for block in self.blocks:
            x = block(x, cos, sin, allowed)
        return self.output(self.norm(x))


def fused_port(reference: nn.Module) -> nn.Module:
    """The port with one fused q/k/v projection (``attn.wqkv``): only ``wo`` is left hidden -> hidden."""
    return renamed_port(reference, fused=True)


def renamed_port(reference: nn.Module, fused: bool = False) -> nn.Module:
    """The port, with the reference's weights (converted as a porter's script would)."""
    port = RenamedLlama(fused).eval().to(reference.dtype)
    sd = reference.state_dict()
    with torch.no_grad():
        port.tok.weight.copy_(sd["model.embed_tokens.weight"])
        port.norm.scale.copy_(sd["model.norm.weight"])
        port.output.weight.copy_(sd["lm_head.weight"])
        for i, block in enumerate(port.blocks):
            pre = f"model.layers.{i}."
            block.attn_norm.scale.copy_(sd[pre + "input_layernorm.weight"])
            block.ffn_norm.scale.copy_(sd[pre + "post_attention_layernorm.weight"])
            names = (
                (("wo", "o_proj"),)
                if fused
                else (("wq", "q_proj"), ("wk", "k_proj"), ("wv", "v_proj"), ("wo", "o_proj"))
            )
            for mine, theirs in names:
                getattr(block.attn, mine).weight.copy_(sd[pre + f"self_attn.{theirs}.weight"])
            if fused:
                block.attn.wqkv.weight.copy_(torch.cat([sd[pre + f"self_attn.{p}_proj.weight"] for p in "qkv"]))
            block.ffn.w13.weight.copy_(torch.cat([sd[pre + "mlp.gate_proj.weight"], sd[pre + "mlp.up_proj.weight"]]))
            block.ffn.w2.weight.copy_(sd[pre + "mlp.down_proj.weight"])
    return port


RENAMED_CASES: list[Case] = [
    Case("fused_clean", None, fused_port),
    Case(
        "fused_o_fp8",
        Bug(
            "fused_o_fp8",
            _round_trip("blocks.2.attn.wo", "float8"),
            f"{P}.layers.2.self_attn.o_proj",
            "fused port: layer 2 wo through float8_e4m3",
        ),
        fused_port,
    ),
    Case(
        "fused_o_scale",
        Bug("fused_o_scale", _scale_weight("blocks.1.attn.wo", 1.01), f"{P}.layers.1.self_attn.o_proj", "x1.01"),
        fused_port,
    ),
    Case("renamed_clean", None, renamed_port),
    Case(
        "renamed_o_scale",
        Bug("o_scale", _scale_weight("blocks.1.attn.wo", 1.01), f"{P}.layers.1.self_attn.o_proj", "layer 1 wo x1.01"),
        renamed_port,
    ),
    Case(
        "renamed_o_fp8",
        Bug(
            "o_fp8",
            _round_trip("blocks.2.attn.wo", "float8"),
            f"{P}.layers.2.self_attn.o_proj",
            "layer 2 wo through float8_e4m3",
        ),
        renamed_port,
    ),
    Case(
        "renamed_q_fp8",
        Bug(
            "q_fp8",
            _round_trip("blocks.2.attn.wq", "float8"),
            f"{P}.layers.2.self_attn.q_proj",
            "layer 2 wq through float8_e4m3",
        ),
        renamed_port,
    ),
]
