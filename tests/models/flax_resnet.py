"""flaxmodels' ResNet-18 (a published Flax library: every activation held ``[N, H, W, C]``, channels last) as the
original, and timm's ResNet-18 (``[N, C, H, W]``, channels first) as the PyTorch port, its weights converted in code
(each kernel ``(kh, kw, in, out)`` to ``(out, in, kh, kw)``). Every convolution, norm and activation of the two
houses returns the same values with its axes in another order: only the twins' layout sums compare them.

Bugs are planted on the port instance; ``BUGS`` names the original's call where each is born.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tests.library_support import require_library
from tests.models.library_weights import flax_batch_norm

LABELS = 10
ROOT = "ResNet"

#: bug -> the original's call where the difference is born
BUGS = {
    "bn_eps": f"{ROOT}.BasicBlock_1.BatchNorm_0",  # a norm's eps 1e-1
    "conv_scaled": f"{ROOT}.BasicBlock_4.Conv_1",  # a kernel scaled by 1.05 in conversion
    "shortcut_eps": f"{ROOT}.BasicBlock_6.BatchNorm_2",  # the shortcut's norm's eps 1e-1
    "stem_norm_eps": f"{ROOT}.BatchNorm_0",  # the stem's norm eps 1e-1
}


def original(seed: int):
    """``(model, variables)``: flaxmodels' ResNet-18 without its input normalisation, seeded, its norms' statistics
    and affine parameters drawn too."""
    require_library("flaxmodels")
    import flaxmodels
    import jax

    model = flaxmodels.ResNet18(output="logits", pretrained=None, normalize=False, num_classes=LABELS)
    variables = model.init(jax.random.PRNGKey(seed), np.zeros((1, 32, 32, 3), np.float32), train=False)
    rng = np.random.default_rng(seed)

    def drawn(path, leaf):
        norm = flax_batch_norm(jax.tree_util.keystr(path), leaf.shape, rng)
        return norm if norm is not None else np.asarray(leaf)

    return model, jax.tree_util.tree_map_with_path(drawn, jax.device_get(variables))


def inputs(seed: int) -> np.ndarray:
    """Two 32x32 images, channels last (a 1x1 map in the last stage)."""
    return np.random.default_rng(100 + seed).standard_normal((2, 32, 32, 3)).astype(np.float32)


def port(variables, bug: str | None = None) -> nn.Module:
    """timm's resnet18 holding the Flax model's variables, ``bug`` planted; it takes ``[N, C, H, W]`` images."""
    timm = require_library("timm")
    model = timm.create_model("resnet18", pretrained=False, num_classes=LABELS).eval()
    params, stats = variables["params"], variables["batch_stats"]

    def conv(target: nn.Conv2d, kernel) -> None:
        target.weight.copy_(torch.from_numpy(np.array(kernel)).permute(3, 2, 0, 1))

    def norm(target: nn.BatchNorm2d, p, s) -> None:
        for name, value in (("weight", p["scale"]), ("bias", p["bias"]), ("running_mean", s["mean"]),
                            ("running_var", s["var"])):
            getattr(target, name).copy_(torch.from_numpy(np.array(value)))

    with torch.no_grad():
        conv(model.conv1, params["Conv_0"]["kernel"])
        norm(model.bn1, params["BatchNorm_0"], stats["BatchNorm_0"])
        for k in range(8):
            block = getattr(model, f"layer{k // 2 + 1}")[k % 2]
            p, s = params[f"BasicBlock_{k}"], stats[f"BasicBlock_{k}"]
            conv(block.conv1, p["Conv_0"]["kernel"])
            norm(block.bn1, p["BatchNorm_0"], s["BatchNorm_0"])
            conv(block.conv2, p["Conv_1"]["kernel"])
            norm(block.bn2, p["BatchNorm_1"], s["BatchNorm_1"])
            if block.downsample is not None:
                conv(block.downsample[0], p["Conv_2"]["kernel"])
                norm(block.downsample[1], p["BatchNorm_2"], s["BatchNorm_2"])
        model.fc.weight.copy_(torch.from_numpy(np.array(params["Dense_0"]["kernel"])).T)
        model.fc.bias.copy_(torch.from_numpy(np.array(params["Dense_0"]["bias"])))
    _plant(model, bug)
    return model


def _plant(model: nn.Module, bug: str | None) -> None:
    if bug is None:
        return
    if bug == "bn_eps":
        model.layer1[1].bn1.eps = 1e-1
    elif bug == "conv_scaled":
        with torch.no_grad():
            model.layer3[0].conv2.weight.mul_(1.05)
    elif bug == "shortcut_eps":
        model.layer4[0].downsample[1].eps = 1e-1
    elif bug == "stem_norm_eps":
        model.bn1.eps = 1e-1
    else:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, not {bug!r}")
