"""recurrentgemma (PyPI, Google DeepMind): its Flax Griffin as the original and the library's own PyTorch Griffin as
the port, weights converted by the library's own ``conversion.flax_params_to_pytorch_state_dict``: a published
library's two implementations of one model (a recurrent RG-LRU block, a local attention block, gated MLPs), their
logits agreeing to 1e-6 in float32. Random weights, built from a config; nothing downloaded.

``BUG_MODULES`` are bugs planted in the port, and where each must be named (in the original's naming, below the
root).
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import torch
from torch import nn

from tests.library_support import require_library

#: a bug of the port -> the module of the original where it must be named
BUG_MODULES = {
    "down_scaled": "blocks.1.mlp_block.ffw_down",  # the second MLP's down projection converted scaled by 1.01
    "gelu_exact": "blocks.0.mlp_block",  # the first MLP's gate through GELU's exact form (the library: tanh)
    "lru_a_scaled": "blocks.0.recurrent_block.rg_lru",  # the RG-LRU's decay parameter converted scaled by 1.05
    "q_transposed": "blocks.1.attention_block.proj_q",  # the square query projection converted untransposed
}


def config() -> Any:
    common = require_library("recurrentgemma.common")
    return common.GriffinConfig(
        vocab_size=64, width=32, mlp_expanded_width=48, num_heads=4, lru_width=32,
        block_types=(common.TemporalBlockType.RECURRENT, common.TemporalBlockType.ATTENTION),
        embeddings_scale_by_sqrt_dim=True, attention_window_size=2048, logits_soft_cap=30.0)


def make_original(seed: int) -> tuple[Any, dict, Any, Any]:
    """``(Flax Griffin, its variables, tokens, positions)``: the library's initialisation moved by a seeded draw (its
    zero biases and unit scales alone would hide bugs that meet them)."""
    import jax
    import jax.numpy as jnp

    griffin = require_library("recurrentgemma.jax.griffin")
    model = griffin.Griffin(config())
    tokens = jnp.asarray(np.random.RandomState(seed).randint(0, 64, size=(2, 8)).astype(np.int32))
    positions = jnp.asarray(np.repeat(np.arange(8)[None], 2, axis=0).astype(np.int32))
    variables = model.init(jax.random.PRNGKey(seed), tokens, segment_pos=positions)
    leaves, tree = jax.tree_util.tree_flatten(variables)
    keys = jax.random.split(jax.random.PRNGKey(seed + 100), len(leaves))
    leaves = [leaf + 0.05 * jax.random.normal(key, leaf.shape, leaf.dtype) for leaf, key in zip(leaves, keys)]
    return model, jax.tree_util.tree_unflatten(tree, leaves), tokens, positions


def make_port(variables: dict, bug: str | None = None) -> nn.Module:
    """The library's PyTorch Griffin holding ``variables`` (converted by the library), with at most one bug."""
    conversion = require_library("recurrentgemma.conversion")
    griffin = require_library("recurrentgemma.torch.griffin")
    port = griffin.Griffin(config()).eval()
    state = {k.removeprefix("params."): v for k, v in conversion.flax_params_to_pytorch_state_dict(variables).items()}
    if bug == "down_scaled":
        state["blocks.1.mlp_block.ffw_down.weight"] = state["blocks.1.mlp_block.ffw_down.weight"] * 1.01
    elif bug == "lru_a_scaled":
        state["blocks.0.recurrent_block.rg_lru.a_param"] = state["blocks.0.recurrent_block.rg_lru.a_param"] * 1.05
    elif bug == "q_transposed":
        state["blocks.1.attention_block.proj_q.weight"] = state["blocks.1.attention_block.proj_q.weight"].T
    missing, unexpected = port.load_state_dict(state, strict=True), None
    del missing, unexpected
    if bug == "gelu_exact":
        mlp = port.blocks[0].mlp_block

        def forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
            out = self.ffw_up(x)
            return self.ffw_down(nn.functional.gelu(out[0]) * out[1])

        mlp.forward = types.MethodType(forward, mlp)
    return port


def port_inputs(tokens: Any, positions: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.tensor(np.asarray(tokens), dtype=torch.long), torch.tensor(np.asarray(positions), dtype=torch.long))
