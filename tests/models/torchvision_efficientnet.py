"""torchvision's EfficientNet-B0 (the original) and timm's ``efficientnet_b0`` holding its weights, converted in
code: depthwise convolutions, squeeze-and-excitation blocks and SiLU in two houses. Nothing is downloaded; both
libraries are imported through ``tests/library_support.require_library``.

The houses differ where ports of a CNN do: torchvision wraps each convolution, norm and activation in a
``Conv2dNormActivation`` (a ``Sequential`` numbered 0, 1, 2), numbers a block's parts in a ``Sequential`` and pools
its squeeze with an ``AdaptiveAvgPool2d`` module; timm fuses each norm with the activation after it in one
``BatchNormAct2d`` (the activation a child of the norm), names a block's parts (``conv_pw``, ``conv_dw``, ``se``,
``conv_pwl``) and squeezes with ``x.mean`` inline. The weights are converted in order (both ``state_dict`` s list
them alike). Their logits agree to float32 rounding.

Bugs are planted on the port instance; ``BUGS`` names the original's module where each is born.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.library_support import require_library
from tests.models.library_weights import draw_batch_norms, load_in_order

LABELS = 10
IMAGE = 64
ROOT = "EfficientNet"
PORT = "EfficientNet"

#: bug -> the original's module where the difference is born
BUGS = {
    "bn_eps": f"{ROOT}.features.2.0.block.1.1",  # a depthwise convolution's norm with eps 1e-1
    "gate_hard": f"{ROOT}.features.3.0.block.2.scale_activation",  # an SE gate's sigmoid in its hard form
    "kernel_hw": f"{ROOT}.features.3.1.block.1.0",  # a 5x5 depthwise kernel's height and width swapped
    "se_scaled": f"{ROOT}.features.6.0.block.2.fc1",  # an SE squeeze's weight scaled by 1.05 in conversion
    # the SiLU after an expansion's norm left out: timm fuses the norm and its activation in one call
    # (BatchNormAct2d), so the bug is named at the call of the original that holds both
    "act_dropped": f"{ROOT}.features.4.0.block.0",
    "head_eps": f"{ROOT}.features.8.1",  # the head's norm with eps 1e-1
}


def original(seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """torchvision's efficientnet_b0 with seeded weights, its norms' statistics and affine parameters drawn too, in
    eval mode."""
    require_library("torchvision")
    from torchvision.models import efficientnet_b0

    torch.manual_seed(seed)
    model = efficientnet_b0(num_classes=LABELS)
    draw_batch_norms(model, biased=(nn.Conv2d,))
    return model.eval().to(dtype)


def inputs(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Two small images (64x64: the last stage still has a 2x2 map)."""
    return torch.randn(2, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(400 + seed)).to(dtype)


def port(reference: nn.Module, bug: str | None = None) -> nn.Module:
    """timm's efficientnet_b0 holding ``reference``'s weights (converted in order, shapes checked), ``bug``
    planted."""
    timm = require_library("timm")
    model = timm.create_model("efficientnet_b0", pretrained=False, num_classes=LABELS)
    load_in_order(model, reference)
    model = model.eval().to(next(reference.parameters()).dtype)
    _plant(model, bug)
    return model


def _plant(model: nn.Module, bug: str | None) -> None:
    blocks = model.blocks
    if bug is None:
        return
    if bug == "bn_eps":
        blocks[1][0].bn2.eps = 1e-1
    elif bug == "gate_hard":
        blocks[2][0].se.gate = nn.Hardsigmoid()
    elif bug == "kernel_hw":
        weight = blocks[2][1].conv_dw.weight
        with torch.no_grad():
            weight.copy_(weight.transpose(2, 3).clone())
    elif bug == "se_scaled":
        with torch.no_grad():
            blocks[5][0].se.conv_reduce.weight.mul_(1.05)
    elif bug == "act_dropped":
        blocks[3][0].bn1.act = nn.Identity()
    elif bug == "head_eps":
        model.bn2.eps = 1e-1
    else:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, not {bug!r}")
