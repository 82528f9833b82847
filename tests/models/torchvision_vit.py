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

LABELS = 10
WIDTH, DEPTH, HEADS, PATCH, IMAGE = 48, 3, 4, 8, 32
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


def port(reference: nn.Module, bug: str | None = None) -> nn.Module:
    """transformers' ViT holding ``reference``'s weights (the fused ``in_proj`` split in three), ``bug`` planted."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=WIDTH, num_hidden_layers=DEPTH, num_attention_heads=HEADS,
                       intermediate_size=2 * WIDTH, image_size=IMAGE, patch_size=PATCH, num_labels=LABELS,
                       layer_norm_eps=1e-6, hidden_act="gelu", qkv_bias=True)
    model = ViTForImageClassification(config).to(next(reference.parameters()).dtype)
    theirs = reference.state_dict()
    with torch.no_grad():
        vit = model.vit
        vit.embeddings.cls_token.copy_(theirs["class_token"])
        vit.embeddings.position_embeddings.copy_(theirs["encoder.pos_embedding"])
        vit.embeddings.patch_embeddings.projection.weight.copy_(theirs["conv_proj.weight"])
        vit.embeddings.patch_embeddings.projection.bias.copy_(theirs["conv_proj.bias"])
        for i, layer in enumerate(vit.layers):
            block = f"encoder.layers.encoder_layer_{i}."
            weight = theirs[block + "self_attention.in_proj_weight"].chunk(3)
            bias = theirs[block + "self_attention.in_proj_bias"].chunk(3)
            attention = layer.attention
            for k, linear in enumerate((attention.q_proj, attention.k_proj, attention.v_proj)):
                linear.weight.copy_(weight[k])
                linear.bias.copy_(bias[k])
            for mine, name in ((attention.o_proj, "self_attention.out_proj"), (layer.layernorm_before, "ln_1"),
                               (layer.layernorm_after, "ln_2"), (layer.mlp.fc1, "mlp.0"), (layer.mlp.fc2, "mlp.3")):
                mine.weight.copy_(theirs[block + name + ".weight"])
                mine.bias.copy_(theirs[block + name + ".bias"])
        vit.layernorm.weight.copy_(theirs["encoder.ln.weight"])
        vit.layernorm.bias.copy_(theirs["encoder.ln.bias"])
        model.classifier.weight.copy_(theirs["heads.head.weight"])
        model.classifier.bias.copy_(theirs["heads.head.bias"])
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
    elif bug == "patch_bias":
        with torch.no_grad():
            model.vit.embeddings.patch_embeddings.projection.bias.zero_()
    else:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, not {bug!r}")
