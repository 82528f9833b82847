"""timm's VisionTransformer (the original) and transformers' ``ViTForImageClassification`` built to match it, its
weights converted from timm's in code: a published library's house against another's.

The houses differ where ports of a ViT do: timm projects queries, keys and values with one fused ``qkv`` linear map
and calls ``scaled_dot_product_attention``; transformers projects them with three (``q_proj``, ``k_proj``,
``v_proj``) and calls its attention interface; timm's patch embedding flattens inside ``patch_embed``,
transformers' inside ``patch_embeddings``; timm keeps a class token and position table as parameters of the model,
transformers inside its embeddings. Their logits agree to float32 rounding.

Bugs are planted on the port instance; ``BUGS`` names the original's module where each is born (where the port
splits what the original fuses, the original's module that holds both).
"""

from __future__ import annotations

import torch
from torch import nn

from tests.library_support import require_library

LABELS = 10
WIDTH, DEPTH, HEADS, PATCH, IMAGE = 48, 3, 4, 8, 32
ROOT = "VisionTransformer"
PORT = "ViTForImageClassification"

#: bug -> the original's module where the difference is born
BUGS = {
    "norm_eps": f"{ROOT}.blocks.1.norm1",  # a block's first norm with eps 1e-2
    "gelu_tanh": f"{ROOT}.blocks.2.mlp.act",  # GELU's tanh form in one block's MLP
    "value_scaled": f"{ROOT}.blocks.0.attn.qkv",  # the value projection's weight scaled by 1.05 in conversion
    "attn_scale": f"{ROOT}.blocks.1.attn",  # the attention's scale 2% off (the attention's own code)
    "final_norm_eps": f"{ROOT}.norm",  # the final norm's eps 1e-2
}


def original(seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """timm's ViT with seeded weights (norms and biases drawn too), in eval mode."""
    require_library("timm")
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(seed)
    model = VisionTransformer(img_size=IMAGE, patch_size=PATCH, num_classes=LABELS, embed_dim=WIDTH, depth=DEPTH,
                              num_heads=HEADS, mlp_ratio=2.0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                parameter.uniform_(0.5, 1.5)
            elif name.endswith("bias") or name in ("cls_token", "pos_embed"):
                parameter.normal_(0.0, 0.1)
    return model.eval().to(dtype)


def inputs(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(2, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(200 + seed)).to(dtype)


def port(reference: nn.Module, bug: str | None = None) -> nn.Module:
    """transformers' ViT holding ``reference``'s weights (the fused ``qkv`` split in three), ``bug`` planted."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=WIDTH, num_hidden_layers=DEPTH, num_attention_heads=HEADS,
                       intermediate_size=2 * WIDTH, image_size=IMAGE, patch_size=PATCH, num_labels=LABELS,
                       layer_norm_eps=1e-6, hidden_act="gelu", qkv_bias=True)
    model = ViTForImageClassification(config).to(next(reference.parameters()).dtype)
    theirs = reference.state_dict()
    with torch.no_grad():
        vit = model.vit
        vit.embeddings.cls_token.copy_(theirs["cls_token"])
        vit.embeddings.position_embeddings.copy_(theirs["pos_embed"])
        vit.embeddings.patch_embeddings.projection.weight.copy_(theirs["patch_embed.proj.weight"])
        vit.embeddings.patch_embeddings.projection.bias.copy_(theirs["patch_embed.proj.bias"])
        for i, layer in enumerate(vit.layers):
            block = f"blocks.{i}."
            weight, bias = theirs[block + "attn.qkv.weight"].chunk(3), theirs[block + "attn.qkv.bias"].chunk(3)
            attention = layer.attention
            for k, linear in enumerate((attention.q_proj, attention.k_proj, attention.v_proj)):
                linear.weight.copy_(weight[k])
                linear.bias.copy_(bias[k])
            for mine, name in ((attention.o_proj, "attn.proj"), (layer.layernorm_before, "norm1"),
                               (layer.layernorm_after, "norm2"), (layer.mlp.fc1, "mlp.fc1"),
                               (layer.mlp.fc2, "mlp.fc2")):
                mine.weight.copy_(theirs[block + name + ".weight"])
                mine.bias.copy_(theirs[block + name + ".bias"])
        vit.layernorm.weight.copy_(theirs["norm.weight"])
        vit.layernorm.bias.copy_(theirs["norm.bias"])
        model.classifier.weight.copy_(theirs["head.weight"])
        model.classifier.bias.copy_(theirs["head.bias"])
    model.eval()
    _plant(model, bug)
    return model


def _plant(model: nn.Module, bug: str | None) -> None:
    layers = model.vit.layers
    if bug is None:
        return
    if bug == "norm_eps":
        layers[1].layernorm_before.eps = 1e-2
    elif bug == "gelu_tanh":
        layers[2].mlp.activation_fn = nn.GELU(approximate="tanh")
    elif bug == "value_scaled":
        with torch.no_grad():
            layers[0].attention.v_proj.weight.mul_(1.05)
    elif bug == "attn_scale":
        layers[1].attention.scaling *= 1.02
    elif bug == "final_norm_eps":
        model.vit.layernorm.eps = 1e-2
    else:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, not {bug!r}")
