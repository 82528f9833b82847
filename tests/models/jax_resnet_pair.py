"""jax-resnet's ResNet-18 (PyPI ``jax-resnet``: a flax.linen ``Sequential`` of a stem, a max-pool function, blocks of
``ConvBlock`` conv+norm+activation wrappers, a mean and a ``Dense``; every activation ``[N, H, W, C]``) as the original,
and transformers' ``ResNetForImageClassification`` (``[N, C, H, W]``: an embedder of its own, stages numbered from 0,
its conv+norm+activation wrappers ``ResNetConvLayer``) as the port, the weights converted in code, narrow stages
(``hidden_sizes``) so it runs in a second on a CPU. The two houses share no container: the original's blocks are
items ``layers_2`` ... ``layers_9`` of one list, the port's ``encoder.stages.{s}.layers.{b}``.

Bugs are planted on the port instance or in the conversion; ``BUGS`` names the original's call where each is born.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tests.library_support import require_library
from tests.models.library_weights import flax_batch_norm

LABELS = 10
WIDTHS = (16, 32, 48, 64)
ROOT = "Sequential"

#: bug -> the original's call where the difference is born
BUGS = {
    "bn_eps": f"{ROOT}.layers.3.ConvBlock_0.BatchNorm_0",  # a norm's eps 1e-1
    "relu_dropped": f"{ROOT}.layers.4.ConvBlock_0",  # a conv block's ReLU dropped
    "kernel_hw_swapped": f"{ROOT}.layers.6.ConvBlock_1.Conv_0",  # a 3x3 kernel's height and width swapped
    "kernel_scaled": f"{ROOT}.layers.8.ConvBlock_0.Conv_0",  # a kernel scaled by 1.05 in conversion
    "shortcut_eps": f"{ROOT}.layers.8.ResNetSkipConnection_0.ConvBlock_0.BatchNorm_0",  # the shortcut norm's eps
    "head_scaled": f"{ROOT}.layers.11",  # the classifier's kernel scaled by 1.02
}


def original(seed: int):
    """``(model, variables)``: jax-resnet's ResNet-18 with narrow stages, every variable drawn with numpy, seeded, on
    the shapes ``jax.eval_shape`` of its init gives (an eager init compiles each operation: half a minute): kernels
    scaled by their fan-in, norms' statistics and affine parameters about one and zero."""
    require_library("jax_resnet")
    import jax
    import jax_resnet

    model = jax_resnet.ResNet18(n_classes=LABELS, hidden_sizes=WIDTHS)
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(seed), np.zeros((1, 32, 32, 3), np.float32))
    rng = np.random.default_rng(seed)

    def drawn(path, leaf):
        name = jax.tree_util.keystr(path)
        norm = flax_batch_norm(name, leaf.shape, rng)
        if norm is not None:
            return norm
        if "'bias'" in name:
            return np.asarray(rng.normal(0.0, 0.1, leaf.shape), np.float32)
        return np.asarray(rng.normal(0.0, 1.0, leaf.shape) / np.sqrt(np.prod(leaf.shape[:-1])), np.float32)

    return model, jax.tree_util.tree_map_with_path(drawn, variables)


def inputs(seed: int) -> np.ndarray:
    """Two 32x32 images, channels last."""
    return np.random.default_rng(200 + seed).standard_normal((2, 32, 32, 3)).astype(np.float32)


def port(variables, bug: str | None = None) -> nn.Module:
    """transformers' ResNet holding the Flax model's variables, ``bug`` planted; it takes ``[N, C, H, W]`` images."""
    from transformers import ResNetConfig, ResNetForImageClassification

    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, not {bug!r}")
    config = ResNetConfig(embedding_size=64, hidden_sizes=list(WIDTHS), depths=[2, 2, 2, 2], layer_type="basic",
                          num_labels=LABELS)
    model = ResNetForImageClassification(config).eval()
    params, stats = variables["params"], variables["batch_stats"]

    def conv_layer(target: nn.Module, p, s, scale: float = 1.0, hw_swapped: bool = False) -> None:
        kernel = torch.from_numpy(np.array(p["Conv_0"]["kernel"])).permute(3, 2, 0, 1) * scale
        target.convolution.weight.copy_(kernel.transpose(2, 3) if hw_swapped else kernel)
        for name, value in (("weight", p["BatchNorm_0"]["scale"]), ("bias", p["BatchNorm_0"]["bias"]),
                            ("running_mean", s["BatchNorm_0"]["mean"]), ("running_var", s["BatchNorm_0"]["var"])):
            getattr(target.normalization, name).copy_(torch.from_numpy(np.array(value)))

    with torch.no_grad():
        resnet = model.resnet
        conv_layer(resnet.embedder.embedder, params["layers_0"]["ConvBlock_0"], stats["layers_0"]["ConvBlock_0"])
        for k in range(8):
            block = resnet.encoder.stages[k // 2].layers[k % 2]
            p, s = params[f"layers_{k + 2}"], stats[f"layers_{k + 2}"]
            conv_layer(block.layer[0], p["ConvBlock_0"], s["ConvBlock_0"],
                       scale=1.05 if bug == "kernel_scaled" and k == 6 else 1.0)
            conv_layer(block.layer[1], p["ConvBlock_1"], s["ConvBlock_1"], hw_swapped=bug == "kernel_hw_swapped" and k == 4)
            if "ResNetSkipConnection_0" in p:
                conv_layer(block.shortcut, p["ResNetSkipConnection_0"]["ConvBlock_0"],
                           s["ResNetSkipConnection_0"]["ConvBlock_0"])
        head = model.classifier[1]
        head.weight.copy_(torch.from_numpy(np.array(params["layers_11"]["kernel"])).T * (1.02 if bug == "head_scaled" else 1))
        head.bias.copy_(torch.from_numpy(np.array(params["layers_11"]["bias"])))
    if bug == "bn_eps":
        resnet.encoder.stages[0].layers[1].layer[0].normalization.eps = 1e-1
    elif bug == "relu_dropped":
        resnet.encoder.stages[1].layers[0].layer[0].activation = nn.Identity()
    elif bug == "shortcut_eps":
        resnet.encoder.stages[3].layers[0].shortcut.normalization.eps = 1e-1
    return model


def pixels(x: np.ndarray) -> torch.Tensor:
    """The port's input: the original's images, channels first."""
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()


def trace_original(model, variables, x, debug_path) -> None:
    """The original traced into ``debug_path`` (evaluation mode: its norms read their running statistics)."""
    import nbtrace.jax as ntj

    ntj.trace(model, variables, x, debug_path=debug_path)


def port_inputs(x: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The port's input: the original's images, channels first, in ``dtype``."""
    return pixels(x).to(dtype)


def run_port(port: nn.Module, x: torch.Tensor) -> object:
    return port(x)


def live_call(port: nn.Module, x: torch.Tensor) -> object:
    """How the live port is called on the original's recorded images: channels first, in the port's dtype."""
    return port(x.permute(0, 3, 1, 2).to(next(port.parameters()).dtype))
