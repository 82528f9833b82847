"""transformers' GPT-2 as the original, and a from-scratch port of it written the natural way.

The original is ``GPT2LMHeadModel`` from a small config (fixed seed, nothing downloaded, eager
attention). The port, ``Gpt2Port``, is plain torch with its own names (``blocks.N.attn.qkv``,
``blocks.N.mlp.fc_in/fc_out``), its own ``forward(ids)`` signature, position embeddings looked up
from 1-D position ids (``[T]``, so its ``pos`` output is ``[T, D]`` where GPT-2's ``wpe`` gives
``[1, T, D]``), and GPT-2's ``Conv1D`` weights (``[in, out]``) converted the natural way into
``nn.Linear`` (``[out, in]``: transposed) by ``convert_weights``.

``BUGS`` maps each bug planted in the port's own code to the module of the ORIGINAL where it
originates (a's naming); ``None`` is the clean port, which computes the same function.
"""

from __future__ import annotations

import math

import torch
from torch import nn

VOCAB = 96
HIDDEN = 128
HEADS = 4
LAYERS = 2
POSITIONS = 32
EPS = 1e-5
SEQ = 16
ROOT = "GPT2LMHeadModel"
T = f"{ROOT}.transformer"

#: bug -> the module of the original where it originates (a's naming)
BUGS: dict[str, str] = {
    "causal_off_by_one": f"{T}.h.0.attn",  # every token also sees the next one (mask diagonal shifted)
    "no_attn_scale": f"{T}.h.0.attn",  # scores not divided by sqrt(head_dim)
    "ln_eps": f"{T}.h.0.ln_1",  # every LayerNorm uses eps=1e-3 instead of the config's 1e-5
    "scaled_fc_in": f"{T}.h.1.mlp.c_fc",  # the converter scales layer 1's transposed c_fc weight by 1.01
}

#: b's module paths -> a's, for ``compare(..., rename=RENAME)``
RENAME: dict[str, str] = {
    r"^Gpt2Port$": ROOT,
    r"^Gpt2Port\.tok$": f"{T}.wte",
    r"^Gpt2Port\.pos$": f"{T}.wpe",
    r"^Gpt2Port\.blocks\.": f"{T}.h.",
    r"^Gpt2Port\.norm_out$": f"{T}.ln_f",
    r"^Gpt2Port\.head$": f"{ROOT}.lm_head",
    r"\.norm_attn$": ".ln_1",
    r"\.norm_mlp$": ".ln_2",
    r"\.attn\.qkv$": ".attn.c_attn",
    r"\.attn\.out$": ".attn.c_proj",
    r"\.mlp\.fc_in$": ".mlp.c_fc",
    r"\.mlp\.fc_out$": ".mlp.c_proj",
    r"\.mlp\.gelu$": ".mlp.act",
}


def build_original(dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Module:
    """transformers' GPT2LMHeadModel from a small config, random weights from ``seed``, eager attention."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=VOCAB, n_positions=POSITIONS, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                        layer_norm_epsilon=EPS, bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, attn_implementation="eager")
    model = GPT2LMHeadModel(config).eval()
    for name, tensor in model.named_parameters():  # GPT-2's init leaves LayerNorm at 1/0: give them values
        if ".ln_" in name:
            with torch.no_grad():
                tensor.add_(0.1 * torch.randn_like(tensor))
    return model.to(dtype)


def make_inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """``{"input_ids": [1, SEQ]}`` from ``seed``."""
    generator = torch.Generator().manual_seed(seed + 100)
    return {"input_ids": torch.randint(0, VOCAB, (1, SEQ), generator=generator)}


class Attention(nn.Module):
    def __init__(self, bug: str | None) -> None:
        super().__init__()
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.out = nn.Linear(HIDDEN, HIDDEN)
        self.bug = bug

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        *lead, length, _ = x.shape
        q, k, v = (t.reshape(*lead, length, HEADS, -1).transpose(-3, -2) for t in self.qkv(x).chunk(3, dim=-1))
        scale = 1.0 if self.bug == "no_attn_scale" else 1.0 / math.sqrt(q.shape[-1])
        scores = (q @ k.transpose(-1, -2)) * scale
        above = 2 if self.bug == "causal_off_by_one" else 1
        future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(above)
        scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
        mixed = scores.softmax(dim=-1).to(v.dtype) @ v
        return self.out(mixed.transpose(-3, -2).reshape(*lead, length, HIDDEN))


class TanhGelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(x, approximate="tanh")


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc_in = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.gelu = TanhGelu()
        self.fc_out = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(self.gelu(self.fc_in(x)))


class Block(nn.Module):
    def __init__(self, bug: str | None) -> None:
        super().__init__()
        eps = 1e-3 if bug == "ln_eps" else EPS
        self.norm_attn = nn.LayerNorm(HIDDEN, eps=eps)
        self.attn = Attention(bug)
        self.norm_mlp = nn.LayerNorm(HIDDEN, eps=eps)
        self.mlp = Mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm_attn(x))
        return x + self.mlp(self.norm_mlp(x))


class Gpt2Port(nn.Module):
    """GPT-2 written from scratch: ``forward(ids)`` takes token ids and returns logits."""

    def __init__(self, bug: str | None = None) -> None:
        super().__init__()
        if bug is not None and bug not in BUGS:
            raise ValueError(f"bug {bug!r}: not one of {sorted(BUGS)}")
        self.tok = nn.Embedding(VOCAB, HIDDEN)
        self.pos = nn.Embedding(POSITIONS, HIDDEN)
        self.blocks = nn.ModuleList(Block(bug) for _ in range(LAYERS))
        self.norm_out = nn.LayerNorm(HIDDEN, eps=1e-3 if bug == "ln_eps" else EPS)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[-1], device=ids.device)  # 1-D: pos gives [T, D]
        x = self.tok(ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm_out(x))


def convert_weights(original: nn.Module, bug: str | None = None) -> dict[str, torch.Tensor]:
    """The port's state dict from GPT-2's: Conv1D weights ``[in, out]`` transposed into nn.Linear's ``[out, in]``."""
    source = original.state_dict()
    out = {"tok.weight": source["transformer.wte.weight"], "pos.weight": source["transformer.wpe.weight"],
           "norm_out.weight": source["transformer.ln_f.weight"], "norm_out.bias": source["transformer.ln_f.bias"],
           "head.weight": source["lm_head.weight"]}
    pairs = {"norm_attn": "ln_1", "norm_mlp": "ln_2", "attn.qkv": "attn.c_attn", "attn.out": "attn.c_proj",
             "mlp.fc_in": "mlp.c_fc", "mlp.fc_out": "mlp.c_proj"}
    for layer in range(LAYERS):
        for mine, theirs in pairs.items():
            for name in ("weight", "bias"):
                tensor = source[f"transformer.h.{layer}.{theirs}.{name}"]
                if name == "weight" and not mine.startswith("norm"):
                    tensor = tensor.t().contiguous()  # Conv1D [in, out] -> Linear [out, in]
                    if bug == "scaled_fc_in" and layer == 1 and mine == "mlp.fc_in":
                        tensor = tensor * 1.01
                out[f"blocks.{layer}.{mine}.{name}"] = tensor
    return out


def build_port(original: nn.Module, bug: str | None = None) -> Gpt2Port:
    """The port with the original's weights (converted), in the original's dtype."""
    dtype = next(original.parameters()).dtype
    port = Gpt2Port(bug).to(dtype)
    port.load_state_dict(convert_weights(original, bug))
    return port.eval()
