"""A decoder of the published Flax library ``gemma`` (PyPI, Google DeepMind) and transformers' Gemma as its port.

The original is built from gemma's own modules (``gemma.gm.nn._modules``: ``Embedder``, ``Block`` with its
``Attention`` and its ``FeedForward``, whose ``gating_einsum`` and ``linear`` Einsum projections share the
feed-forward's scope through ``nn.share_scope``; ``_layers.RMSNorm``), put together as gemma's ``Transformer``
puts them (``layer_{i}`` blocks, a final norm, the embedder's ``decode`` as the head) without its vision, cache and
config machinery, which need kauldron; random weights, no download. The port is transformers'
``GemmaForCausalLM`` built from a config, the weights converted in code as a porter converts a checkpoint.
With ``heads == kv_heads`` gemma's attention uses one ``qkv_einsum``; otherwise ``q_einsum`` and ``kv_einsum``.

``PORT_BUGS`` are bugs of a port, planted in its config, its modules or the conversion; ``BUG_MODULES`` where each
must be named (in the original's naming, below the root).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: a bug of the port -> the module of the original where it must be named
BUG_MODULES = {
    "gelu_exact": "layer.0.mlp",  # the first MLP's activation GELU exact where gemma's is tanh
    "swapped_gate_up": "layer.1.mlp",  # gate and up halves swapped: the port's two against gemma's fused one
    "down_scaled": "layer.1.mlp.linear",  # the last MLP's down projection converted scaled by 1.01
    "o_proj_transposed": "layer.1.attn.attn_vec_einsum",  # a square output projection converted untransposed
    "attn_scale": "layer.1.attn",  # the second block's attention scaled by 1.1
    "final_norm_eps": "final_norm",  # the final norm's eps 1e-2
}


@dataclass(frozen=True)
class GemmaSize:
    vocab: int = 64
    width: int = 32
    layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 8
    hidden: int = 48


def gemma_decoder(size: GemmaSize) -> Any:
    """The original: a flax.linen decoder of gemma's modules (its class is made here, once gemma imports)."""
    import flax.linen as nn
    import jax.numpy as jnp

    from tests.library_support import require_library

    modules = require_library("gemma.gm.nn._modules")
    layers = require_library("gemma.gm.nn._layers")

    class GemmaDecoder(nn.Module):
        """gemma's ``Transformer`` without vision and cache: embed, ``layer_{i}`` blocks, final norm, decode."""

        size: GemmaSize

        def setup(self) -> None:
            s = self.size
            self.embedder = modules.Embedder(vocab_size=s.vocab, embed_dim=s.width)
            self.blocks = [modules.Block(
                name=f"layer_{i}", num_heads=s.heads, num_kv_heads=s.kv_heads, embed_dim=s.width,
                head_dim=s.head_dim, hidden_dim=s.hidden, use_post_attn_norm=False, use_post_ffw_norm=False,
                attn_type=modules.AttentionType.GLOBAL, query_pre_attn_scalar=s.head_dim**-0.5,
                transpose_gating_einsum=False) for i in range(s.layers)]
            self.final_norm = layers.RMSNorm()

        def __call__(self, tokens: Any) -> Any:
            x = self.embedder.encode(tokens)
            length = tokens.shape[-1]
            positions = jnp.broadcast_to(jnp.arange(length), tokens.shape)
            mask = jnp.broadcast_to(jnp.tril(jnp.ones((length, length), dtype=bool)), (tokens.shape[0], length, length))
            for block in self.blocks:
                _, x = block(x, positions, None, mask)
            return self.embedder.decode(self.final_norm(x))

    return GemmaDecoder(size)


def make_original(size: GemmaSize, seed: int) -> tuple[Any, dict[str, Any], np.ndarray]:
    """The original, its variables (random, seeded) and token ids of shape (2, 7)."""
    import jax

    model = gemma_decoder(size)
    random = np.random.RandomState(seed)
    ids = random.randint(0, size.vocab, size=(2, 7)).astype(np.int32)
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(seed), ids)["params"]  # no op compiled, no value made
    variables = {"params": jax.tree_util.tree_map(  # every weight random (a norm's scale too: none left at zero)
        lambda a: (0.2 * random.randn(*a.shape)).astype(np.float32), shapes)}
    return model, variables, ids


