"""The Llama-like PyTorch port of ``flax_decoder.FlaxDecoder``, its weight conversion and the planted bugs."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import torch

from .flax_decoder import BUGS, CONVERSION_BUGS, PORT_BUGS, DecoderConfig, FlaxDecoder


class TorchRMSNorm(torch.nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class TorchRotaryEmbedding(torch.nn.Module):
    """cos/sin [T, head_dim] for positions 0..T-1 (inverse frequencies made in float32 on every call)."""

    def __init__(self, head_dim: int, base: float):
        super().__init__()
        self.head_dim, self.base = head_dim, base

    def forward(self, x: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        exponents = torch.arange(0, self.head_dim, 2, dtype=torch.float32, device=x.device) / self.head_dim
        inv_freq = 1.0 / (self.base ** exponents)
        freqs = torch.arange(seq_len, dtype=torch.float32, device=x.device)[:, None] * inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x`` [B, N, T, H]; computed in float32 like the original, then cast back."""
    x32 = x.float()
    return (x32 * cos + rotate_half(x32) * sin).to(x.dtype)


class TorchAttention(torch.nn.Module):
    def __init__(self, config: DecoderConfig, bugs: frozenset[str]):
        super().__init__()
        c = config
        self.heads, self.kv_heads, self.head_dim = c.heads, c.kv_heads, c.head_dim
        self.scaling = 1.0 / c.head_dim if "query_scale" in bugs else c.head_dim ** -0.5
        self.q_proj = torch.nn.Linear(c.hidden, c.heads * c.head_dim, bias=False)
        self.k_proj = torch.nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.v_proj = torch.nn.Linear(c.hidden, c.kv_heads * c.head_dim, bias=False)
        self.o_proj = torch.nn.Linear(c.heads * c.head_dim, c.hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        groups = self.heads // self.kv_heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        scores = torch.matmul(q * self.scaling, k.transpose(-1, -2)).float()
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, torch.finfo(torch.float32).min)
        probs = torch.softmax(scores, dim=-1).to(x.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
        return self.o_proj(out)


class TorchMLP(torch.nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.gate_proj = torch.nn.Linear(config.hidden, config.intermediate, bias=False)
        self.up_proj = torch.nn.Linear(config.hidden, config.intermediate, bias=False)
        self.down_proj = torch.nn.Linear(config.intermediate, config.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class TorchBlock(torch.nn.Module):
    def __init__(self, config: DecoderConfig, bugs: frozenset[str]):
        super().__init__()
        eps = 1e-5 if "norm_eps" in bugs else config.eps
        self.input_layernorm = TorchRMSNorm(config.hidden, eps)
        self.self_attn = TorchAttention(config, bugs)
        self.post_attention_layernorm = TorchRMSNorm(config.hidden, eps)
        self.mlp = TorchMLP(config)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class TorchDecoder(torch.nn.Module):
    def __init__(self, config: DecoderConfig, bugs: frozenset[str] = frozenset()):
        super().__init__()
        bugs = frozenset(bugs)
        check_bugs(bugs, PORT_BUGS)
        c = config
        self.config, self.bugs = c, bugs
        self.embed_tokens = torch.nn.Embedding(c.vocab, c.hidden)
        self.rotary_emb = TorchRotaryEmbedding(c.head_dim, 500000.0 if "rope_base" in bugs else c.rope_base)
        self.layers = torch.nn.ModuleList(TorchBlock(c, bugs) for _ in range(c.layers))
        self.norm = TorchRMSNorm(c.hidden, 1e-5 if "norm_eps" in bugs else c.eps)
        self.lm_head = torch.nn.Linear(c.hidden, c.vocab, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary_emb(x, input_ids.shape[1])
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


# ---------------------------------------------------------------- conversion and the pair


def check_bugs(bugs: frozenset[str], allowed: frozenset[str]) -> None:
    """A clear error for a bug name the model does not plant."""
    unknown = set(bugs) - allowed
    if unknown:
        raise ValueError(f"unknown bugs {sorted(unknown)}; known: {sorted(allowed)}")


def float32_tensor(array: Any) -> torch.Tensor:
    return torch.from_numpy(np.array(array, dtype=np.float32))


def convert_decoder(params: Any, config: DecoderConfig, bugs: frozenset[str] = frozenset()) -> dict[str, torch.Tensor]:
    """A float32 state_dict for ``TorchDecoder`` from the Flax params (``{"params": ...}`` or the inner tree)."""
    bugs = frozenset(bugs)
    check_bugs(bugs, CONVERSION_BUGS)
    p = params.get("params", params)
    c = config
    embedding = float32_tensor(p["embedder"]["embedding"])
    sd = {"embed_tokens.weight": embedding, "lm_head.weight": embedding.clone(),
          "norm.weight": float32_tensor(p["final_norm"]["scale"])}
    for i in range(c.layers):
        layer, pre = p[f"layers_{i}"], f"layers.{i}."
        attn, mlp = layer["attn"], layer["mlp"]
        q = float32_tensor(attn["q_proj"]["kernel"]).reshape(c.hidden, c.heads * c.head_dim)
        sd[pre + "self_attn.q_proj.weight"] = q if "transposed_kernel" in bugs else q.T
        kv = float32_tensor(attn["kv_proj"]["kernel"])  # [D, 2, K, H]
        sd[pre + "self_attn.k_proj.weight"] = kv[:, 0].reshape(c.hidden, -1).T
        sd[pre + "self_attn.v_proj.weight"] = kv[:, 1].reshape(c.hidden, -1).T
        sd[pre + "self_attn.o_proj.weight"] = float32_tensor(attn["o_proj"]["kernel"]).reshape(-1, c.hidden).T
        gate, up = float32_tensor(mlp["gate_up"]["kernel"]).split(c.intermediate, dim=1)
        if "swapped_gate_up" in bugs:
            gate, up = up, gate
        sd[pre + "mlp.gate_proj.weight"] = gate.T
        sd[pre + "mlp.up_proj.weight"] = up.T
        sd[pre + "mlp.down_proj.weight"] = float32_tensor(mlp["down"]["kernel"]).T
        sd[pre + "input_layernorm.weight"] = float32_tensor(layer["input_norm"]["scale"])
        sd[pre + "post_attention_layernorm.weight"] = float32_tensor(layer["post_norm"]["scale"])
    return {k: v.contiguous() for k, v in sd.items()}


class DecoderPair(NamedTuple):
    flax_model: FlaxDecoder
    params: dict
    torch_model: TorchDecoder
    input_ids_np: np.ndarray
    input_ids_torch: torch.Tensor
    config: DecoderConfig


def make_decoder_pair(seed: int = 0, dtype: str = "float32", bugs: frozenset[str] = frozenset(),
                      config: DecoderConfig | None = None, batch: int = 2, seq: int = 7) -> DecoderPair:
    """The Flax original (computing in ``dtype``, float32 params) and its converted port (in ``dtype``), with
    seeded token ids. ``bugs`` may mix port and conversion bugs."""
    bugs = frozenset(bugs)
    check_bugs(bugs, BUGS)
    config = replace(config or DecoderConfig(), dtype=dtype)
    flax_model = FlaxDecoder(config, dtype=jnp.dtype(dtype), param_dtype=jnp.float32)
    ids = np.random.RandomState(seed).randint(0, config.vocab, size=(batch, seq)).astype(np.int32)
    params = flax_model.init(jax.random.PRNGKey(seed), jnp.asarray(ids))
    params = {"params": params["params"]}
    torch_model = TorchDecoder(config, bugs & PORT_BUGS)
    torch_model.load_state_dict(convert_decoder(params, config, bugs & CONVERSION_BUGS), strict=True)
    torch_model = torch_model.to(getattr(torch, dtype)).eval()
    return DecoderPair(flax_model, params, torch_model, ids, torch.from_numpy(ids.astype(np.int64)), config)
