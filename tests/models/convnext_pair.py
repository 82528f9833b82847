"""timm's ConvNeXt built channels-first (``conv_mlp=True``: ``LayerNorm2d`` and 1x1 convolutions on ``(N, C, H, W)``)
as the original, and transformers' ``ConvNextForImageClassification`` (its blocks permute to ``(N, H, W, C)`` and
run ``nn.LayerNorm`` and ``nn.Linear`` there) as the port, its weights converted from timm's in code.

Inside every block the two houses hold the same tensors in two layouts: the norm, both projections and the GELU
between them return ``(N, C, H, W)`` in the original and ``(N, H, W, C)`` in the port, so a comparison must read
them through the permutation to name a bug at its leaf. Their logits agree to float32 rounding.

Bugs are planted on the port instance; ``BUGS`` names the original's module where each is born.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.library_support import require_library

LABELS = 10
DIMS = (16, 32, 48, 64)
DEPTHS = (1, 1, 2, 1)
ROOT = "ConvNeXt"
PORT = "ConvNextForImageClassification"

#: bug -> the original's module where the difference is born
BUGS = {
    "norm_eps": f"{ROOT}.stages.2.blocks.1.norm",  # a block's norm with eps 1e-2 (channels-last in the port)
    "gelu_tanh": f"{ROOT}.stages.1.blocks.0.mlp.act",  # GELU's tanh form between the two projections
    "fc1_bias": f"{ROOT}.stages.2.blocks.0.mlp.fc1",  # the first projection's bias scaled by 1.5 in conversion
    "layer_scale": f"{ROOT}.stages.3.blocks.0",  # the block's layer scale applied twice (the block's own code)
    "stem_norm_eps": f"{ROOT}.stem.1",  # the stem's channels-first norm with eps 1e-2
}


def original(seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """timm's ConvNeXt, channels-first, with seeded weights (the layer scales and norms drawn too), in eval mode."""
    require_library("timm")
    from timm.models.convnext import ConvNeXt

    torch.manual_seed(seed)
    model = ConvNeXt(in_chans=3, num_classes=LABELS, depths=DEPTHS, dims=DIMS, conv_mlp=True, ls_init_value=1.0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("gamma"):
                parameter.uniform_(0.5, 1.5)
            elif "norm" in name and name.endswith("weight"):
                parameter.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                parameter.normal_(0.0, 0.1)
    return model.eval().to(dtype)


def inputs(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Two small images (64x64: 16x16 after the stem, 2x2 in the last stage)."""
    return torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(100 + seed)).to(dtype)


def _port_names(name: str) -> str:
    """The port's name of one of the original's parameters."""
    parts = name.split(".")
    if parts[0] == "stem":
        return "convnext.embeddings." + ("patch_embeddings" if parts[1] == "0" else "layernorm") + "." + parts[2]
    if parts[0] == "head":
        return ("convnext.layernorm." if parts[1] == "norm" else "classifier.") + parts[2]
    stage = f"convnext.encoder.stages.{parts[1]}."
    if parts[2] == "downsample":
        return stage + f"downsampling_layer.{parts[3]}.{parts[4]}"
    block = stage + f"layers.{parts[3]}."
    rest = ".".join(parts[4:])
    for theirs, ours in (("conv_dw.", "dwconv."), ("norm.", "layernorm."), ("mlp.fc1.", "pwconv1."),
                         ("mlp.fc2.", "pwconv2."), ("gamma", "layer_scale_parameter")):
        if rest.startswith(theirs):
            return block + ours + rest[len(theirs):]
    raise KeyError(name)


def port(reference: nn.Module, bug: str | None = None) -> nn.Module:
    """transformers' ConvNext holding ``reference``'s weights (1x1 convolutions as linear maps), ``bug`` planted."""
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(num_channels=3, patch_size=4, hidden_sizes=list(DIMS), depths=list(DEPTHS),
                            num_labels=LABELS, layer_scale_init_value=1.0, hidden_act="gelu",
                            layer_norm_eps=1e-6)  # the final norm's (timm's head norm), 1e-12 by default
    model = ConvNextForImageClassification(config).to(next(reference.parameters()).dtype)
    own = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in reference.named_parameters():
            target = own[_port_names(name)]
            target.copy_(value.reshape(target.shape))
    model.eval()
    _plant(model, bug)
    return model


def _plant(model: nn.Module, bug: str | None) -> None:
    stages = model.convnext.encoder.stages
    if bug is None:
        return
    if bug == "norm_eps":
        stages[2].layers[1].layernorm.eps = 1e-2
    elif bug == "gelu_tanh":
        stages[1].layers[0].act = nn.GELU(approximate="tanh")
    elif bug == "fc1_bias":
        with torch.no_grad():
            stages[2].layers[0].pwconv1.bias.mul_(1.5)
    elif bug == "layer_scale":
        layer = stages[3].layers[0]
        layer.__class__ = _scaled_twice(type(layer))
    elif bug == "stem_norm_eps":
        model.convnext.embeddings.layernorm.eps = 1e-2
    else:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, not {bug!r}")


def _scaled_twice(layer_class: type) -> type:
    """A ConvNext layer whose forward applies its layer scale twice: a bug in the block's own code (a class, as code
    is: a float64 copy of the layer runs it on its own weights)."""
    class ScaledTwice(layer_class):
        def forward(self, features: torch.Tensor) -> torch.Tensor:
            out = super().forward(features)
            return out + (self.layer_scale_parameter.reshape(1, -1, 1, 1) - 1) * (out - features)

    return ScaledTwice
