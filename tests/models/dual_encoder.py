"""A CLIP-style dual encoder of our own and a port of it written by another hand: token ids and pixels in, the
similarity of every image with every text out.

``CLIP``, the original: a text tower (``token_embedding``, a learned ``positional_embedding`` parameter added in
the root's own code, pre-norm blocks, ``ln_final``, the text pooled at its end-of-text token, the largest id,
and projected by a *parameter matrix* ``text_projection`` used as ``x @ P``), a vision tower (the vision
transformer of ``vit.py``, its head the image projection), and ``logit_scale`` exponentiated in the root's code.
``forward(text, image)``.

``CLIPPort``, the port, laid out as transformers lays out CLIP: ``text_model`` (embeddings with a position
*Embedding* over position ids, encoder layers of ``vit.py``'s port, ``final_layer_norm``, the pooling inside),
``vision_model`` (``vit.py``'s port), ``text_projection`` and ``visual_projection`` as bias-free ``nn.Linear``
(the matrix transposed), ``forward(input_ids=, pixel_values=)``; loaded from the original's weights by
``CLIPPort.from_original``. ``BUGS`` plants one bug each and says where (the original's naming) it is born.
"""

from __future__ import annotations

import torch
from torch import nn

from . import vit
from .modes import unit_gain

WIDTH, EMBED, VOCAB, TOKENS, LAYERS = vit.WIDTH, 32, 50, 8, 2
ROOT, PORT = "CLIP", "CLIPPort"


