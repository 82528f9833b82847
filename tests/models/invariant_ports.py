"""The invariant suite's models: transformers' Llama as the reference and CORRECT or buggy ports of it.

The reference is ``LlamaForCausalLM`` from a small config (fixed seed, eager attention, exact GELU as
its activation so that a GELU approximation is a bug). A port is a deep copy with the same weights
whose OWN modules are replaced (``VARIANTS``: correct kernels that round differently; ``BUGS``: a
different function at a known module). Written against transformers 5.x (checked with 5.17 and 5.24:
``AttentionInterface.register``, ``AttentionMaskInterface.register``, ``LlamaAttention.forward(hidden_states,
position_embeddings, attention_mask, ...)``); nothing is downloaded.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, eager_attention_forward, repeat_kv

ROOT = "LlamaForCausalLM"
P = f"{ROOT}.model"
FLASH = "nbtrace_flashlike"
BLOCK = 64  # keys per block of the flash-style attention
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def build(width: int = 256, dtype: torch.dtype = torch.float32, seed: int = 0, layers: int = 2) -> LlamaForCausalLM:
    """The reference: a small Llama (head size 64, grouped kv heads), eager attention, in ``dtype``."""
    torch.manual_seed(seed)
    heads = width // 64
    config = LlamaConfig(vocab_size=256, hidden_size=width, intermediate_size=2 * width, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=max(heads // 2, 1), hidden_act="gelu",
                         max_position_embeddings=256, attn_implementation="eager", rms_norm_eps=1e-6,
                         use_cache=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # larger weights than the 0.02 default, so activations are not all tiny
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight.normal_(0.0, width**-0.5)
    return model.to(dtype).eval()


def inputs(seed: int = 0, length: int = 80) -> dict[str, torch.Tensor]:
    """Token ids (two rows; the second padded at the start) and the attention mask."""
    generator = torch.Generator().manual_seed(1000 + seed)
    ids = torch.randint(0, 256, (2, length), generator=generator)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, :5] = 0
    return {"input_ids": ids, "attention_mask": mask}


# -- correct kernels ----------------------------------------------------------------------------------
def flash_attention(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """Keys in blocks of 64, online softmax (running max and sum in float32), the probabilities rounded to the
    model's dtype before the product with V, accumulated in float32. In float64 nothing is rounded."""
    key, value = repeat_kv(key, module.num_key_value_groups), repeat_kv(value, module.num_key_value_groups)
    dtype = query.dtype
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    q = query.to(wide)
    shape = (*query.shape[:-1], 1)
    running_max = torch.full(shape, -torch.inf, dtype=wide, device=query.device)
    running_sum = torch.zeros(shape, dtype=wide, device=query.device)
    out = torch.zeros(query.shape, dtype=wide, device=query.device)
    for start in range(0, key.shape[2], BLOCK):
        scores = q @ key[:, :, start:start + BLOCK].to(wide).transpose(-1, -2) * scaling
        if attention_mask is not None:
            block = attention_mask[..., start:start + BLOCK]
            scores = scores.masked_fill(~block, -torch.inf) if block.dtype == torch.bool else scores + block.to(wide)
        new_max = torch.maximum(running_max, scores.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(new_max), new_max, torch.zeros_like(new_max))
        probs = torch.exp(scores - safe)
        alpha = torch.exp(running_max - safe)
        running_sum = running_sum * alpha + probs.sum(-1, keepdim=True)
        pv = probs.to(dtype).to(wide) @ value[:, :, start:start + BLOCK].to(wide)
        out = out * alpha + pv
        running_max = new_max
    out = (out / running_sum.clamp_min(torch.finfo(wide).tiny)).to(dtype)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(FLASH, flash_attention)
AttentionMaskInterface.register(FLASH, ALL_MASK_ATTENTION_FUNCTIONS["eager"])


def round_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """``x`` (float32) rounded to nearest with ``bits`` explicit mantissa bits (TF32: 10)."""
    drop = 23 - bits
    raw = x.contiguous().view(torch.int32)
    rounded = (raw + (1 << (drop - 1)) - 1 + ((raw >> drop) & 1)) & ~((1 << drop) - 1)
    return rounded.view(torch.float32)


