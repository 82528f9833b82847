"""transformers' ``ViTForImageClassification`` as the port of a published ViT: one config, one conversion and one
set of planted bugs for every original (timm's ``tests/models/timm_vit.py``, torchvision's
``tests/models/torchvision_vit.py``), each original naming its own tensors.

An original's names are a dict of the port's parts: ``cls``, ``pos``, ``patch`` (the patch projection), ``block``
(a block's prefix, with ``{i}`` its number), and within a block ``qkv_weight`` / ``qkv_bias`` (the fused
projection, split in three here), ``proj``, ``norm1``, ``norm2``, ``fc1``, ``fc2``; then ``norm`` (the final norm)
and ``head``.
"""

from __future__ import annotations

import torch
from torch import nn

LABELS = 10
WIDTH, DEPTH, HEADS, PATCH, IMAGE = 48, 3, 4, 8, 32


def port(reference: nn.Module, names: dict[str, str]) -> nn.Module:
    """transformers' ViT holding ``reference``'s weights, read under ``names``, in the reference's dtype."""
    from transformers import ViTConfig, ViTForImageClassification

    config = ViTConfig(hidden_size=WIDTH, num_hidden_layers=DEPTH, num_attention_heads=HEADS,
                       intermediate_size=2 * WIDTH, image_size=IMAGE, patch_size=PATCH, num_labels=LABELS,
                       layer_norm_eps=1e-6, hidden_act="gelu", qkv_bias=True)
    model = ViTForImageClassification(config).to(next(reference.parameters()).dtype)
    theirs = reference.state_dict()
    with torch.no_grad():
        vit = model.vit
        vit.embeddings.cls_token.copy_(theirs[names["cls"]])
        vit.embeddings.position_embeddings.copy_(theirs[names["pos"]])
        vit.embeddings.patch_embeddings.projection.weight.copy_(theirs[names["patch"] + ".weight"])
        vit.embeddings.patch_embeddings.projection.bias.copy_(theirs[names["patch"] + ".bias"])
        for i, layer in enumerate(vit.layers):
            block = names["block"].format(i=i)
            weight = theirs[block + names["qkv_weight"]].chunk(3)
            bias = theirs[block + names["qkv_bias"]].chunk(3)
            attention = layer.attention
            for k, linear in enumerate((attention.q_proj, attention.k_proj, attention.v_proj)):
                linear.weight.copy_(weight[k])
                linear.bias.copy_(bias[k])
            for mine, part in ((attention.o_proj, "proj"), (layer.layernorm_before, "norm1"),
                               (layer.layernorm_after, "norm2"), (layer.mlp.fc1, "fc1"), (layer.mlp.fc2, "fc2")):
                mine.weight.copy_(theirs[block + names[part] + ".weight"])
                mine.bias.copy_(theirs[block + names[part] + ".bias"])
        vit.layernorm.weight.copy_(theirs[names["norm"] + ".weight"])
        vit.layernorm.bias.copy_(theirs[names["norm"] + ".bias"])
        model.classifier.weight.copy_(theirs[names["head"] + ".weight"])
        model.classifier.bias.copy_(theirs[names["head"] + ".bias"])
    return model.eval()


def plant(model: nn.Module, bug: str | None, bugs: dict[str, str]) -> None:
    """``bug`` planted on the port (None: none); it must be one of the original's ``bugs``."""
    if bug is None:
        return
    if bug not in bugs:
        raise ValueError(f"bug must be one of {sorted(bugs)}, not {bug!r}")
    layers = model.vit.layers
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
        raise ValueError(f"no port of a ViT plants {bug!r}")
