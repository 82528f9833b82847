"""A toy original and its port, as a port's own repository would hold them.

The original is written the textbook way (separate q/k/v projections, an explicit softmax, exact GELU); the
port the way a port often is (one fused qkv projection, ``scaled_dot_product_attention``, its own names and
signature: ``forward(tokens, pad_mask)``), with a converter that copies the original's weights. ``PLANTED`` are
bugs a port could have; ``TOY_PORT_BUG`` (an environment variable) plants one, for the docs' demonstration.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import nn

WIDTH, HEADS, LAYERS, VOCAB = 48, 4, 2, 97
#: a bug each: what a port could get wrong, and the module of the original where it shows
PLANTED = {
    "gelu_tanh": "ToyEncoder.blocks.1.mlp",  # the tanh approximation of GELU, in the second block only
    # attention scores not divided by sqrt(head size): the port has no attention module of its own (its qkv and
    # out projections sit in the layer), so the layer holding it is what both sides have
    "no_scale": "ToyEncoder.blocks.0",
    "eps": "ToyEncoder.blocks.0.norm1",  # LayerNorm eps 1e-6 where the original has 1e-5
}
#: the original's arguments, as the port calls them
PORT_INPUTS = {"input_ids": "tokens", "attention_mask": "pad_mask"}


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = (nn.Linear(WIDTH, WIDTH) for _ in range(4))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = (proj(x).view(b, t, HEADS, -1).transpose(1, 2) for proj in (self.q, self.k, self.v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        out = scores.softmax(-1) @ v
        return self.o(out.transpose(1, 2).reshape(b, t, WIDTH))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = Attention()
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), attention_mask)
        return x + self.mlp(self.norm2(x))


class ToyEncoder(nn.Module):
    """The original: token and position embeddings, ``LAYERS`` pre-norm blocks, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.position = nn.Embedding(VOCAB, WIDTH), nn.Embedding(32, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm, self.head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids) + self.position(torch.arange(input_ids.shape[1]))
        for block in self.blocks:
            x = block(x, attention_mask)
        return self.head(self.norm(x))


def build_original(seed: int = 0) -> ToyEncoder:
    torch.manual_seed(seed)
    return ToyEncoder().eval()


def make_inputs(seed: int = 1) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (2, 12), generator=generator)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 9:] = 0  # the second sequence is padded
    return {"input_ids": ids, "attention_mask": mask}


# -- the port -------------------------------------------------------------------------------------------------
class PortLayer(nn.Module):
    def __init__(self, bug: str | None, index: int) -> None:
        super().__init__()
        eps = 1e-6 if bug == "eps" else 1e-5
        self.pre_attn, self.pre_ff = nn.LayerNorm(WIDTH, eps=eps), nn.LayerNorm(WIDTH, eps=eps)
        self.qkv, self.out = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.up, self.down = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)
        self.approximate = "tanh" if bug == "gelu_tanh" and index == 1 else "none"
        self.scale = 1.0 if bug == "no_scale" else None

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.qkv(self.pre_attn(x)).view(b, t, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=self.scale)
        x = x + self.out(attended.transpose(1, 2).reshape(b, t, WIDTH))
        return x + self.down(F.gelu(self.up(self.pre_ff(x)), approximate=self.approximate))


class ToyPort(nn.Module):
    """The port: another structure and other names, the same function (unless a bug was planted)."""

    def __init__(self, bug: str | None = None) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(VOCAB, WIDTH), nn.Embedding(32, WIDTH)
        self.layers = nn.ModuleList(PortLayer(bug, i) for i in range(LAYERS))
        self.final_norm, self.lm_head = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor, pad_mask: torch.Tensor) -> torch.Tensor:
        x = self.tokens(tokens) + self.positions.weight[: tokens.shape[1]]
        keep = pad_mask[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, keep)
        return self.lm_head(self.final_norm(x))

    @classmethod
    def from_original(cls, original: ToyEncoder, bug: str | None = None) -> ToyPort:
        """The port with the original's weights (q, k and v fused into one projection)."""
        if bug is not None and bug not in PLANTED:
            raise ValueError(f"unknown bug {bug!r}; one of {sorted(PLANTED)}")
        port = cls(bug).eval()
        with torch.no_grad():
            port.tokens.weight.copy_(original.embed.weight)
            port.positions.weight.copy_(original.position.weight)
            for layer, block in zip(port.layers, original.blocks):
                layer.pre_attn.load_state_dict(block.norm1.state_dict())
                layer.pre_ff.load_state_dict(block.norm2.state_dict())
                attn = block.attn
                layer.qkv.weight.copy_(torch.cat([attn.q.weight, attn.k.weight, attn.v.weight]))
                layer.qkv.bias.copy_(torch.cat([attn.q.bias, attn.k.bias, attn.v.bias]))
                layer.out.load_state_dict(attn.o.state_dict())
                layer.up.load_state_dict(block.mlp[0].state_dict())
                layer.down.load_state_dict(block.mlp[2].state_dict())
            port.final_norm.load_state_dict(original.norm.state_dict())
            port.lm_head.load_state_dict(original.head.state_dict())
        return port


def planted_bug() -> str | None:
    """The bug ``TOY_PORT_BUG`` asks for (unset or empty: none)."""
    return os.environ.get("TOY_PORT_BUG") or None
