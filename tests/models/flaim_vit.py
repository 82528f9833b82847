"""flaim's ViT (PyPI ``flaim``, "Flax Image Models": flax.linen, compact modules named by class, ``MetaFormerBlock_{i}``
of ``MHSA`` with a fused ``QKV`` and a ``ProjOut``, a ``TransformerMLP`` holding its own norm, a ``ViTHead``) as the
original, and timm's ``VisionTransformer`` as the port (``blocks.{i}`` of ``norm1``/``attn``/``norm2``/``mlp``, the
final norm outside the head), at a tiny size, the weights converted in code. flaim's GELU is exact, as timm's.

flaim 0.0.5 names ``jax.random.KeyArray`` in its annotations, which newer JAX dropped: ``require_library`` gives it
``jax.Array`` for the import (nothing of flaim runs it). Bugs are planted on the port instance or in the
conversion; ``BUGS`` names the original's call where each is born.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from tests.library_support import require_library

LABELS = 10
SIZE = {"depth": 2, "token_dim": 32, "n_heads": 4, "patch_size": 8}
ROOT = "ViT"

#: bug -> the original's call where the difference is born
BUGS = {
    "ln_eps": f"{ROOT}.MetaFormerBlock_1.LayerNorm_0",  # the second block's first norm eps 1e-2
    "gelu_tanh": f"{ROOT}.MetaFormerBlock_0.TransformerMLP_0.MLP_0",  # the first MLP's GELU in its tanh form
    "attn_scale": f"{ROOT}.MetaFormerBlock_1.MHSA_0",  # the second attention's scale 1.1x
    "proj_transposed": f"{ROOT}.MetaFormerBlock_0.MHSA_0.ProjOut_0.Dense_0",  # a square kernel converted untransposed
    "fc2_scaled": f"{ROOT}.MetaFormerBlock_1.TransformerMLP_0.MLP_0.Dense_1",  # converted scaled by 1.02
    "head_norm_eps": f"{ROOT}.ViTHead_0.LayerNorm_0",  # the final norm's eps 1e-2
}


def _flaim():
    return require_library("flaim")  # (given jax.random.KeyArray for its import: library_support.py)


def original(seed: int):
    """``(model, variables)``: flaim's ViT at a tiny size, every variable drawn with numpy, seeded, on the shapes
    ``jax.eval_shape`` of its init gives: kernels scaled by their fan-in, norms' affine parameters, biases, class token
    and position embedding about one and zero."""
    import jax

    flaim = _flaim()
    model = flaim.models.vit.ViT(**SIZE, n_classes=LABELS)
    variables = jax.eval_shape(model.init, jax.random.PRNGKey(seed), np.zeros((1, 32, 32, 3), np.float32))
    rng = np.random.default_rng(seed)

    def drawn(path, leaf):
        name = jax.tree_util.keystr(path)
        if "'scale'" in name:
            return np.asarray(rng.uniform(0.5, 1.5, leaf.shape), np.float32)
        if "'bias'" in name or "'class_token'" in name:
            return np.asarray(rng.normal(0.0, 0.1, leaf.shape), np.float32)
        if "'pos_embed'" in name:
            return np.asarray(rng.normal(0.0, 0.5, leaf.shape), np.float32)
        return np.asarray(rng.normal(0.0, 1.0, leaf.shape) / np.sqrt(np.prod(leaf.shape[:-1])), np.float32)

    return model, jax.tree_util.tree_map_with_path(drawn, variables)


def inputs(seed: int) -> np.ndarray:
    """Two 32x32 images, channels last (16 patches of 8x8)."""
    return np.random.default_rng(300 + seed).standard_normal((2, 32, 32, 3)).astype(np.float32)


def port(variables, bug: str | None = None) -> nn.Module:
    """timm's VisionTransformer holding the Flax model's variables, ``bug`` planted; it takes ``[N, C, H, W]``."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug must be one of {sorted(BUGS)}, not {bug!r}")
    timm = require_library("timm")
    model = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=SIZE["patch_size"], embed_dim=SIZE["token_dim"], depth=SIZE["depth"],
        num_heads=SIZE["n_heads"], num_classes=LABELS, qkv_bias=True).eval()
    p = variables["params"]

    def array(value) -> torch.Tensor:
        return torch.from_numpy(np.array(value, dtype=np.float32))

    def linear(target: nn.Linear, dense, scale: float = 1.0, untransposed: bool = False) -> None:
        kernel = array(dense["kernel"])
        target.weight.copy_((kernel if untransposed else kernel.T) * scale)
        target.bias.copy_(array(dense["bias"]))

    def norm(target: nn.LayerNorm, ln) -> None:
        target.weight.copy_(array(ln["scale"]))
        target.bias.copy_(array(ln["bias"]))

    with torch.no_grad():
        conv = p["PatchEmbed_0"]["Conv_0"]["Conv_0"] if "Conv_0" in p["PatchEmbed_0"]["Conv_0"] else p["PatchEmbed_0"]["Conv_0"]
        model.patch_embed.proj.weight.copy_(array(conv["kernel"]).permute(3, 2, 0, 1))
        model.patch_embed.proj.bias.copy_(array(conv["bias"]))
        model.cls_token.copy_(array(p["ClassToken_0"]["class_token"]))
        model.pos_embed.copy_(array(p["AbsPosEmbed_0"]["pos_embed"])[None])
        for i, block in enumerate(model.blocks):
            b = p[f"MetaFormerBlock_{i}"]
            norm(block.norm1, b["LayerNorm_0"])
            linear(block.attn.qkv, b["MHSA_0"]["QKV_0"]["Dense_0"])
            linear(block.attn.proj, b["MHSA_0"]["ProjOut_0"]["Dense_0"],
                   untransposed=bug == "proj_transposed" and i == 0)
            mlp = b["TransformerMLP_0"]
            norm(block.norm2, mlp["LayerNorm_0"])
            linear(block.mlp.fc1, mlp["MLP_0"]["Dense_0"])
            linear(block.mlp.fc2, mlp["MLP_0"]["Dense_1"], scale=1.02 if bug == "fc2_scaled" and i == 1 else 1.0)
        norm(model.norm, p["ViTHead_0"]["LayerNorm_0"])
        linear(model.head, p["ViTHead_0"]["Dense_0"])
    if bug == "ln_eps":
        model.blocks[1].norm1.eps = 1e-2
    elif bug == "gelu_tanh":
        model.blocks[0].mlp.act = nn.GELU(approximate="tanh")
    elif bug == "attn_scale":
        model.blocks[1].attn.fused_attn = False
        model.blocks[1].attn.scale *= 1.1
    elif bug == "head_norm_eps":
        model.norm.eps = 1e-2
    return model


def trace_original(model, variables, x, debug_path) -> None:
    """The original traced into ``debug_path``."""
    import nbtrace.jax as ntj

    ntj.trace(model, variables, x, debug_path=debug_path)


def port_inputs(x: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The port's input: the original's images, channels first, in ``dtype``."""
    return torch.from_numpy(x).permute(0, 3, 1, 2).contiguous().to(dtype)


def run_port(port: nn.Module, x: torch.Tensor) -> object:
    return port(x)


def live_call(port: nn.Module, x: torch.Tensor) -> object:
    """How the live port is called on the original's recorded images: channels first, in the port's dtype."""
    return port(x.permute(0, 3, 1, 2).to(next(port.parameters()).dtype))
