"""An encoder-decoder of our own and a port of it written by another hand: speech in, tokens out (Whisper-like).

``Original``: a convolutional front-end over mel frames (two Conv1d, the second with stride 2, GELU after each),
sinusoidal positions held as a buffer computed at init, pre-LayerNorm encoder layers (self-attention with
separate q/k/v/o projections and eager softmax, a GELU MLP), and a decoder of token embeddings plus learned
positions whose layers run causal self-attention, cross-attention over the encoder's output, and an MLP; a final
LayerNorm and a language-model head. ``forward(input_features, decoder_input_ids)``.

``Port``: the same function written the other way a porter might: other names, a fused ``qkv`` projection for
self-attention and a fused ``kv`` for cross-attention, ``scaled_dot_product_attention``, sinusoidal positions
computed on the fly in each forward (float32 arithmetic of its own), ``forward(features, tokens)``; loaded from
the original's weights by ``Port.from_original``. ``BUGS`` plants one bug each and says where (the original's
naming) its difference is born.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .modes import unit_gain

MELS, WIDTH, HEADS, VOCAB, LAYERS = 12, 64, 4, 97, 2
ROOT = "Original"


def sinusoids(length: int, width: int) -> torch.Tensor:
    """Whisper's sinusoidal positions, ``[length, width]``."""
    scale = math.log(10000) / (width // 2 - 1)
    inv = torch.exp(-scale * torch.arange(width // 2))
    angles = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


class Attention(nn.Module):
    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        self.q_proj, self.k_proj = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH, bias=False)
        self.v_proj, self.out_proj = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, WIDTH)
        self.causal = causal

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        source = x if memory is None else memory
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, HEADS, -1).transpose(1, 2) * (WIDTH // HEADS) ** -0.5
        k = self.k_proj(source).view(b, source.shape[1], HEADS, -1).transpose(1, 2)
        v = self.v_proj(source).view(b, source.shape[1], HEADS, -1).transpose(1, 2)
        scores = q @ k.transpose(-1, -2)
        if self.causal:
            scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), torch.finfo(scores.dtype).min)
        out = scores.softmax(-1) @ v
        return self.out_proj(out.transpose(1, 2).reshape(b, t, WIDTH))


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class EncoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self_attn_layer_norm, self.self_attn = nn.LayerNorm(WIDTH), Attention()
        self.final_layer_norm, self.mlp = nn.LayerNorm(WIDTH), MLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.mlp(self.final_layer_norm(x))


class DecoderLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.self_attn_layer_norm, self.self_attn = nn.LayerNorm(WIDTH), Attention(causal=True)
        self.encoder_attn_layer_norm, self.encoder_attn = nn.LayerNorm(WIDTH), Attention()
        self.final_layer_norm, self.mlp = nn.LayerNorm(WIDTH), MLP()

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        x = x + self.encoder_attn(self.encoder_attn_layer_norm(x), memory)
        return x + self.mlp(self.final_layer_norm(x))


class Encoder(nn.Module):
    def __init__(self, frames: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv1d(MELS, WIDTH, 3, padding=1)
        self.conv2 = nn.Conv1d(WIDTH, WIDTH, 3, stride=2, padding=1)
        self.register_buffer("embed_positions", sinusoids(frames, WIDTH), persistent=False)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(LAYERS))
        self.layer_norm = nn.LayerNorm(WIDTH)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(features)))).transpose(1, 2)
        x = x + self.embed_positions[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens, self.embed_positions = nn.Embedding(VOCAB, WIDTH), nn.Embedding(64, WIDTH)
        self.layers = nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.layer_norm = nn.LayerNorm(WIDTH)

    def forward(self, tokens: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(tokens) + self.embed_positions(torch.arange(tokens.shape[1]))
        for layer in self.layers:
            x = layer(x, memory)
        return self.layer_norm(x)


class Original(nn.Module):
    """The original: ``forward(input_features [B, MELS, T], decoder_input_ids [B, S]) -> logits``."""

    def __init__(self, frames: int = 32) -> None:
        super().__init__()
        self.encoder, self.decoder = Encoder(frames // 2), Decoder()
        self.proj_out = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, input_features: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        return self.proj_out(self.decoder(decoder_input_ids, self.encoder(input_features)))


# -- the port -----------------------------------------------------------------------------------------------------
class FusedAttention(nn.Module):
    """Self-attention (``qkv``) or cross-attention (``q`` and a fused ``kv``), with sdpa."""

    def __init__(self, cross: bool, bugs: frozenset[str]) -> None:
        super().__init__()
        if cross:
            self.q, self.kv = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, 2 * WIDTH)
        else:
            self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.cross, self.causal, self.bugs = cross, False, bugs

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        b, t, _ = x.shape
        if self.cross:
            q, (k, v) = self.q(x), self.kv(memory).chunk(2, dim=-1)
        else:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (y.view(b, y.shape[1], HEADS, -1).transpose(1, 2) for y in (q, k, v))
        scale = 1.0 if self.cross and "cross_scale" in self.bugs else None  # the bug: no 1/sqrt(d) for cross
        out = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal, scale=scale)
        return self.proj(out.transpose(1, 2).reshape(b, t, WIDTH))


class Block(nn.Module):
    def __init__(self, decoder: bool, bugs: frozenset[str]) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(WIDTH), FusedAttention(False, bugs)
        self.attn.causal = decoder
        if decoder:
            self.norm_x, self.xattn = nn.LayerNorm(WIDTH), FusedAttention(True, bugs)
        self.norm2, self.up, self.down = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)
        self.gelu = nn.GELU(approximate="tanh" if "gelu_tanh" in bugs and not decoder else "none")

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        if memory is not None:
            x = x + self.xattn(self.norm_x(x), memory)
        return x + self.down(self.gelu(self.up(self.norm2(x))))