class TF32Linear(nn.Linear):
    """A float32 Linear as a TF32 tensor core computes it: both operands rounded to 10 mantissa bits, the
    products accumulated in float32. Other dtypes (float64 too) are untouched."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            return super().forward(x)
        return nn.functional.linear(round_mantissa(x, 10), round_mantissa(self.weight, 10), self.bias)


class SplitKLinear(nn.Linear):
    """Partial products over chunks of the input features (float32 partials for half types, as a kernel keeps
    them), summed in reverse order."""

    chunk = 96

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
        total = None
        for start in reversed(range(0, x.shape[-1], self.chunk)):
            part = x[..., start:start + self.chunk].to(wide) @ self.weight[:, start:start + self.chunk].to(wide).T
            total = part if total is None else total + part
        out = total if self.bias is None else total + self.bias.to(wide)
        return out.to(x.dtype)


class FusedQKVAttention(nn.Module):
    """Llama attention with q, k and v in one projection (``qkv_proj``), as many ports hold it."""

    def __init__(self, original: nn.Module) -> None:
        super().__init__()
        self.config, self.layer_idx = original.config, original.layer_idx
        self.head_dim, self.scaling = original.head_dim, original.scaling
        self.num_key_value_groups = original.num_key_value_groups
        self.attention_dropout, self.is_causal = 0.0, True
        q, k, v = original.q_proj, original.k_proj, original.v_proj
        self.sizes = (q.out_features, k.out_features, v.out_features)
        self.qkv_proj = nn.Linear(q.in_features, sum(self.sizes), bias=False).to(q.weight.dtype)
        with torch.no_grad():
            self.qkv_proj.weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
        self.o_proj = original.o_proj

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, **kwargs):
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        q, k, v = self.qkv_proj(hidden_states).split(self.sizes, dim=-1)
        q, k, v = (t.reshape(shape).transpose(1, 2) for t in (q, k, v))
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
        out, weights = attention(self, q, k, v, attention_mask, dropout=0.0, scaling=self.scaling, **kwargs)
        return self.o_proj(out.reshape(*hidden_states.shape[:-1], -1).contiguous()), weights


class FusedGateUpMLP(nn.Module):
    """Llama's MLP with gate and up in one projection (``gate_up_proj``)."""

    def __init__(self, original: nn.Module) -> None:
        super().__init__()
        gate, up = original.gate_proj, original.up_proj
        self.gate_up_proj = nn.Linear(gate.in_features, 2 * gate.out_features, bias=False).to(gate.weight.dtype)
        with torch.no_grad():
            self.gate_up_proj.weight.copy_(torch.cat([gate.weight, up.weight]))
        self.act_fn, self.down_proj = original.act_fn, original.down_proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(self.act_fn(gate) * up)


def _replace_linears(model: nn.Module, kind: type[nn.Linear]) -> None:
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear:
                new = kind(child.in_features, child.out_features, bias=child.bias is not None,
                           dtype=child.weight.dtype)
                new.load_state_dict(child.state_dict())
                setattr(module, name, new)


def _set_attention(model: nn.Module, name: str) -> None:
    model.config._attn_implementation = name  # the port's own (deep-copied) config


def _layers(model: LlamaForCausalLM):
    return model.model.layers


VARIANTS = {
    "itself": None,  # the reference module itself
    "twice": lambda m: None,
    "sdpa": lambda m: _set_attention(m, "sdpa"),
    "flash": lambda m: _set_attention(m, FLASH),
    "tf32": lambda m: _replace_linears(m, TF32Linear),
    "split_k": lambda m: _replace_linears(m, SplitKLinear),
    "fused_qkv": lambda m: [setattr(layer, "self_attn", FusedQKVAttention(layer.self_attn)) for layer in _layers(m)],
    "fused_gate_up": lambda m: [setattr(layer, "mlp", FusedGateUpMLP(layer.mlp)) for layer in _layers(m)],
}


# -- bugs ------------------------------------------------------------------------------------------
class UnsafeRMSNorm(nn.Module):
    """RMSNorm without the float32 upcast: the variance and the scaling in the model's dtype."""

    def __init__(self, original: nn.Module) -> None:
        super().__init__()
        self.weight, self.variance_epsilon = original.weight, original.variance_epsilon

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))


def _weights(module: nn.Linear, change) -> None:
    with torch.no_grad():
        module.weight.copy_(change(module.weight.detach().clone()))


def _lossy(w: torch.Tensor) -> torch.Tensor:
    """A conversion that kept 3 mantissa bits (e.g. through float8 e4m3)."""
    return round_mantissa(w.float(), 3).to(w.dtype)


def _row_block(w: torch.Tensor) -> torch.Tensor:
    w[:32] *= 1.1
    return w


BUGS = {  # name -> (plant it in the port, the reference's module where it is born; None: the same function)
    "gelu_tanh": (lambda m: setattr(_layers(m)[1].mlp, "act_fn", nn.GELU(approximate="tanh")),
                  f"{P}.layers.1.mlp.act_fn"),
    # the same function, rounded in the model's dtype: a precision difference, never a divergence (c.precision)
    "norm_no_upcast": (lambda m: setattr(_layers(m)[1], "post_attention_layernorm",
                                         UnsafeRMSNorm(_layers(m)[1].post_attention_layernorm)), None),
    "weights_x1.01": (lambda m: _weights(_layers(m)[1].mlp.down_proj, lambda w: w * 1.01),
                      f"{P}.layers.1.mlp.down_proj"),
    "lossy_weights": (lambda m: _weights(_layers(m)[0].self_attn.o_proj, _lossy), f"{P}.layers.0.self_attn.o_proj"),
    "wrong_eps": (lambda m: setattr(_layers(m)[0].input_layernorm, "variance_epsilon", 1e-5),
                  f"{P}.layers.0.input_layernorm"),
    "attn_scaling": (lambda m: setattr(_layers(m)[1].self_attn, "scaling", _layers(m)[1].self_attn.scaling * 1.02),
                     f"{P}.layers.1.self_attn"),
    "row_block": (lambda m: _weights(_layers(m)[0].mlp.up_proj, _row_block), f"{P}.layers.0.mlp.up_proj"),
}


def port(reference: LlamaForCausalLM, variant: str = "twice", bug: str | None = None) -> nn.Module:
    """A port of ``reference`` with the same weights: a correct ``variant`` (``VARIANTS``), and a ``bug``."""
    if variant == "itself" and bug is None:
        return reference
    made = copy.deepcopy(reference)
    plant = VARIANTS[variant]
    if plant is not None:
        plant(made)
    if bug is not None:
        BUGS[bug][0](made)
    return made.to(next(reference.parameters()).device).eval()  # modules put in place are made on the CPU
