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
from tests.models import transformers_vit
from tests.models.transformers_vit import DEPTH, HEADS, IMAGE, LABELS, PATCH, WIDTH

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


#: the transformers port's parts, and each one's name in the original's state_dict
NAMES = {
    "cls": "cls_token", "pos": "pos_embed", "patch": "patch_embed.proj", "block": "blocks.{i}.",
    "qkv_weight": "attn.qkv.weight", "qkv_bias": "attn.qkv.bias", "proj": "attn.proj", "norm1": "norm1",
    "norm2": "norm2", "fc1": "mlp.fc1", "fc2": "mlp.fc2", "norm": "norm", "head": "head",
}


def port(reference: nn.Module, bug: str | None = None) -> nn.Module:
    """transformers' ViT holding ``reference``'s weights (the fused ``qkv`` split in three), ``bug`` planted."""
    model = transformers_vit.port(reference, NAMES)
    transformers_vit.plant(model, bug, BUGS)
    return model