class Port(nn.Module):
    """The port: ``forward(features, tokens) -> logits``."""

    def __init__(self, bugs: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.bugs = frozenset(bugs)
        self.front = nn.Sequential(nn.Conv1d(MELS, WIDTH, 3, padding=1), nn.GELU(),
                                   nn.Conv1d(WIDTH, WIDTH, 3, stride=2, padding=1), nn.GELU())
        self.enc = nn.ModuleList(Block(False, self.bugs) for _ in range(LAYERS))
        self.enc_norm = nn.LayerNorm(WIDTH, eps=1e-3 if "enc_norm_eps" in self.bugs else 1e-5)
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(64, WIDTH)
        self.dec = nn.ModuleList(Block(True, self.bugs) for _ in range(LAYERS))
        self.dec_norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, features: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        x = self.front(features).transpose(1, 2)
        x = x + sinusoids(x.shape[1], WIDTH).to(x.dtype)  # computed here, in its own float32 arithmetic
        for block in self.enc:
            x = block(x)
        memory = self.enc_norm(x)
        start = 1 if "position_offset" in self.bugs else 0  # the bug: learned positions read one place off
        y = self.tok(tokens) + self.pos(torch.arange(start, start + tokens.shape[1]))
        for block in self.dec:
            y = block(y, memory)
        return self.head(self.dec_norm(y))

    @classmethod
    def from_original(cls, original: Original, bugs: set[str] | frozenset[str] = frozenset()) -> Port:
        """The port with the original's weights, converted as a porter's script would."""
        unknown = set(bugs) - set(BUGS)
        if unknown:
            raise ValueError(f"unknown bugs {sorted(unknown)}")
        port = cls(frozenset(bugs)).to(next(original.parameters()).dtype).eval()
        sd = original.state_dict()
        new = {"front.0.weight": sd["encoder.conv1.weight"], "front.0.bias": sd["encoder.conv1.bias"],
               "front.2.weight": sd["encoder.conv2.weight"], "front.2.bias": sd["encoder.conv2.bias"],
               "enc_norm.weight": sd["encoder.layer_norm.weight"], "enc_norm.bias": sd["encoder.layer_norm.bias"],
               "tok.weight": sd["decoder.embed_tokens.weight"], "pos.weight": sd["decoder.embed_positions.weight"],
               "dec_norm.weight": sd["decoder.layer_norm.weight"], "dec_norm.bias": sd["decoder.layer_norm.bias"],
               "head.weight": sd["proj_out.weight"]}
        for side, mine in (("encoder", "enc"), ("decoder", "dec")):
            for i in range(LAYERS):
                pre, to = f"{side}.layers.{i}.", f"{mine}.{i}."
                norms = [("self_attn_layer_norm", "norm1"), ("final_layer_norm", "norm2")]
                if side == "decoder":
                    norms.append(("encoder_attn_layer_norm", "norm_x"))
                for theirs, ours in norms:
                    for part in ("weight", "bias"):
                        new[f"{to}{ours}.{part}"] = sd[f"{pre}{theirs}.{part}"]
                new.update(_attention(sd, pre + "self_attn.", to + "attn.", fused="qkv"))
                if side == "decoder":
                    new.update(_attention(sd, pre + "encoder_attn.", to + "xattn.", fused="kv"))
                for theirs, ours in (("fc1", "up"), ("fc2", "down")):
                    for part in ("weight", "bias"):
                        new[f"{to}{ours}.{part}"] = sd[f"{pre}mlp.{theirs}.{part}"]
        port.load_state_dict(new)
        return port


def _attention(sd: dict, pre: str, to: str, fused: str) -> dict[str, torch.Tensor]:
    zero = torch.zeros_like(sd[pre + "q_proj.bias"])  # k_proj has no bias: a fused projection holds zeros there
    weights = {p: sd[f"{pre}{p}_proj.weight"] for p in "qkv"}
    biases = {"q": sd[pre + "q_proj.bias"], "k": zero, "v": sd[pre + "v_proj.bias"]}
    out = {to + "proj.weight": sd[pre + "out_proj.weight"], to + "proj.bias": sd[pre + "out_proj.bias"]}
    names = "qkv" if fused == "qkv" else "kv"
    out[f"{to}{fused}.weight"] = torch.cat([weights[p] for p in names])
    out[f"{to}{fused}.bias"] = torch.cat([biases[p] for p in names])
    if fused == "kv":
        out[to + "q.weight"], out[to + "q.bias"] = weights["q"], biases["q"]
    return out


#: bug -> where its difference is born, in the original's naming
BUGS: dict[str, str] = {
    "cross_scale": f"{ROOT}.decoder.layers.0.encoder_attn",  # cross-attention forgets its q scale
    "gelu_tanh": f"{ROOT}.encoder.layers.0.mlp",  # the encoder's MLPs use GELU's tanh approximation
    "enc_norm_eps": f"{ROOT}.encoder.layer_norm",  # the encoder's final LayerNorm with eps 1e-3
    "position_offset": f"{ROOT}.decoder",  # learned decoder positions read one place off (its own code)
}


def build(seed: int = 0, dtype: torch.dtype = torch.float32) -> Original:
    """The original with weights from ``seed`` (unit-gain projections: activations of order one), eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Original()
        unit_gain(model)
    return model.to(dtype).eval()


def inputs(seed: int = 0, frames: int = 32, tokens: int = 9, dtype: torch.dtype = torch.float32) -> tuple:
    """``(mel frames [2, MELS, frames], token ids [2, tokens])``."""
    generator = torch.Generator().manual_seed(100 + seed)
    mel = torch.randn(2, MELS, frames, generator=generator).to(dtype)
    return mel, torch.randint(0, VOCAB, (2, tokens), generator=generator)


#: the port's module paths in the original's naming (``compare(..., rename=RENAME)``); the port's GELU modules, its
#: fused projections and its front-end's Sequential have no counterpart
RENAME: dict[str, str] = {
    r"^Port$": ROOT,
    r"^Port\.front\.0$": f"{ROOT}.encoder.conv1",
    r"^Port\.front\.2$": f"{ROOT}.encoder.conv2",
    r"^Port\.enc\.(\d+)": rf"{ROOT}.encoder.layers.\1",
    r"^Port\.enc_norm$": f"{ROOT}.encoder.layer_norm",
    r"^Port\.tok$": f"{ROOT}.decoder.embed_tokens",
    r"^Port\.pos$": f"{ROOT}.decoder.embed_positions",
    r"^Port\.dec\.(\d+)": rf"{ROOT}.decoder.layers.\1",
    r"^Port\.dec_norm$": f"{ROOT}.decoder.layer_norm",
    r"^Port\.head$": f"{ROOT}.proj_out",
    r"\.norm1$": ".self_attn_layer_norm",
    r"\.norm_x$": ".encoder_attn_layer_norm",
    r"\.norm2$": ".final_layer_norm",
    r"\.attn$": ".self_attn",
    r"\.attn\.proj$": ".self_attn.out_proj",
    r"\.xattn$": ".encoder_attn",
    r"\.xattn\.q$": ".encoder_attn.q_proj",
    r"\.xattn\.proj$": ".encoder_attn.out_proj",
    r"\.up$": ".mlp.fc1",
    r"\.down$": ".mlp.fc2",
}