def convert(variables: dict[str, Any], size: GemmaSize, bugs: frozenset[str] = frozenset()) -> dict[str, Any]:
    """gemma's variables as ``GemmaForCausalLM``'s state dict (``swapped_gate_up``, ``down_scaled``,
    ``o_proj_transposed``: a conversion bug planted, in the last block)."""
    import torch

    params = variables["params"]
    t = lambda a: torch.from_numpy(np.array(a, dtype=np.float32))  # noqa: E731
    n, k, d, h = size.heads, size.kv_heads, size.width, size.head_dim
    state = {"model.embed_tokens.weight": t(params["embedder"]["input_embedding"]),
             "model.norm.weight": t(params["final_norm"]["scale"])}
    for i in range(size.layers):
        block, prefix = params[f"layer_{i}"], f"model.layers.{i}."
        attn = block["attn"]
        if "qkv_einsum" in attn:
            q, kv = attn["qkv_einsum"]["w"][0], attn["qkv_einsum"]["w"][1:]
        else:
            q, kv = attn["q_einsum"]["w"], attn["kv_einsum"]["w"]
        state[prefix + "self_attn.q_proj.weight"] = t(np.transpose(q, (0, 2, 1)).reshape(n * h, d))
        state[prefix + "self_attn.k_proj.weight"] = t(np.transpose(kv[0], (0, 2, 1)).reshape(k * h, d))
        state[prefix + "self_attn.v_proj.weight"] = t(np.transpose(kv[1], (0, 2, 1)).reshape(k * h, d))
        out = np.asarray(attn["attn_vec_einsum"]["w"]).reshape(n * h, d)
        last = i == size.layers - 1
        state[prefix + "self_attn.o_proj.weight"] = t(out if "o_proj_transposed" in bugs and last else out.T)
        gating, linear = np.asarray(block["mlp"]["gating_einsum"]), np.asarray(block["mlp"]["linear"])
        gate, up = (1, 0) if "swapped_gate_up" in bugs and last else (0, 1)
        state[prefix + "mlp.gate_proj.weight"] = t(gating[gate].T)
        state[prefix + "mlp.up_proj.weight"] = t(gating[up].T)
        state[prefix + "mlp.down_proj.weight"] = t(linear.T * (1.01 if "down_scaled" in bugs and last else 1.0))
        state[prefix + "input_layernorm.weight"] = t(block["pre_attention_norm"]["scale"])
        state[prefix + "post_attention_layernorm.weight"] = t(block["pre_ffw_norm"]["scale"])
    return state


def make_port(variables: dict[str, Any], size: GemmaSize, bug: str | None = None) -> Any:
    """transformers' ``GemmaForCausalLM`` with the original's weights converted into it (and ``bug`` planted)."""
    import torch
    from transformers import GemmaConfig, GemmaForCausalLM

    config = GemmaConfig(
        vocab_size=size.vocab, hidden_size=size.width, intermediate_size=size.hidden, num_hidden_layers=size.layers,
        num_attention_heads=size.heads, num_key_value_heads=size.kv_heads, head_dim=size.head_dim,
        rms_norm_eps=1e-6, rope_theta=10_000.0, hidden_act="gelu_pytorch_tanh",
        tie_word_embeddings=True, attn_implementation="eager")
    port = GemmaForCausalLM(config)
    port.load_state_dict(convert(variables, size, frozenset({bug} if bug else ())), strict=False)
    port.lm_head.weight = port.model.embed_tokens.weight
    if bug == "gelu_exact":  # (transformers reads a Gemma config's "gelu" as tanh: the module is swapped instead)
        port.model.layers[0].mlp.act_fn = torch.nn.GELU()
    if bug == "attn_scale":
        port.model.layers[-1].self_attn.scaling *= 1.1
    if bug == "final_norm_eps":
        port.model.norm.eps = 1e-2
    return port.eval()
