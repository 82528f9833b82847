"""litgpt's ``GPT`` built as a small Llama (the original: grouped-query attention with one fused ``qkv`` map, the
rotary tables computed once by the root and handed to every block, the MLP's SiLU in its own code) and transformers'
``LlamaForCausalLM`` with its weights converted in code (``qkv`` split into ``q_proj``, ``k_proj``, ``v_proj`` of
unequal sizes). Their logits agree to float32 rounding.

Bugs are planted on the port instance; ``BUGS`` names the original's module where each is born.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.library_support import require_library

VOCAB, WIDTH, LAYERS, HEADS, GROUPS, HIDDEN = 128, 64, 2, 4, 2, 96
ROOT = "GPT"

#: bug -> the original's module where the difference is born
BUGS = {
    "norm_eps": f"{ROOT}.transformer.h.1.norm_1",  # a block's first RMSNorm with eps 1e-2
    "act_gelu": f"{ROOT}.transformer.h.0.mlp",  # GELU for SiLU (litgpt applies it in the MLP's own code)
    "key_scaled": f"{ROOT}.transformer.h.1.attn.qkv",  # the key projection scaled by 1.05 (litgpt fuses it)
    "attn_scale": f"{ROOT}.transformer.h.0.attn",  # the attention's scale 2% off
    "final_norm_eps": f"{ROOT}.transformer.ln_f",  # the final norm's eps 1e-2
    "down_scaled": f"{ROOT}.transformer.h.1.mlp.proj",  # the down projection's weight scaled by 1.01
}


def original(seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """litgpt's GPT as a two-layer Llama with seeded weights (norm weights drawn near one), in eval mode."""
    require_library("litgpt")
    from litgpt.config import Config
    from litgpt.model import GPT

    config = Config(block_size=64, vocab_size=VOCAB, padded_vocab_size=VOCAB, n_layer=LAYERS, n_head=HEADS,
                    n_query_groups=GROUPS, n_embd=WIDTH, rotary_percentage=1.0, parallel_residual=False, bias=False,
                    norm_class_name="RMSNorm", mlp_class_name="LLaMAMLP", intermediate_size=HIDDEN, norm_eps=1e-5)
    torch.manual_seed(seed)
    model = GPT(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or "ln_f" in name:
                parameter.uniform_(0.5, 1.5)
            elif parameter.dim() == 2:
                parameter.normal_(0.0, parameter.shape[-1] ** -0.5)
    return model.eval().to(dtype)


def inputs(seed: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 11), generator=torch.Generator().manual_seed(300 + seed))


def port(reference: nn.Module, bug: str | None = None) -> nn.Module:
    """transformers' Llama holding ``reference``'s weights, ``bug`` planted."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=HIDDEN, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=GROUPS, rms_norm_eps=1e-5,
                         max_position_embeddings=64, rope_theta=10000.0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).to(next(reference.parameters()).dtype)
    theirs = reference.state_dict()
    head = WIDTH // HEADS
    sizes = (HEADS * head, GROUPS * head, GROUPS * head)
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(theirs["transformer.wte.weight"])
        model.lm_head.weight.copy_(theirs["lm_head.weight"])
        model.model.norm.weight.copy_(theirs["transformer.ln_f.weight"])
        for i, layer in enumerate(model.model.layers):
            block = f"transformer.h.{i}."
            q, k, v = theirs[block + "attn.qkv.weight"].split(sizes)
            attention, mlp = layer.self_attn, layer.mlp
            for mine, value in ((attention.q_proj, q), (attention.k_proj, k), (attention.v_proj, v),
                                (attention.o_proj, theirs[block + "attn.proj.weight"]),
                                (mlp.gate_proj, theirs[block + "mlp.fc_1.weight"]),
                                (mlp.up_proj, theirs[block + "mlp.fc_2.weight"]),
                                (mlp.down_proj, theirs[block + "mlp.proj.weight"])):
                mine.weight.copy_(value)
            layer.input_layernorm.weight.copy_(theirs[block + "norm_1.weight"])
            layer.post_attention_layernorm.weight.copy_(theirs[block + "norm_2.weight"])
    model.eval()
    _plant(model, bug)
    return model


def _plant(model: nn.Module, bug: str | None) -> None:
    layers = model.model.layers
    if bug is None:
        return
    if bug == "norm_eps":
        layers[1].input_layernorm.variance_epsilon = 1e-2
    elif bug == "act_gelu":
        layers[0].mlp.act_fn = nn.GELU()
    elif bug == "key_scaled":
        with torch.no_grad():
            layers[1].self_attn.k_proj.weight.mul_(1.05)
    elif bug == "attn_scale":
        layers[0].self_attn.scaling *= 1.02
    elif bug == "final_norm_eps":
        model.model.norm.variance_epsilon = 1e-2
    elif bug == "down_scaled":
        with torch.no_grad():
            layers[1].mlp.down_proj.weight.mul_(1.01)
    else:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, not {bug!r}")
