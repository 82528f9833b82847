"""A tiny Llama-like language model with switches for the training-parity tests (issue 38).

Correct variants that compute the same function and the same gradients: eager or sdpa attention (``sdpa``),
separate or fused q/k/v and gate/up projections (``fused``), gradient checkpointing on or off (``checkpoint``;
``reentrant``: torch's reentrant checkpoint),
SiLU as ``nn.SiLU`` or as a custom ``autograd.Function`` with a right backward (``custom_act``).

Bugs that live only in the backward pass (the forward is the same function), each in layer ``BUG_LAYER``:
``wrong_backward`` (a custom SiLU whose backward forgets a term), ``detach_residual`` (the layer's attention
residual path is cut by ``detach()``), ``checkpoint_seed`` (checkpointing recomputes the dropout with another
random stream: ``preserve_rng_state=False``, in train mode), ``inplace_act`` (the activation overwrites, through
``.data``, the input its backward needs). ``loss_sum`` (the loss summed, not averaged) is the training loop's.
``BUGS`` maps each to the module (a's naming) where the gradient is born wrong.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

VOCAB, HIDDEN, HEADS, INTER, LAYERS, SEQ = 64, 32, 4, 64, 3, 8
BUG_LAYER = 1
ROOT = "TinyTrainLM"
_L = f"{ROOT}.layers.{BUG_LAYER}"
BUGS: dict[str, str] = {
    "wrong_backward": f"{_L}.mlp.act_fn",
    "detach_residual": _L,
    "checkpoint_seed": f"{ROOT}.layers.{LAYERS - 1}.dropout",
    "inplace_act": f"{_L}.mlp.act_fn",
    "loss_sum": ROOT,
}


class _SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, wrong: bool) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x)
        ctx.wrong = wrong
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        if ctx.wrong:
            return grad * s, None  # forgets x * s * (1 - s)
        return grad * (s + x * s * (1 - s)), None


class CustomSiLU(nn.Module):
    def __init__(self, wrong: bool = False) -> None:
        super().__init__()
        self.wrong = wrong

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SiLU.apply(x, self.wrong)


class InplaceSiLU(nn.Module):
    """Saves memory the wrong way: the input silu's backward needs is overwritten with the output."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.silu(x)
        x.data.copy_(y)
        return y


class RMSNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.to(x.dtype)


class Attention(nn.Module):
    def __init__(self, fused: bool, sdpa: bool) -> None:
        super().__init__()
        self.fused, self.sdpa = fused, sdpa
        if fused:
            self.qkv_proj = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        else:
            self.q_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
            self.k_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
            self.v_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.o_proj = nn.Linear(HIDDEN, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        if self.fused:
            q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q, k, v = (z.view(b, t, HEADS, -1).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            o = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.o_proj(o.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, fused: bool, act: nn.Module) -> None:
        super().__init__()
        self.fused = fused
        if fused:
            self.gate_up_proj = nn.Linear(HIDDEN, 2 * INTER, bias=False)
        else:
            self.gate_proj = nn.Linear(HIDDEN, INTER, bias=False)
            self.up_proj = nn.Linear(HIDDEN, INTER, bias=False)
        self.act_fn = act
        self.down_proj = nn.Linear(INTER, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1) if self.fused else (self.gate_proj(x), self.up_proj(x))
        return self.down_proj(self.act_fn(gate) * up)


class Layer(nn.Module):
    def __init__(self, fused: bool, sdpa: bool, act: nn.Module, detach: bool, dropout: float) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm()
        self.self_attn = Attention(fused, sdpa)
        self.post_attention_layernorm = RMSNorm()
        self.mlp = MLP(fused, act)
        self.dropout = nn.Dropout(dropout)
        self.detach = detach

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x.detach() if self.detach else x
        h = residual + self.self_attn(self.input_layernorm(x))
        return h + self.dropout(self.mlp(self.post_attention_layernorm(h)))


class TinyTrainLM(nn.Module):
    def __init__(self, *, fused: bool = False, sdpa: bool = False, checkpoint: bool = False, custom_act: bool = False,
                 bug: str | None = None, dropout: float = 0.0, tied: bool = True, reentrant: bool = False) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        layers = []
        for i in range(LAYERS):
            buggy = i == BUG_LAYER
            if buggy and bug == "wrong_backward":
                act: nn.Module = CustomSiLU(wrong=True)
            elif buggy and bug == "inplace_act":
                act = InplaceSiLU()
            else:
                act = CustomSiLU() if custom_act else nn.SiLU()
            layers.append(Layer(fused, sdpa, act, buggy and bug == "detach_residual", dropout))
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        if tied:
            self.lm_head.weight = self.embed_tokens.weight
        self.checkpoint = checkpoint or bug == "checkpoint_seed"
        self.preserve_rng = bug != "checkpoint_seed"
        self.reentrant = reentrant

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(ids)
        for layer in self.layers:
            if self.checkpoint and self.training and torch.is_grad_enabled():  # as a no_grad run needs no rerun
                h = checkpoint(layer, h, use_reentrant=self.reentrant, preserve_rng_state=self.preserve_rng)
            else:
                h = layer(h)
        return self.lm_head(self.norm(h))


def build(seed: int = 0, dtype: torch.dtype = torch.float32, **switches) -> TinyTrainLM:
    """A model with the weights of ``seed`` whatever its switches (fused projections hold the separate ones)."""
    torch.manual_seed(seed)
    reference = TinyTrainLM(tied=switches.get("tied", True))
    model = TinyTrainLM(**switches)
    state = reference.state_dict()
    if switches.get("fused"):
        for i in range(LAYERS):
            p = f"layers.{i}."
            state[p + "self_attn.qkv_proj.weight"] = torch.cat(
                [state.pop(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
            state[p + "mlp.gate_up_proj.weight"] = torch.cat(
                [state.pop(p + "mlp.gate_proj.weight"), state.pop(p + "mlp.up_proj.weight")])
    model.load_state_dict(state)
    return model.to(dtype)


def inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and the next-token targets."""
    g = torch.Generator().manual_seed(1000 + seed)
    ids = torch.randint(0, VOCAB, (2, SEQ + 1), generator=g)
    return ids[:, :-1], ids[:, 1:]


def loss_of(logits: torch.Tensor, targets: torch.Tensor, bug: str | None = None) -> torch.Tensor:
    return F.cross_entropy(logits.float().reshape(-1, VOCAB), targets.reshape(-1),
                           reduction="sum" if bug == "loss_sum" else "mean")


def train_step(model: nn.Module, seed: int = 0, bug: str | None = None, rng: int = 7) -> torch.Tensor:
    """One forward and backward of ``model`` on ``seed``'s batch (dropout drawn from ``rng``); returns the loss."""
    ids, targets = inputs(seed)
    torch.manual_seed(rng)
    loss = loss_of(model(ids), targets, bug)
    loss.backward()
    return loss
