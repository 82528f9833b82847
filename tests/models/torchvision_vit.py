"""torchvision's VisionTransformer (the original) and transformers' ``ViTForImageClassification`` built to match it,
its weights converted in code: the pair of tests/test_torchvision_port.py. Nothing is downloaded; torchvision is
imported through ``tests/library_support.require_library``.

The houses differ where ports of a ViT do: torchvision's attention is ``nn.MultiheadAttention`` (one fused
``in_proj_weight``, a parameter of the attention module itself, and under ``no_grad`` in eval mode PyTorch's fused
fast path: one native kernel for the whole attention), where transformers projects queries, keys and values with
three linear maps and calls its attention interface; torchvision's blocks are a ``Sequential`` named
``encoder_layer_0…`` (which layer pruning does not thin), transformers' a numbered ``ModuleList``; torchvision
adds its position table inside the encoder, transformers inside its embeddings. Their logits agree to float32
rounding.

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
_LAYER = f"{ROOT}.encoder.layers.encoder_layer_"

#: bug -> the original's module where the difference is born
BUGS = {
    "norm_eps": f"{_LAYER}1.ln_1",  # a block's first norm with eps 1e-2
    "gelu_tanh": f"{_LAYER}2.mlp.1",  # GELU's tanh form in one block's MLP
    "value_scaled": f"{_LAYER}0.self_attention",  # the value projection's weight scaled by 1.05 in conversion
    "attn_scale": f"{_LAYER}1.self_attention",  # the attention's scale 2% off (the attention's own code)
    "final_norm_eps": f"{ROOT}.encoder.ln",  # the final norm's eps 1e-2
    "patch_bias": f"{ROOT}.conv_proj",  # the patch projection's bias left out in conversion
}


def original(seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """torchvision's ViT with seeded weights (norms, biases, class token and position table drawn too), in eval
    mode."""
    require_library("torchvision")
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(seed)
    model = VisionTransformer(image_size=IMAGE, patch_size=PATCH, num_layers=DEPTH, num_heads=HEADS,
                              hidden_dim=WIDTH, mlp_dim=2 * WIDTH, num_classes=LABELS)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "ln" in name and name.endswith("weight"):
                parameter.uniform_(0.5, 1.5)
            elif name.endswith("bias") or name in ("class_token", "encoder.pos_embedding"):
                parameter.normal_(0.0, 0.1)
            elif name.endswith("weight") and parameter.dim() >= 2:
                parameter.normal_(0.0, parameter[0].numel() ** -0.5)
    return model.eval().to(dtype)


def inputs(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(2, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(300 + seed)).to(dtype)


#: the transformers port's parts, and each one's name in the original's state_dict
NAMES = {
    "cls": "class_token", "pos": "encoder.pos_embedding", "patch": "conv_proj",
    "block": "encoder.layers.encoder_layer_{i}.", "qkv_weight": "self_attention.in_proj_weight",
    "qkv_bias": "self_attention.in_proj_bias", "proj": "self_attention.out_proj", "norm1": "ln_1", "norm2": "ln_2",
    "fc1": "mlp.0", "fc2": "mlp.3", "norm": "encoder.ln", "head": "heads.head",
}


def port(reference: nn.Module, bug: str | None = None) -> nn.Module:
    """transformers' ViT holding ``reference``'s weights (the fused ``in_proj`` split in three), ``bug`` planted."""
    model = transformers_vit.port(reference, NAMES)
    transformers_vit.plant(model, bug, BUGS)
    return model
