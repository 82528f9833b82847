"""torchvision's MobileNetV3-Small (the original) and timm's ``mobilenetv3_small_100`` holding its weights, converted
in code: hard-swish and hard-sigmoid, squeeze-and-excitation, depthwise 5x5 kernels, and a head one house runs as a
linear map where the other runs it as a 1x1 convolution. Nothing is downloaded.

The houses differ where ports of a CNN do: torchvision numbers every block in one ``features`` list (the stem, eleven
blocks, the last convolution) where timm groups them in stages (``blocks.0…4``) beside its ``conv_stem`` and
``conv_head``; timm fuses each norm with its activation in one ``BatchNormAct2d``; torchvision's head is
``Linear(576, 1024)`` on the pooled vector, timm's a 1x1 ``conv_head`` on the pooled map (the weight converted by
a reshape), and torchvision's norms have eps 1e-3 where timm's default is 1e-5 (the conversion sets it). Their
logits agree to float32 rounding.

Bugs are planted on the port instance; ``BUGS`` names the original's module where each is born.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.library_support import require_library
from tests.models.library_weights import draw_batch_norms, load_in_order

LABELS = 10
IMAGE = 64
ROOT = "MobileNetV3"
PORT = "MobileNetV3"

#: bug -> the original's module where the difference is born
BUGS = {
    "gate_sigmoid": f"{ROOT}.features.1.block.1.scale_activation",  # the SE gate's hard sigmoid as a smooth one
    "act_relu": f"{ROOT}.features.7.block.0.2",  # a hard-swish after an expansion's norm as a ReLU
    "eps_kept": f"{ROOT}.features.5.block.1.1",  # one norm's eps left at timm's 1e-5 by the conversion
    "kernel_hw": f"{ROOT}.features.9.block.1.0",  # a 5x5 depthwise kernel's height and width swapped
    "head_scaled": f"{ROOT}.classifier.0",  # the head's weight scaled by 1.05 in conversion
}


def original(seed: int, dtype: torch.dtype = torch.float32) -> nn.Module:
    """torchvision's mobilenet_v3_small with seeded weights, its norms' statistics and affine parameters drawn too,
    in eval mode."""
    require_library("torchvision")
    from torchvision.models import mobilenet_v3_small

    torch.manual_seed(seed)
    model = mobilenet_v3_small(num_classes=LABELS)
    draw_batch_norms(model, biased=(nn.Conv2d, nn.Linear))
    return model.eval().to(dtype)


def inputs(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(2, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(500 + seed)).to(dtype)


def port(reference: nn.Module, bug: str | None = None) -> nn.Module:
    """timm's mobilenetv3_small_100 holding ``reference``'s weights (in order; the head's linear weight as a 1x1
    kernel), its norms' eps torchvision's, ``bug`` planted."""
    timm = require_library("timm")
    model = timm.create_model("mobilenetv3_small_100", pretrained=False, num_classes=LABELS)
    load_in_order(model, reference, reshape=True)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.eps = 1e-3
    model = model.eval().to(next(reference.parameters()).dtype)
    _plant(model, bug)
    return model


def _plant(model: nn.Module, bug: str | None) -> None:
    blocks = model.blocks
    if bug is None:
        return
    if bug == "gate_sigmoid":
        blocks[0][0].se.gate = nn.Sigmoid()
    elif bug == "act_relu":
        blocks[3][0].bn1.act = nn.ReLU()
    elif bug == "eps_kept":
        blocks[2][1].bn2.eps = 1e-5
    elif bug == "kernel_hw":
        weight = blocks[4][0].conv_dw.weight
        with torch.no_grad():
            weight.copy_(weight.transpose(2, 3).clone())
    elif bug == "head_scaled":
        with torch.no_grad():
            model.conv_head.weight.mul_(1.05)
    else:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, not {bug!r}")
