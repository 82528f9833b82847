"""A Gemma-like decoder written in flax.linen (the "original"); its Llama-like PyTorch port is in
``flax_decoder_port.py`` (this file imports no torch: the JAX capture is tested where torch is absent).

Built from code with a seed (nothing is downloaded). Flax names: ``embedder`` (param ``embedding``, methods
``encode``/``decode``), ``layers_0``… (``input_norm``, ``attn`` with ``q_proj``/``kv_proj``/``o_proj``,
``post_norm``, ``mlp`` with ``gate_up``/``down``), ``final_norm``. Port names: ``embed_tokens``, ``layers.0``…
(``input_layernorm``, ``self_attn`` with ``q_proj``/``k_proj``/``v_proj``/``o_proj``, ``post_attention_layernorm``,
``mlp`` with ``gate_proj``/``up_proj``/``down_proj``), ``norm``, ``lm_head`` and ``rotary_emb`` (no Flax twin).

Fused kernels of the original: ``kv_proj`` is ``nn.DenseGeneral(features=(2, kv_heads, head_dim))``, kernel
``[hidden, 2, kv_heads, head_dim]``, index 0 on the ``2`` axis is k, index 1 is v. ``gate_up`` is
``nn.Dense(2 * intermediate)``: the first half of its output is the gate, the second half is up.

Planted bugs. Port (``TorchDecoder(bugs=...)``): ``"norm_eps"`` (1e-5 in every norm instead of 1e-6),
``"query_scale"`` (queries scaled by 1/head_dim instead of head_dim**-0.5), ``"rope_base"`` (500000 instead of
10000). Conversion (``convert_decoder(bugs=...)``): ``"transposed_kernel"`` (q_proj of every layer loaded
without the transpose; square, so shapes still fit), ``"swapped_gate_up"`` (gate and up halves swapped).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

PORT_BUGS = frozenset({"norm_eps", "query_scale", "rope_base"})
CONVERSION_BUGS = frozenset({"transposed_kernel", "swapped_gate_up"})
BUGS = PORT_BUGS | CONVERSION_BUGS


@dataclass(frozen=True)
class DecoderConfig:
    vocab: int = 64
    hidden: int = 32
    layers: int = 3
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 8
    intermediate: int = 64
    rope_base: float = 10000.0
    eps: float = 1e-6
    dtype: str = "float32"


# ---------------------------------------------------------------- the Flax original


def apply_rope(x: jax.Array, positions: jax.Array, base: float) -> jax.Array:
    """Rotary embedding on ``x`` [B, T, N, H] (rotate-half convention), computed in float32."""
    half = x.shape[-1] // 2
    inv_freq = 1.0 / (base ** (jnp.arange(0, half, dtype=jnp.float32) * 2.0 / x.shape[-1]))
    angles = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]  # [T, H/2]
    sin, cos = jnp.sin(angles)[None, :, None, :], jnp.cos(angles)[None, :, None, :]
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x.dtype)


class Embedder(nn.Module):
    vocab: int
    hidden: int
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    def setup(self):
        init = nn.initializers.normal(stddev=self.hidden ** -0.5)
        self.embedding = self.param("embedding", init, (self.vocab, self.hidden), self.param_dtype)

    def encode(self, ids: jax.Array) -> jax.Array:
        return jnp.take(self.embedding, ids, axis=0).astype(self.dtype)

    def decode(self, x: jax.Array) -> jax.Array:
        return jnp.dot(x, self.embedding.astype(self.dtype).T)


class RMSNorm(nn.Module):
    eps: float = 1e-6
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.param_dtype)
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (normed * scale.astype(jnp.float32)).astype(self.dtype)


class Attention(nn.Module):
    config: DecoderConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    def setup(self):
        c, kw = self.config, {"use_bias": False, "dtype": self.dtype, "param_dtype": self.param_dtype}
        self.q_proj = nn.DenseGeneral(features=(c.heads, c.head_dim), **kw)
        self.kv_proj = nn.DenseGeneral(features=(2, c.kv_heads, c.head_dim), **kw)
        self.o_proj = nn.DenseGeneral(features=c.hidden, axis=(-2, -1), **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        c = self.config
        positions = jnp.arange(x.shape[1])
        q = apply_rope(self.q_proj(x), positions, c.rope_base)  # [B, T, N, H]
        kv = self.kv_proj(x)  # [B, T, 2, K, H]
        k = apply_rope(kv[:, :, 0], positions, c.rope_base)
        v = kv[:, :, 1]
        groups = c.heads // c.kv_heads
        k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
        q = q * jnp.asarray(c.head_dim ** -0.5, dtype=q.dtype)
        scores = jnp.einsum("btnh,bsnh->bnts", q, k).astype(jnp.float32)
        causal = jnp.tril(jnp.ones((x.shape[1], x.shape[1]), dtype=bool))
        scores = jnp.where(causal[None, None], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(self.dtype)
        out = jnp.einsum("bnts,bsnh->btnh", probs, v)
        return self.o_proj(out)


class MLP(nn.Module):
    config: DecoderConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c, kw = self.config, {"use_bias": False, "dtype": self.dtype, "param_dtype": self.param_dtype}
        gate_up = nn.Dense(2 * c.intermediate, name="gate_up", **kw)(x)
        gate, up = jnp.split(gate_up, 2, axis=-1)  # first half gate, second half up
        return nn.Dense(c.hidden, name="down", **kw)(jax.nn.silu(gate) * up)


class FlaxBlock(nn.Module):
    config: DecoderConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    def setup(self):
        kw = {"dtype": self.dtype, "param_dtype": self.param_dtype}
        self.input_norm = RMSNorm(eps=self.config.eps, **kw)
        self.attn = Attention(self.config, **kw)
        self.post_norm = RMSNorm(eps=self.config.eps, **kw)
        self.mlp = MLP(self.config, **kw)

    def __call__(self, x: jax.Array) -> jax.Array:
        x = x + self.attn(self.input_norm(x))
        return x + self.mlp(self.post_norm(x))


class FlaxDecoder(nn.Module):
    config: DecoderConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    def setup(self):
        c, kw = self.config, {"dtype": self.dtype, "param_dtype": self.param_dtype}
        self.embedder = Embedder(c.vocab, c.hidden, **kw)
        self.layers = [FlaxBlock(c, **kw) for _ in range(c.layers)]
        self.final_norm = RMSNorm(eps=c.eps, **kw)

    def __call__(self, input_ids: jax.Array) -> jax.Array:
        x = self.embedder.encode(input_ids)
        for layer in self.layers:
            x = layer(x)
        return self.embedder.decode(self.final_norm(x))


# ---------------------------------------------------------------- the PyTorch port
