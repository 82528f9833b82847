"""timm's ResNet-18 (the original, a published image library's house) and transformers' ``ResNetForImageClassification``
built from a ``ResNetConfig`` that matches it, its weights converted from timm's by names, in code: the pair of
tests/test_cnn_port.py. Nothing is downloaded; timm is imported through ``tests/library_support.require_library``.

The two houses differ where a port usually does: transformers wraps each convolution, norm and activation in a
``ResNetConvLayer``, numbers its stages from 0 in a ``ModuleList`` (which layer pruning thins) where timm names them
``layer1…layer4``, runs a block's shortcut before its main branch where timm runs ``downsample`` after it, and its
ReLUs are not in place where timm's are. Their logits agree bit for bit.

Bugs are planted on the port instance; ``BUGS`` names the module of the original where each is born.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.library_support import require_library
from tests.models.library_weights import draw_batch_norms

LABELS = 10
ROOT = "ResNet"
PORT = "ResNetForImageClassification"

#: bug -> the original's module where the difference is born
BUGS = {
    "bn_eps": f"{ROOT}.layer1.1.bn1",  # a BatchNorm's eps 1e-1 instead of 1e-5
    "conv_hw": f"{ROOT}.layer4.0.conv2",  # a 3x3 kernel's height and width swapped in the conversion
    "pool_padding": f"{ROOT}.maxpool",  # the stem's max-pool without its padding: every map after it is smaller
    "relu_dropped": f"{ROOT}.layer1.1",  # the ReLU after the residual add left out (the block's own code)
    # the eps of a shortcut's norm, in a stage the port's default folder prunes (timm's downsample runs after the
    # main branch, the port's shortcut before it)
    "shortcut_eps": f"{ROOT}.layer3.0.downsample.1",
    "train_mode": f"{ROOT}.bn1",  # the port left in train mode: its first norm uses the batch's statistics
}


def original(seed: int, dtype: torch.dtype = torch.float32, depth: int = 18) -> nn.Module:
    """timm's resnet18 (or ``resnet{depth}`` of basic blocks: 34) with seeded weights, its norms' statistics and
    affine parameters drawn too, in eval mode."""
    timm = require_library("timm")
    torch.manual_seed(seed)
    model = timm.create_model(f"resnet{depth}", pretrained=False, num_classes=LABELS)
    draw_batch_norms(model)
    return model.eval().to(dtype)


def inputs(seed: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Two small images (64x64: every stage still has a spatial extent)."""
    return torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(100 + seed)).to(dtype)


_BLOCK = (("conv1.", "layer.0.convolution."), ("bn1.", "layer.0.normalization."), ("conv2.", "layer.1.convolution."),
          ("bn2.", "layer.1.normalization."), ("downsample.0.", "shortcut.convolution."),
          ("downsample.1.", "shortcut.normalization."))


def port_name(name: str) -> str:
    """The port's name of one of timm's state_dict entries."""
    if name.startswith("fc."):
        return "classifier.1." + name[3:]
    for mine, theirs in (("conv1.", "convolution."), ("bn1.", "normalization.")):
        if name.startswith(mine):
            return "resnet.embedder.embedder." + theirs + name[len(mine):]
    stage, block, rest = name.split(".", 2)
    head = f"resnet.encoder.stages.{int(stage[len('layer'):]) - 1}.layers.{block}."
    for mine, theirs in _BLOCK:
        if rest.startswith(mine):
            return head + theirs + rest[len(mine):]
    raise KeyError(name)


def port(reference: nn.Module, bug: str | None = None) -> nn.Module:
    """transformers' ResNet with the reference's weights converted by names, in its dtype, with at most one bug."""
    from transformers import ResNetConfig, ResNetForImageClassification

    depths = [len(getattr(reference, f"layer{n}")) for n in range(1, 5)]
    config = ResNetConfig(embedding_size=64, hidden_sizes=[64, 128, 256, 512], depths=depths,
                          layer_type="basic", num_labels=LABELS)
    model = ResNetForImageClassification(config)
    missing, unexpected = model.load_state_dict(
        {port_name(k): v for k, v in reference.state_dict().items()}, strict=False)
    assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing), (missing, unexpected)
    model = model.eval().to(next(reference.parameters()).dtype)
    stages = model.resnet.encoder.stages
    if bug == "bn_eps":
        stages[0].layers[1].layer[0].normalization.eps = 1e-1
    elif bug == "conv_hw":
        weight = stages[3].layers[0].layer[1].convolution.weight
        with torch.no_grad():
            weight.copy_(weight.transpose(2, 3).clone())
    elif bug == "relu_dropped":
        stages[0].layers[1].activation = nn.Identity()
    elif bug == "pool_padding":
        model.resnet.embedder.pooler.padding = 0
    elif bug == "shortcut_eps":
        stages[2].layers[0].shortcut.normalization.eps = 1e-1
    elif bug == "deep_eps":  # resnet34: a block pruned from both sides' default folders
        stages[2].layers[4].layer[1].normalization.eps = 1e-1
    elif bug == "train_mode":
        model.train()
    elif bug is not None:
        raise ValueError(bug)
    return model
