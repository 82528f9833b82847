"""torchvision's Swin Transformer (the original) and transformers' ``SwinForImageClassification`` built to match it,
its weights converted in code: shifted-window attention with a relative position bias, in two houses. Nothing is
downloaded.

The houses differ where ports of a Swin do: torchvision holds the map channels last as ``(B, H, W, C)`` and runs a
window attention as a function inside ``ShiftedWindowAttention`` (one fused ``qkv`` linear map, the bias table a
parameter of the attention), transformers holds the tokens as ``(B, H·W, C)`` with three projections and the table in
a module of its own; torchvision's ``features`` list holds the patch embedding, the stages and the patch mergings in
turn (``features.0…3``), transformers' stages hold their merging (``layers.0.downsample``). Their logits agree to
float32 rounding.

Bugs are planted on the port instance; ``BUGS`` names the original's module where each is born (where the port
splits what the original fuses, the original's module that holds both).
"""

from __future__ import annotations

import torch
from torch import nn

from tests.library_support import require_library

LABELS = 10
WIDTH, DEPTHS, HEADS, PATCH, WINDOW, IMAGE = 32, (2, 2), (2, 4), 4, 4, 32
ROOT = "SwinTransformer"
PORT = "SwinForImageClassification"

#: bug -> the original's module where the difference is born
BUGS = {
    "norm_eps": f"{ROOT}.features.1.1.norm2",  # the shifted block's second norm with eps 1e-2
    "gelu_tanh": f"{ROOT}.features.3.0.mlp.1",  # GELU's tanh form in a block of the second stage
    # torchvision's window attention (a leaf: its projections run as functions) shifts, partitions and merges the
    # windows itself; the port does that in its block around the attention, so the attention's output has no
    # counterpart and a difference born in it is seen after the block's residual add: named at the block
    "bias_table": f"{ROOT}.features.1.1",  # the relative position bias table scaled by 1.5 in conversion
    "value_scaled": f"{ROOT}.features.3.1",  # a value projection's weight scaled by 1.05
    "merge_eps": f"{ROOT}.features.2.norm",  # the patch merging's norm with eps 1e-2
    "stem_eps": f"{ROOT}.features.0.2",  # the patch embedding's norm with eps 1e-2
}


def original(seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """torchvision's SwinTransformer (two stages) with seeded weights, norms, biases and bias tables drawn too, in
    eval mode."""
    require_library("torchvision")
    from torchvision.models.swin_transformer import SwinTransformer

    torch.manual_seed(seed)
    model = SwinTransformer(patch_size=[PATCH, PATCH], embed_dim=WIDTH, depths=list(DEPTHS), num_heads=list(HEADS),
                            window_size=[WINDOW, WINDOW], stochastic_depth_prob=0.0, num_classes=LABELS)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                parameter.uniform_(0.5, 1.5)
            elif name.endswith("bias") or name.endswith("relative_position_bias_table"):
                parameter.normal_(0.0, 0.5 if "table" in name else 0.1)
            elif parameter.dim() >= 2:
                parameter.normal_(0.0, parameter[0].numel() ** -0.5)
    return model.eval().to(dtype)


def inputs(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(2, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(600 + seed)).to(dtype)


def port(reference: nn.Module, bug: str | None = None) -> nn.Module:
    """transformers' Swin holding ``reference``'s weights (the fused ``qkv`` split in three), ``bug`` planted."""
    from transformers import SwinConfig, SwinForImageClassification

    config = SwinConfig(image_size=IMAGE, patch_size=PATCH, embed_dim=WIDTH, depths=list(DEPTHS),
                        num_heads=list(HEADS), window_size=WINDOW, num_labels=LABELS, layer_norm_eps=1e-5,
                        drop_path_rate=0.0, hidden_act="gelu")
    model = SwinForImageClassification(config).to(next(reference.parameters()).dtype)
    theirs = reference.state_dict()
    mine: dict[str, torch.Tensor] = {
        "swin.embeddings.patch_embeddings.projection.weight": theirs["features.0.0.weight"],
        "swin.embeddings.patch_embeddings.projection.bias": theirs["features.0.0.bias"],
        "swin.embeddings.norm.weight": theirs["features.0.2.weight"],
        "swin.embeddings.norm.bias": theirs["features.0.2.bias"],
        "swin.layernorm.weight": theirs["norm.weight"], "swin.layernorm.bias": theirs["norm.bias"],
        "classifier.weight": theirs["head.weight"], "classifier.bias": theirs["head.bias"],
    }
    for stage, depth in enumerate(DEPTHS):
        for block in range(depth):
            src, dst = f"features.{2 * stage + 1}.{block}.", f"swin.encoder.layers.{stage}.blocks.{block}."
            for k, part in enumerate(("q_proj", "k_proj", "v_proj")):
                mine[f"{dst}attention.{part}.weight"] = theirs[src + "attn.qkv.weight"].chunk(3)[k]
                mine[f"{dst}attention.{part}.bias"] = theirs[src + "attn.qkv.bias"].chunk(3)[k]
            for to, frm in (("attention.o_proj", "attn.proj"), ("layernorm_before", "norm1"),
                            ("layernorm_after", "norm2"), ("mlp.fc1", "mlp.0"), ("mlp.fc2", "mlp.3")):
                mine[f"{dst}{to}.weight"] = theirs[f"{src}{frm}.weight"]
                mine[f"{dst}{to}.bias"] = theirs[f"{src}{frm}.bias"]
            mine[f"{dst}attention.relative_position_bias.relative_position_bias_table"] = \
                theirs[src + "attn.relative_position_bias_table"]
        if stage + 1 < len(DEPTHS):
            src, dst = f"features.{2 * stage + 2}.", f"swin.encoder.layers.{stage}.downsample."
            mine[dst + "reduction.weight"] = theirs[src + "reduction.weight"]
            mine[dst + "norm.weight"], mine[dst + "norm.bias"] = theirs[src + "norm.weight"], theirs[src + "norm.bias"]
    missing, unexpected = model.load_state_dict(mine, strict=False)
    assert not unexpected and not [k for k in missing if "index" not in k], (missing, unexpected)
    model.eval()
    _plant(model, bug)
    return model


def _plant(model: nn.Module, bug: str | None) -> None:
    layers = model.swin.encoder.layers
    if bug is None:
        return
    if bug == "norm_eps":
        layers[0].blocks[1].layernorm_after.eps = 1e-2
    elif bug == "gelu_tanh":
        layers[1].blocks[0].mlp.activation_fn = nn.GELU(approximate="tanh")
    elif bug == "bias_table":
        with torch.no_grad():
            layers[0].blocks[1].attention.relative_position_bias.relative_position_bias_table.mul_(1.5)
    elif bug == "value_scaled":
        with torch.no_grad():
            layers[1].blocks[1].attention.v_proj.weight.mul_(1.05)
    elif bug == "merge_eps":
        layers[0].downsample.norm.eps = 1e-2
    elif bug == "stem_eps":
        model.swin.embeddings.norm.eps = 1e-2
    else:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, not {bug!r}")
