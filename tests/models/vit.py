"""A vision transformer of our own and a port of it written by another hand: pixels in, class logits out (ViT-like).

``VisionTransformer``, the original, is laid out as a widely used vision library lays out its ViT: a convolutional
patch embedding (``patch_embed.proj``, then ``patch_embed.norm`` an Identity), a class token and learned positions
added in the root's own code, ``pos_drop`` and ``norm_pre`` (Dropout and Identity), blocks with a fused ``qkv``,
eager softmax, ``q_norm``/``k_norm``/``ls1``/``drop_path1`` and more Identity and Dropout modules that compute
nothing in eval mode, a final LayerNorm, ``fc_norm`` (Identity), ``head_drop`` and the head on the class token.
``forward(pixels [B, 3, H, W])``.

``ViTPort``, the port, is laid out as transformers lays out its ViT: ``vit.embeddings`` holding the class token,
the positions and a *linear* patch projection over unfolded patches, separate ``query``/``key``/``value``, sdpa,
one ``dropout`` per layer called twice (after attention and after the MLP), ``classifier``; loaded from the
original's weights by ``ViTPort.from_original``. ``BUGS`` plants one bug each and says where (the original's
naming) its difference is born.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .modes import unit_gain

CHANNELS, PATCH, WIDTH, HEADS, LAYERS, CLASSES = 3, 4, 64, 4, 3, 10
ROOT, PORT = "VisionTransformer", "ViTPort"


# -- the original -------------------------------------------------------------------------------------------------
class PatchEmbed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj, self.norm = nn.Conv2d(CHANNELS, WIDTH, PATCH, stride=PATCH), nn.Identity()

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.norm(self.proj(pixels).flatten(2).transpose(1, 2))


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.q_norm, self.k_norm = nn.Identity(), nn.Identity()
        self.attn_drop, self.proj, self.proj_drop = nn.Dropout(0.0), nn.Linear(WIDTH, WIDTH), nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        scores = (q * (WIDTH // HEADS) ** -0.5) @ k.transpose(-2, -1)
        out = self.attn_drop(scores.softmax(-1)) @ v
        return self.proj_drop(self.proj(out.transpose(1, 2).reshape(b, t, WIDTH)))


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.drop1 = nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Dropout(0.0)
        self.norm, self.fc2, self.drop2 = nn.Identity(), nn.Linear(4 * WIDTH, WIDTH), nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop2(self.fc2(self.norm(self.drop1(self.act(self.fc1(x))))))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(WIDTH, eps=1e-6), Attention()
        self.ls1, self.drop_path1 = nn.Identity(), nn.Identity()
        self.norm2, self.mlp = nn.LayerNorm(WIDTH, eps=1e-6), Mlp()
        self.ls2, self.drop_path2 = nn.Identity(), nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))


class VisionTransformer(nn.Module):
    """The original: ``forward(pixels [B, 3, H, W]) -> logits [B, CLASSES]`` (the class token's)."""

    def __init__(self, image: int = 16) -> None:
        super().__init__()
        self.patch_embed = PatchEmbed()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, WIDTH))
        self.pos_embed = nn.Parameter(torch.zeros(1, (image // PATCH) ** 2 + 1, WIDTH))
        self.pos_drop, self.norm_pre = nn.Dropout(0.0), nn.Identity()
        self.blocks = nn.Sequential(*(Block() for _ in range(LAYERS)))
        self.norm, self.fc_norm, self.head_drop = nn.LayerNorm(WIDTH, eps=1e-6), nn.Identity(), nn.Dropout(0.0)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(pixels)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(self.norm_pre(self.pos_drop(x))))
        return self.head(self.head_drop(self.fc_norm(x[:, 0])))


# -- the port -----------------------------------------------------------------------------------------------------
class PatchEmbeddings(nn.Module):
    def __init__(self, bugs: frozenset[str]) -> None:
        super().__init__()
        self.projection, self.bugs = nn.Linear(CHANNELS * PATCH * PATCH, WIDTH), bugs

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        b, c, h, w = pixels.shape
        patches = pixels.reshape(b, c, h // PATCH, PATCH, w // PATCH, PATCH)
        # (channel, row, column) within a patch, as the converted conv weight is laid out; the bug: (row, column,
        # channel), the layout of an image held channels-last
        order = (0, 2, 4, 3, 5, 1) if "patch_order" in self.bugs else (0, 2, 4, 1, 3, 5)
        return self.projection(patches.permute(*order).reshape(b, -1, c * PATCH * PATCH))


class Embeddings(nn.Module):
    def __init__(self, image: int, bugs: frozenset[str]) -> None:
        super().__init__()
        self.cls_token = nn.Parameter(torch.zeros(1, 1, WIDTH))
        self.position_embeddings = nn.Parameter(torch.zeros(1, (image // PATCH) ** 2 + 1, WIDTH))
        self.patch_embeddings, self.dropout = PatchEmbeddings(bugs), nn.Dropout(0.0)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.patch_embeddings(pixels)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1)
        return self.dropout(x + self.position_embeddings)


class SelfAttention(nn.Module):
    def __init__(self, bugs: frozenset[str]) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.dense, self.bugs = nn.Linear(WIDTH, WIDTH), bugs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (p(x).view(b, t, HEADS, -1).transpose(1, 2) for p in (self.query, self.key, self.value))
        out = F.scaled_dot_product_attention(q, k, v, scale=1.0 if "no_scale" in self.bugs else None)
        return self.dense(out.transpose(1, 2).reshape(b, t, WIDTH))


class Intermediate(nn.Module):
    def __init__(self, bugs: frozenset[str]) -> None:
        super().__init__()
        self.dense = nn.Linear(WIDTH, 4 * WIDTH)
        self.intermediate_act_fn = nn.GELU(approximate="tanh" if "gelu_tanh" in bugs else "none")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.intermediate_act_fn(self.dense(x))


class Layer(nn.Module):
    def __init__(self, bugs: frozenset[str]) -> None:
        super().__init__()
        self.layernorm_before = nn.LayerNorm(WIDTH, eps=1e-5 if "norm_eps" in bugs else 1e-6)
        self.attention, self.dropout = SelfAttention(bugs), nn.Dropout(0.0)
        self.layernorm_after, self.intermediate = nn.LayerNorm(WIDTH, eps=1e-6), Intermediate(bugs)
        self.output = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.dropout(self.attention(self.layernorm_before(x)))  # one dropout module, called twice
        return x + self.dropout(self.output(self.intermediate(self.layernorm_after(x))))


class Encoder(nn.Module):
    def __init__(self, image: int, bugs: frozenset[str]) -> None:
        super().__init__()
        self.embeddings = Embeddings(image, bugs)
        self.layer = nn.ModuleList(Layer(bugs) for _ in range(LAYERS))
        self.layernorm = nn.LayerNorm(WIDTH, eps=1e-6)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(pixels)
        for layer in self.layer:
            x = layer(x)
        return self.layernorm(x)


class ViTPort(nn.Module):
    """The port: ``forward(pixel_values=...) -> logits``."""

    def __init__(self, image: int = 16, bugs: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.vit, self.classifier = Encoder(image, frozenset(bugs)), nn.Linear(WIDTH, CLASSES)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.vit(pixel_values)[:, 0])

    @classmethod
    def from_original(cls, original: VisionTransformer, bugs: set[str] | frozenset[str] = frozenset()) -> ViTPort:
        """The port with the original's weights, converted as a porter's script would (``qkv_swap``: the fused qkv
        split in the wrong order, key and value exchanged)."""
        unknown = set(bugs) - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}")
        image = PATCH * round((original.pos_embed.shape[1] - 1) ** 0.5)
        port = cls(image, frozenset(bugs)).to(next(original.parameters()).dtype).eval()
        new = port_state(original.state_dict(), qkv_swap="qkv_swap" in bugs)
        port.load_state_dict(new)
        return port


def port_state(sd: dict[str, torch.Tensor], qkv_swap: bool = False) -> dict[str, torch.Tensor]:
    """The port's state dict from the original's (``qkv_swap``: the fused qkv split as query, value, key)."""
    new = {"vit.embeddings.cls_token": sd["cls_token"], "vit.embeddings.position_embeddings": sd["pos_embed"],
           "vit.embeddings.patch_embeddings.projection.weight": sd["patch_embed.proj.weight"].reshape(WIDTH, -1),
           "vit.embeddings.patch_embeddings.projection.bias": sd["patch_embed.proj.bias"],
           "vit.layernorm.weight": sd["norm.weight"], "vit.layernorm.bias": sd["norm.bias"],
           "classifier.weight": sd["head.weight"], "classifier.bias": sd["head.bias"]}
    names = ("query", "value", "key") if qkv_swap else ("query", "key", "value")
    for i in range(LAYERS):
        new.update(layer_state(sd, f"blocks.{i}.", f"vit.layer.{i}.", names))
    return new


def layer_state(sd: dict[str, torch.Tensor], pre: str, to: str,
                names: tuple[str, str, str] = ("query", "key", "value")) -> dict[str, torch.Tensor]:
    """One of the port's layers (``to``) from one of the original's blocks (``pre``): the fused qkv split into
    ``names`` in that order."""
    new = {}
    for theirs, ours in (("norm1", "layernorm_before"), ("norm2", "layernorm_after"), ("attn.proj",
                         "attention.dense"), ("mlp.fc1", "intermediate.dense"), ("mlp.fc2", "output")):
        for part in ("weight", "bias"):
            new[f"{to}{ours}.{part}"] = sd[f"{pre}{theirs}.{part}"]
    for part in ("weight", "bias"):
        for name, piece in zip(names, sd[f"{pre}attn.qkv.{part}"].chunk(3)):
            new[f"{to}attention.{name}.{part}"] = piece
    return new


#: bug -> where its difference is born, in the original's naming
BUGS: dict[str, str] = {
    "gelu_tanh": f"{ROOT}.blocks.0.mlp.act",  # the MLP's GELU with the tanh approximation
    "no_scale": f"{ROOT}.blocks.0.attn",  # attention without its 1/sqrt(d) scale
    "norm_eps": f"{ROOT}.blocks.0.norm1",  # the first LayerNorm with eps 1e-5 instead of 1e-6
    "qkv_swap": f"{ROOT}.blocks.0.attn",  # key and value exchanged when the fused qkv weight was split
    "patch_order": f"{ROOT}.patch_embed",  # patches flattened channels-last against a channels-first weight
}

#: inside a layer: the port's names of a block's modules in the original's (a dual encoder's towers use them too)
LAYER_RENAME: dict[str, str] = {
    r"\.layernorm_before$": ".norm1",
    r"\.layernorm_after$": ".norm2",
    r"\.attention$": ".attn",
    r"\.attention\.dense$": ".attn.proj",
    r"\.intermediate\.dense$": ".mlp.fc1",
    r"\.intermediate\.intermediate_act_fn$": ".mlp.act",
    r"\.output$": ".mlp.fc2",
}

#: the port's module paths in the original's naming (``compare(..., rename=RENAME)``); a ``#k`` after a path picks
#: its k-th call: the port's one dropout per layer is two Dropout modules of the original
RENAME: dict[str, str] = {
    rf"^{PORT}$": ROOT,
    rf"^{PORT}\.vit\.embeddings\.patch_embeddings$": f"{ROOT}.patch_embed",
    rf"^{PORT}\.vit\.embeddings\.patch_embeddings\.projection$": f"{ROOT}.patch_embed.proj",
    rf"^{PORT}\.vit\.embeddings\.dropout$": f"{ROOT}.pos_drop",
    rf"^{PORT}\.vit\.layer\.(\d+)": rf"{ROOT}.blocks.\1",
    rf"^{PORT}\.vit\.layernorm$": f"{ROOT}.norm",
    rf"^{PORT}\.classifier$": f"{ROOT}.head",
    **LAYER_RENAME,
    r"\.dropout#0$": ".attn.proj_drop#0",
    r"\.dropout#1$": ".mlp.drop2#0",
}


def build(seed: int = 0, dtype: torch.dtype = torch.float32) -> VisionTransformer:
    """The original with weights from ``seed`` (unit-gain projections: activations of order one), eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = VisionTransformer()
        unit_gain(model)
        with torch.no_grad():
            model.cls_token.normal_(0.0, 1.0)
            model.pos_embed.normal_(0.0, 0.5)
    return model.to(dtype).eval()


def inputs(seed: int = 0, image: int = 16, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Pixels ``[2, 3, image, image]``."""
    generator = torch.Generator().manual_seed(200 + seed)
    return torch.randn(2, CHANNELS, image, image, generator=generator).to(dtype)