class TextTower(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*(vit.Block() for _ in range(LAYERS)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class CLIP(nn.Module):
    """The original: ``forward(text [B, T] ids, image [B, 3, H, W]) -> logits_per_image [B, B]``."""

    def __init__(self) -> None:
        super().__init__()
        self.token_embedding = nn.Embedding(VOCAB, WIDTH)
        self.positional_embedding = nn.Parameter(torch.zeros(TOKENS, WIDTH))
        self.transformer, self.ln_final = TextTower(), nn.LayerNorm(WIDTH)
        self.text_projection = nn.Parameter(torch.zeros(WIDTH, EMBED))
        self.visual = vit.VisionTransformer()
        self.visual.head = nn.Linear(WIDTH, EMBED)
        self.logit_scale = nn.Parameter(torch.tensor(2.0))

    def encode_text(self, text: torch.Tensor) -> torch.Tensor:
        x = self.ln_final(self.transformer(self.token_embedding(text) + self.positional_embedding))
        return x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection

    def forward(self, text: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        image_features, text_features = self.visual(image), self.encode_text(text)
        image_features = image_features / image_features.norm(dim=-1, keepdim=True)
        text_features = text_features / text_features.norm(dim=-1, keepdim=True)
        return self.logit_scale.exp() * image_features @ text_features.t()


class TextEmbeddings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.token_embedding, self.position_embedding = nn.Embedding(VOCAB, WIDTH), nn.Embedding(TOKENS, WIDTH)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.token_embedding(input_ids) + self.position_embedding(torch.arange(input_ids.shape[1]))


class TextModel(nn.Module):
    def __init__(self, bugs: frozenset[str]) -> None:
        super().__init__()
        text_bugs = frozenset({"gelu_tanh"} & bugs)
        self.embeddings, self.layers = TextEmbeddings(), nn.ModuleList(vit.Layer(text_bugs) for _ in range(LAYERS))
        self.final_layer_norm = nn.LayerNorm(WIDTH)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x)
        x = self.final_layer_norm(x)
        return x[torch.arange(x.shape[0]), input_ids.argmax(dim=-1)]  # pooled at the end-of-text token


class VisionModel(nn.Module):
    def __init__(self, bugs: frozenset[str]) -> None:
        super().__init__()
        self.vit = vit.Encoder(16, frozenset({"no_scale"} & bugs))

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.vit(pixel_values)[:, 0]


class CLIPPort(nn.Module):
    """The port: ``forward(input_ids=, pixel_values=) -> logits_per_image``."""

    def __init__(self, bugs: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.bugs = frozenset(bugs)
        self.text_model, self.vision_model = TextModel(self.bugs), VisionModel(self.bugs)
        self.text_projection = nn.Linear(WIDTH, EMBED, bias=False)
        self.visual_projection = nn.Linear(WIDTH, EMBED)
        self.logit_scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, input_ids: torch.Tensor, pixel_values: torch.Tensor) -> torch.Tensor:
        text = self.text_projection(self.text_model(input_ids))  # the text tower first, where the original runs
        image = self.visual_projection(self.vision_model(pixel_values))  # the vision tower first
        image, text = image / image.norm(dim=-1, keepdim=True), text / text.norm(dim=-1, keepdim=True)
        scale = self.logit_scale if "logit_scale" in self.bugs else self.logit_scale.exp()  # the bug: no exp
        return scale * image @ text.t()

    @classmethod
    def from_original(cls, original: CLIP, bugs: set[str] | frozenset[str] = frozenset()) -> CLIPPort:
        """The port with the original's weights, converted as a porter's script would."""
        unknown = set(bugs) - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}")
        port = cls(frozenset(bugs)).to(next(original.parameters()).dtype).eval()
        sd = original.state_dict()
        vision = vit.port_state(original.visual.state_dict())
        new = {f"vision_model.{k}": v for k, v in vision.items() if k.startswith("vit.")}
        new["visual_projection.weight"], new["visual_projection.bias"] = vision["classifier.weight"], \
            vision["classifier.bias"]
        new.update({"text_model.embeddings.token_embedding.weight": sd["token_embedding.weight"],
                    "text_model.embeddings.position_embedding.weight": sd["positional_embedding"],
                    "text_model.final_layer_norm.weight": sd["ln_final.weight"],
                    "text_model.final_layer_norm.bias": sd["ln_final.bias"],
                    "text_projection.weight": sd["text_projection"].t(), "logit_scale": sd["logit_scale"]})
        for i in range(LAYERS):
            new.update(vit.layer_state(sd, f"transformer.blocks.{i}.", f"text_model.layers.{i}."))
        port.load_state_dict(new)
        return port


#: bug -> where its difference is born, in the original's naming
BUGS: dict[str, str] = {
    "gelu_tanh": f"{ROOT}.transformer.blocks.0.mlp.act",  # the text tower's GELU with the tanh approximation
    "no_scale": f"{ROOT}.visual.blocks.0.attn",  # the vision tower's attention without its 1/sqrt(d) scale
    "logit_scale": ROOT,  # the temperature used as stored, without exp (the root's own code)
}

#: the port's module paths in the original's naming (``compare(..., rename=RENAME)``)
RENAME: dict[str, str] = {
    rf"^{PORT}$": ROOT,
    rf"^{PORT}\.text_model\.embeddings\.token_embedding$": f"{ROOT}.token_embedding",
    rf"^{PORT}\.text_model\.layers\.(\d+)": rf"{ROOT}.transformer.blocks.\1",
    rf"^{PORT}\.text_model\.final_layer_norm$": f"{ROOT}.ln_final",
    rf"^{PORT}\.vision_model\.vit\.embeddings\.patch_embeddings$": f"{ROOT}.visual.patch_embed",
    rf"^{PORT}\.vision_model\.vit\.embeddings\.patch_embeddings\.projection$": f"{ROOT}.visual.patch_embed.proj",
    rf"^{PORT}\.vision_model\.vit\.layer\.(\d+)": rf"{ROOT}.visual.blocks.\1",
    rf"^{PORT}\.vision_model\.vit\.layernorm$": f"{ROOT}.visual.norm",
    rf"^{PORT}\.visual_projection$": f"{ROOT}.visual.head",
    **vit.LAYER_RENAME,
}


def build(seed: int = 0, dtype: torch.dtype = torch.float32) -> CLIP:
    """The original with weights from ``seed`` (unit-gain projections), eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = CLIP()
        visual = vit.build(seed)
        visual.head = nn.Linear(WIDTH, EMBED)
        for module in [model.transformer, model.ln_final, visual.head]:
            unit_gain(module)
        with torch.no_grad():
            model.token_embedding.weight.normal_(0.0, 1.0)
            model.positional_embedding.normal_(0.0, 0.5)
            model.text_projection.normal_(0.0, WIDTH**-0.5)
        model.visual = visual
    return model.to(dtype).eval()


def inputs(seed: int = 0, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """``(token ids [2, TOKENS] ending in an end-of-text token, the largest id, at different places; pixels)``."""
    generator = torch.Generator().manual_seed(300 + seed)
    text = torch.randint(1, VOCAB - 1, (2, TOKENS), generator=generator)
    text[0, 5], text[1, 7] = VOCAB - 1, VOCAB - 1
    return text, vit.inputs(seed, dtype=dtype)
