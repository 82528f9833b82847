"""A small ViT encoder written in flax.linen (the "original") and a timm-like PyTorch port of it.

Built from code with a seed (nothing is downloaded). The Flax model takes NHWC pixels, the port NCHW:
``make_vit_pair`` returns the same values both ways (``pixels_np`` NHWC, ``pixels_torch`` NCHW).

Flax names (compact modules): ``patch_embed`` (``nn.Conv``, kernel ``[p, p, C, hidden]``), params ``cls_token``
``[1, 1, hidden]`` and ``pos_embedding`` ``[1, 1 + patches, hidden]``, ``layers_0``… (``ln_1``, ``attn`` with
``query``/``key``/``value`` (``nn.DenseGeneral`` to ``[B, T, N, H]``) and ``out``, ``ln_2``, ``mlp`` with
``fc1``/``fc2``), ``encoder_norm``, ``head``. Port names: ``patch_embed`` (``nn.Conv2d``), ``cls_token``,
``pos_embed``, ``blocks.0``… (``norm1``, ``attn`` with ``q``/``k``/``v``/``proj``, ``norm2``, ``mlp`` with
``fc1``/``act``/``fc2``), ``norm``, ``head``.

Planted bugs. Port (``TorchViT(bugs=...)``): ``"gelu"`` (tanh approximation), ``"norm_eps"`` (1e-5 instead of
1e-6 in every LayerNorm), ``"query_scale"`` (1/head_dim instead of head_dim**-0.5). Conversion
(``convert_vit(bugs=...)``): ``"transposed_kernel"`` (attn q of layer 0 loaded without the transpose; square).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import torch

from .flax_decoder_port import check_bugs as _check_bugs
from .flax_decoder_port import float32_tensor as _t

PORT_BUGS = frozenset({"gelu", "norm_eps", "query_scale"})
CONVERSION_BUGS = frozenset({"transposed_kernel"})
BUGS = PORT_BUGS | CONVERSION_BUGS


@dataclass(frozen=True)
class ViTConfig:
    image: int = 16
    channels: int = 3
    patch: int = 4
    hidden: int = 32
    layers: int = 2
    heads: int = 4
    mlp: int = 64
    classes: int = 10
    eps: float = 1e-6
    dtype: str = "float32"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def tokens(self) -> int:
        return 1 + (self.image // self.patch) ** 2


# ---------------------------------------------------------------- the Flax original


class FlaxAttention(nn.Module):
    config: ViTConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c, kw = self.config, {"dtype": self.dtype, "param_dtype": self.param_dtype}
        q = nn.DenseGeneral(features=(c.heads, c.head_dim), name="query", **kw)(x)  # [B, T, N, H]
        k = nn.DenseGeneral(features=(c.heads, c.head_dim), name="key", **kw)(x)
        v = nn.DenseGeneral(features=(c.heads, c.head_dim), name="value", **kw)(x)
        q = q * jnp.asarray(c.head_dim ** -0.5, dtype=q.dtype)
        scores = jnp.einsum("btnh,bsnh->bnts", q, k).astype(jnp.float32)
        probs = jax.nn.softmax(scores, axis=-1).astype(self.dtype)
        out = jnp.einsum("bnts,bsnh->btnh", probs, v)
        return nn.DenseGeneral(features=c.hidden, axis=(-2, -1), name="out", **kw)(out)


class FlaxMlp(nn.Module):
    config: ViTConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kw = {"dtype": self.dtype, "param_dtype": self.param_dtype}
        x = nn.Dense(self.config.mlp, name="fc1", **kw)(x)
        x = nn.gelu(x, approximate=False)
        return nn.Dense(self.config.hidden, name="fc2", **kw)(x)


class FlaxViTBlock(nn.Module):
    config: ViTConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        c, kw = self.config, {"dtype": self.dtype, "param_dtype": self.param_dtype}
        x = x + FlaxAttention(c, name="attn", **kw)(nn.LayerNorm(epsilon=c.eps, name="ln_1", **kw)(x))
        return x + FlaxMlp(c, name="mlp", **kw)(nn.LayerNorm(epsilon=c.eps, name="ln_2", **kw)(x))


class FlaxViT(nn.Module):
    config: ViTConfig
    dtype: Any = jnp.float32
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, pixels: jax.Array) -> jax.Array:
        """``pixels`` NHWC [B, image, image, channels] -> logits [B, classes]."""
        c, kw = self.config, {"dtype": self.dtype, "param_dtype": self.param_dtype}
        x = nn.Conv(features=c.hidden, kernel_size=(c.patch, c.patch), strides=(c.patch, c.patch),
                    padding="VALID", name="patch_embed", **kw)(pixels)
        b = x.shape[0]
        x = x.reshape(b, -1, c.hidden)  # patches in row-major (h, w) order
        init = nn.initializers.normal(stddev=0.02)
        cls = self.param("cls_token", init, (1, 1, c.hidden), self.param_dtype)
        pos = self.param("pos_embedding", init, (1, c.tokens, c.hidden), self.param_dtype)
        x = jnp.concatenate([jnp.broadcast_to(cls.astype(self.dtype), (b, 1, c.hidden)), x], axis=1)
        x = x + pos.astype(self.dtype)
        for i in range(c.layers):
            x = FlaxViTBlock(c, name=f"layers_{i}", **kw)(x)
        x = nn.LayerNorm(epsilon=c.eps, name="encoder_norm", **kw)(x)
        return nn.Dense(c.classes, name="head", **kw)(x[:, 0])


# ---------------------------------------------------------------- the PyTorch port


class TorchViTAttention(torch.nn.Module):
    def __init__(self, config: ViTConfig, bugs: frozenset[str]):
        super().__init__()
        c = config
        self.heads, self.head_dim = c.heads, c.head_dim
        self.scale = 1.0 / c.head_dim if "query_scale" in bugs else c.head_dim ** -0.5
        self.q = torch.nn.Linear(c.hidden, c.hidden)
        self.k = torch.nn.Linear(c.hidden, c.hidden)
        self.v = torch.nn.Linear(c.hidden, c.hidden)
        self.proj = torch.nn.Linear(c.hidden, c.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (m(x).view(b, t, self.heads, self.head_dim).transpose(1, 2) for m in (self.q, self.k, self.v))
        scores = torch.matmul(q * self.scale, k.transpose(-1, -2)).float()
        probs = torch.softmax(scores, dim=-1).to(x.dtype)
        return self.proj(torch.matmul(probs, v).transpose(1, 2).reshape(b, t, d))


class TorchViTMlp(torch.nn.Module):
    def __init__(self, config: ViTConfig, bugs: frozenset[str]):
        super().__init__()
        self.fc1 = torch.nn.Linear(config.hidden, config.mlp)
        self.act = torch.nn.GELU(approximate="tanh" if "gelu" in bugs else "none")
        self.fc2 = torch.nn.Linear(config.mlp, config.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


class TorchViTBlock(torch.nn.Module):
    def __init__(self, config: ViTConfig, bugs: frozenset[str]):
        super().__init__()
        eps = 1e-5 if "norm_eps" in bugs else config.eps
        self.norm1 = torch.nn.LayerNorm(config.hidden, eps=eps)
        self.attn = TorchViTAttention(config, bugs)
        self.norm2 = torch.nn.LayerNorm(config.hidden, eps=eps)
        self.mlp = TorchViTMlp(config, bugs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TorchViT(torch.nn.Module):
    def __init__(self, config: ViTConfig, bugs: frozenset[str] = frozenset()):
        super().__init__()
        bugs = frozenset(bugs)
        _check_bugs(bugs, PORT_BUGS)
        c = config
        self.config, self.bugs = c, bugs
        self.patch_embed = torch.nn.Conv2d(c.channels, c.hidden, kernel_size=c.patch, stride=c.patch)
        self.cls_token = torch.nn.Parameter(torch.zeros(1, 1, c.hidden))
        self.pos_embed = torch.nn.Parameter(torch.zeros(1, c.tokens, c.hidden))
        self.blocks = torch.nn.ModuleList(TorchViTBlock(c, bugs) for _ in range(c.layers))
        self.norm = torch.nn.LayerNorm(c.hidden, eps=1e-5 if "norm_eps" in bugs else c.eps)
        self.head = torch.nn.Linear(c.hidden, c.classes)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """``pixels`` NCHW [B, channels, image, image] -> logits [B, classes]."""
        x = self.patch_embed(pixels).flatten(2).transpose(1, 2)  # [B, patches, hidden], row-major (h, w)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)[:, 0])


# ---------------------------------------------------------------- conversion and the pair


def convert_vit(params: Any, config: ViTConfig, bugs: frozenset[str] = frozenset()) -> dict[str, torch.Tensor]:
    """A float32 state_dict for ``TorchViT`` from the Flax params (``{"params": ...}`` or the inner tree)."""
    bugs = frozenset(bugs)
    _check_bugs(bugs, CONVERSION_BUGS)
    p = params.get("params", params)
    c = config
    sd = {
        "patch_embed.weight": _t(p["patch_embed"]["kernel"]).permute(3, 2, 0, 1),  # HWIO -> OIHW
        "patch_embed.bias": _t(p["patch_embed"]["bias"]),
        "cls_token": _t(p["cls_token"]),
        "pos_embed": _t(p["pos_embedding"]),
        "norm.weight": _t(p["encoder_norm"]["scale"]),
        "norm.bias": _t(p["encoder_norm"]["bias"]),
        "head.weight": _t(p["head"]["kernel"]).T,
        "head.bias": _t(p["head"]["bias"]),
    }
    for i in range(c.layers):
        layer, pre = p[f"layers_{i}"], f"blocks.{i}."
        attn, mlp = layer["attn"], layer["mlp"]
        for flax_name, torch_name in (("query", "q"), ("key", "k"), ("value", "v")):
            kernel = _t(attn[flax_name]["kernel"]).reshape(c.hidden, c.hidden)  # [D, N, H] -> [D, N*H]
            buggy = "transposed_kernel" in bugs and i == 0 and torch_name == "q"
            sd[f"{pre}attn.{torch_name}.weight"] = kernel if buggy else kernel.T
            sd[f"{pre}attn.{torch_name}.bias"] = _t(attn[flax_name]["bias"]).reshape(-1)
        sd[pre + "attn.proj.weight"] = _t(attn["out"]["kernel"]).reshape(-1, c.hidden).T  # [N, H, D]
        sd[pre + "attn.proj.bias"] = _t(attn["out"]["bias"])
        for name in ("fc1", "fc2"):
            sd[f"{pre}mlp.{name}.weight"] = _t(mlp[name]["kernel"]).T
            sd[f"{pre}mlp.{name}.bias"] = _t(mlp[name]["bias"])
        for flax_name, torch_name in (("ln_1", "norm1"), ("ln_2", "norm2")):
            sd[f"{pre}{torch_name}.weight"] = _t(layer[flax_name]["scale"])
            sd[f"{pre}{torch_name}.bias"] = _t(layer[flax_name]["bias"])
    return {k: v.contiguous() for k, v in sd.items()}


class ViTPair(NamedTuple):
    flax_model: FlaxViT
    params: dict
    torch_model: TorchViT
    pixels_np: np.ndarray
    pixels_torch: torch.Tensor
    config: ViTConfig


def make_vit_pair(seed: int = 0, dtype: str = "float32", bugs: frozenset[str] = frozenset(),
                  config: ViTConfig | None = None, batch: int = 2) -> ViTPair:
    """The Flax original (computing in ``dtype``, float32 params) and its converted port (in ``dtype``), with
    seeded pixels: ``pixels_np`` NHWC float32 for Flax, ``pixels_torch`` the same values NCHW in ``dtype``."""
    bugs = frozenset(bugs)
    _check_bugs(bugs, BUGS)
    config = replace(config or ViTConfig(), dtype=dtype)
    flax_model = FlaxViT(config, dtype=jnp.dtype(dtype), param_dtype=jnp.float32)
    shape = (batch, config.image, config.image, config.channels)
    pixels = np.random.RandomState(seed).standard_normal(shape).astype(np.float32)
    params = {"params": flax_model.init(jax.random.PRNGKey(seed), jnp.asarray(pixels))["params"]}
    torch_model = TorchViT(config, bugs & PORT_BUGS)
    torch_model.load_state_dict(convert_vit(params, config, bugs & CONVERSION_BUGS), strict=True)
    torch_dtype = getattr(torch, dtype)
    torch_model = torch_model.to(torch_dtype).eval()
    pixels_torch = torch.from_numpy(pixels.transpose(0, 3, 1, 2).copy()).to(torch_dtype)
    return ViTPair(flax_model, params, torch_model, pixels, pixels_torch, config)
