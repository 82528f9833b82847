"""A Llama port written by another hand than tests/models/ports.py (plain torch, its own module names, fused or
separate q/k/v, eager/sdpa/flash-style attention), against transformers' LlamaForCausalLM built from a config with
larger weights than its default initialisation (so a bug's difference is large beside the residual stream).

``port_from(reference, opts)`` loads the reference's weights; ``opts`` picks a variant (``fused``, ``attn``:
"sdpa"/"flash", ``order``) or a bug (``bug``: "causal", "noscale", "rotary", "padmask", ... with ``all`` for every
layer). ``AutocastPort`` runs float32 weights under bfloat16 autocast.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

DT = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
P = "LlamaForCausalLM.model"


def build_ref(size, seed, dtype, layers=2, attn="eager"):
    torch.manual_seed(seed)
    heads = max(size // 32, 2)
    cfg = LlamaConfig(vocab_size=256, hidden_size=size, intermediate_size=2 * size, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=max(heads // 2, 1), max_position_embeddings=128,
                      rms_norm_eps=1e-6, rope_theta=10000.0, attn_implementation=attn, use_cache=False,
                      tie_word_embeddings=False)
    m = LlamaForCausalLM(cfg)
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, nn.Linear):
                mod.weight.normal_(0.0, size ** -0.5)
    return m.to(dtype).eval()


class RMSNorm(nn.Module):
    def __init__(self, n, eps, alt=False):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps, self.alt = eps, alt

    def forward(self, x):
        dt = x.dtype
        h = x.float()
        if self.alt:  # different but exact op order
            h = h / torch.sqrt((h * h).mean(-1, keepdim=True) + self.eps)
        else:
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dt)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def rotate_interleaved(x):  # BUG variant: GPT-J style rotation on a half-split layout
    a, b = x[..., ::2], x[..., 1::2]
    return torch.stack((-b, a), dim=-1).flatten(-2)


class Rope(nn.Module):
    def __init__(self, hd, theta):
        super().__init__()
        self.register_buffer("inv", 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd), persistent=False)

    def forward(self, x, pos):
        f = pos[:, None].float() * self.inv[None, :]
        e = torch.cat((f, f), dim=-1)
        return e.cos().to(x.dtype), e.sin().to(x.dtype)


class Attn(nn.Module):
    def __init__(self, cfg, opts, layer):
        super().__init__()
        d, self.nh, self.nkv = cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads
        self.hd = d // self.nh
        self.opts, self.layer = opts, layer
        if opts.get("fused"):
            self.qkv = nn.Linear(d, (self.nh + 2 * self.nkv) * self.hd, bias=False)
        else:
            self.q = nn.Linear(d, self.nh * self.hd, bias=False)
            self.k = nn.Linear(d, self.nkv * self.hd, bias=False)
            self.v = nn.Linear(d, self.nkv * self.hd, bias=False)
        self.o = nn.Linear(self.nh * self.hd, d, bias=False)

    def forward(self, x, cos, sin, pad=None):
        B, T, _ = x.shape
        o = self.opts
        if o.get("fused"):
            w = self.qkv.weight
            if o.get("bug") == "fused_k" and self.layer == 0:  # BUG: k block of the fused weight scaled 1%
                w = torch.cat([w[:self.nh * self.hd], w[self.nh * self.hd:(self.nh + self.nkv) * self.hd] * 1.01,
                               w[(self.nh + self.nkv) * self.hd:]])
            q, k, v = F.linear(x, w).split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        else:
            q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(B, T, self.nh, self.hd).transpose(1, 2)
        k = k.view(B, T, self.nkv, self.hd).transpose(1, 2)
        v = v.view(B, T, self.nkv, self.hd).transpose(1, 2)
        rot = rotate_interleaved if (o.get("bug") == "rotary" and (self.layer == 0 or o.get("all"))) else rotate_half
        q = q * cos + rot(q) * sin
        k = k * cos + rot(k) * sin
        g = self.nh // self.nkv
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        scale = 1.0 / math.sqrt(self.hd)
        if o.get("bug") == "noscale" and (self.layer == 1 or o.get("all")):
            scale = 1.0
        off = 2 if (o.get("bug") == "causal" and (self.layer == 0 or o.get("all"))) else 1
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool, device=x.device), diagonal=off)
        if pad is not None and not (o.get("bug") == "padmask" and (self.layer == 0 or o.get("all"))):
            mask = mask[None, None] | ~pad.bool()[:, None, None, :]
        kind = o.get("attn", "manual")
        if kind == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask, scale=scale)
            y = torch.nan_to_num(y)
        elif kind == "flash":
            y = flash(q, k, v, mask, scale, block=o.get("block", 4))
        else:
            if o.get("order"):  # scale q first, then matmul (exact-math reorder)
                s = (q * scale) @ k.transpose(-1, -2)
            else:
                s = (q @ k.transpose(-1, -2)) * scale
            s = s.masked_fill(mask, torch.finfo(s.dtype).min)
            if o.get("bug") == "lowsoftmax":
                p = F.softmax(s.half() if s.dtype == torch.float32 else s, dim=-1).to(q.dtype)
            else:
                p = F.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
            y = p @ v
        if o.get("varlen") and pad is not None:  # flash-attn varlen style: padded query rows output 0
            y = y * pad[:, None, :, None].to(y.dtype)
        y = y.transpose(1, 2).reshape(B, T, -1)
        return self.o(y)


def flash(q, k, v, mask, scale, block):
    dt = q.dtype
    w = torch.float32
    qq = q.to(w)
    shape = (*q.shape[:-1], 1)
    m = torch.full(shape, -torch.inf, dtype=w)
    l = torch.zeros(shape, dtype=w)
    acc = torch.zeros(q.shape, dtype=w)
    for s0 in range(0, k.shape[2], block):
        s = qq @ k[:, :, s0:s0 + block].to(w).transpose(-1, -2) * scale
        s = s.masked_fill(mask[:, s0:s0 + block], -torch.inf)
        mn = torch.maximum(m, s.amax(-1, keepdim=True))
        safe = torch.where(torch.isfinite(mn), mn, torch.zeros_like(mn))
        p = torch.exp(s - safe)
        a = torch.exp(m - safe)
        l = l * a + p.sum(-1, keepdim=True)
        acc = acc * a + p.to(dt).to(w) @ v[:, :, s0:s0 + block].to(w)
        m = mn
    return (acc / l).to(dt)


class MLP(nn.Module):
    def __init__(self, cfg, opts, layer):
        super().__init__()
        d, i = cfg.hidden_size, cfg.intermediate_size
        self.opts, self.layer = opts, layer
        self.gate = nn.Linear(d, i, bias=False)
        self.up = nn.Linear(d, i, bias=False)
        self.down = nn.Linear(i, d, bias=False)

    def forward(self, x):
        act = F.silu
        if self.opts.get("bug") == "gelu" and self.layer == 1:
            act = lambda t: F.gelu(t, approximate="tanh")
        return self.down(act(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg, opts, layer):
        super().__init__()
        eps = 1e-5 if (opts.get("bug") == "eps" and layer == 0) else cfg.rms_norm_eps
        self.attn_norm = RMSNorm(cfg.hidden_size, eps, opts.get("order", False))
        self.attn = Attn(cfg, opts, layer)
        self.ffn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, opts.get("order", False))
        self.ffn = MLP(cfg, opts, layer)
        self.opts, self.layer = opts, layer

    def forward(self, x, cos, sin, pad=None):
        x = x + self.attn(self.attn_norm(x), cos, sin, pad)
        h = self.ffn(self.ffn_norm(x))
        if self.opts.get("bug") == "residual" and self.layer == 1:
            return h
        return x + h


class Port(nn.Module):
    def __init__(self, cfg, opts):
        super().__init__()
        self.opts = opts
        self.tok = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        hd = cfg.hidden_size // cfg.num_attention_heads
        self.rope = Rope(hd, 1e4 if opts.get("bug") != "theta" else 5e5)
        self.blocks = nn.ModuleList(Block(cfg, opts, i) for i in range(cfg.num_hidden_layers))
        fe = 1e-5 if opts.get("bug") == "final_eps" else cfg.rms_norm_eps
        self.final_norm = RMSNorm(cfg.hidden_size, fe)
        self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, ids, pad=None):
        x = self.tok(ids)
        pos = torch.arange(ids.shape[1], device=ids.device)
        cos, sin = self.rope(x, pos)
        for b in self.blocks:
            x = b(x, cos, sin, pad)
        return self.head(self.final_norm(x))


def port_from(ref, opts):
    cfg = ref.config
    p = Port(cfg, opts)
    sd = ref.state_dict()
    new = {"tok.weight": sd["model.embed_tokens.weight"], "final_norm.weight": sd["model.norm.weight"],
           "head.weight": sd["lm_head.weight"]}
    for i in range(cfg.num_hidden_layers):
        r = f"model.layers.{i}."
        b = f"blocks.{i}."
        new[b + "attn_norm.weight"] = sd[r + "input_layernorm.weight"]
        new[b + "ffn_norm.weight"] = sd[r + "post_attention_layernorm.weight"]
        q, k, v = (sd[r + f"self_attn.{n}_proj.weight"] for n in "qkv")
        if opts.get("fused"):
            new[b + "attn.qkv.weight"] = torch.cat([q, k, v])
        else:
            new[b + "attn.q.weight"], new[b + "attn.k.weight"], new[b + "attn.v.weight"] = q, k, v
        o = sd[r + "self_attn.o_proj.weight"]
        if opts.get("bug") == "transpose" and i == 1:
            o = o.t().contiguous()
        new[b + "attn.o.weight"] = o
        up = sd[r + "mlp.up_proj.weight"]
        if opts.get("bug") == "scaled_w" and i == 1:
            up = up * 1.01
        new[b + "ffn.gate.weight"] = sd[r + "mlp.gate_proj.weight"]
        new[b + "ffn.up.weight"] = up
        new[b + "ffn.down.weight"] = sd[r + "mlp.down_proj.weight"]
    p.load_state_dict(new)
    return p.to(next(ref.parameters()).dtype).eval()




class AutocastPort(nn.Module):
    """float32 weights, run under bfloat16 autocast inside its forward (the reference has bfloat16 weights)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, ids):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.inner(ids)
