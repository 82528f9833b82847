"""The small built-in model that the demo, the notebooks and the docs trace.

A Llama-style decoder written in plain torch (token embedding, rotary position
embedding, pre-norm blocks of attention and gated MLP, final norm, LM head),
randomly initialised from a fixed seed: nothing is downloaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class DemoConfig:
    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 172
    num_layers: int = 4
    num_heads: int = 4
    rope_theta: float = 10000.0
    eps: float = 1e-6


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin tables for ``positions``, computed in float32, handed out in ``x``'s dtype."""
        freqs = positions[..., None].float() * self.inv_freq
        angles = torch.cat([freqs, freqs], dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


class Attention(nn.Module):
    def __init__(self, config: DemoConfig) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.head_dim = config.hidden_size // config.num_heads
        size = config.hidden_size
        self.q_proj = nn.Linear(size, size, bias=False)
        self.k_proj = nn.Linear(size, size, bias=False)
        self.v_proj = nn.Linear(size, size, bias=False)
        self.o_proj = nn.Linear(size, size, bias=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        batch, length, _ = hidden_states.shape
        shape = (batch, length, self.num_heads, self.head_dim)
        q = self.q_proj(hidden_states).view(shape).transpose(1, 2)
        k = self.k_proj(hidden_states).view(shape).transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = (t[:, None] for t in position_embeddings)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        causal = torch.ones(length, length, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        if attention_mask is not None:
            scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        weights = scores.softmax(dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(batch, length, -1)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, config: DemoConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: DemoConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.eps)
        self.self_attn = Attention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.eps)
        self.mlp = MLP(config)

    def forward(self, hidden_states, position_embeddings, attention_mask=None):
        residual = hidden_states
        hidden_states = self.self_attn(
            self.input_layernorm(hidden_states), position_embeddings, attention_mask=attention_mask
        )
        hidden_states = residual + hidden_states
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class DemoLM(nn.Module):
    """A tiny Llama-style causal language model; ``forward`` returns ``{"logits": ...}``."""

    def __init__(self, config: DemoConfig | None = None) -> None:
        super().__init__()
        config = config or DemoConfig()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.rotary_emb = RotaryEmbedding(config.hidden_size // config.num_heads, config.rope_theta)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> dict:
        hidden_states = self.embed_tokens(input_ids)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        position_embeddings = self.rotary_emb(hidden_states, positions)
        for layer in self.layers:
            hidden_states = layer(hidden_states, position_embeddings, attention_mask=attention_mask)
        return {"logits": self.lm_head(self.norm(hidden_states))}


def build_demo(
    num_layers: int = 4, seq_len: int = 16, seed: int = 0, **config: int
) -> tuple[DemoLM, dict[str, torch.Tensor]]:
    """The demo model (random init from ``seed``) and a matching input batch."""
    generator_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        cfg = DemoConfig(num_layers=num_layers, **config)
        model = DemoLM(cfg).eval()
        input_ids = torch.randint(0, cfg.vocab_size, (1, seq_len))
    finally:
        torch.random.set_rng_state(generator_state)
    return model, {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
