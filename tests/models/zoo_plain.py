"""The zoo's plain models: output containers, kwargs of every kind, pruning, repeated and aliased calls."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


class _DictBlock(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.act = nn.GELU()

    def forward(self, x):
        h = self.act(self.lin(x))
        return {"hidden": h, "residual": x + h}


class DictOutNet(nn.Module):
    """Dict outputs at leaf, block and top level."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.embed = nn.Embedding(16, d)
        self.block = _DictBlock(d)
        self.head = nn.Linear(d, 4)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        out = self.block(x)
        return {"logits": self.head(out["residual"]), "hidden": out["hidden"], "n_tokens": input_ids.numel()}


class _PairSplit(nn.Module):
    def forward(self, x):
        a, b = x.chunk(2, dim=-1)
        return a, (b, a * b)


class TupleOutNet(nn.Module):
    """Tuple outputs (nested), positional args, a module whose output is a tuple of tuples."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.proj = nn.Linear(d, 2 * d)
        self.split = _PairSplit()
        self.out = nn.Linear(d, 3)

    def forward(self, x, y):
        a, (b, ab) = self.split(self.proj(x + y))
        return self.out(a), (b.sum(-1), ab.transpose(0, 1))  # a non-contiguous tensor in the outputs


def _model_output_cls():
    try:
        from transformers.utils import ModelOutput
    except Exception:  # pragma: no cover - transformers missing
        return None

    @dataclass
    class TinyOutput(ModelOutput):
        loss: torch.FloatTensor | None = None
        logits: torch.FloatTensor | None = None
        hidden_states: tuple | None = None
        attentions: tuple | None = None

    return TinyOutput


class ModelOutputNet(nn.Module):
    """Returns a transformers ``ModelOutput`` (some fields None) from the top level and from a submodule."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.out_cls = _model_output_cls()
        self.enc = nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Linear(d, d))
        self.head = _OutputHead(d, self.out_cls)

    def forward(self, x, labels=None, output_hidden_states=False):
        h = self.enc(x)
        out = self.head(h, labels=labels)
        return self.out_cls(
            loss=out.loss, logits=out.logits, hidden_states=(x, h) if output_hidden_states else None
        )


class _OutputHead(nn.Module):
    def __init__(self, d, out_cls):
        super().__init__()
        self.lin = nn.Linear(d, 3)
        self.out_cls = out_cls

    def forward(self, h, labels=None):
        logits = self.lin(h)
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.reshape(-1, 3), labels.reshape(-1))
        return self.out_cls(loss=loss, logits=logits)


class _Scaler(nn.Module):
    def forward(self, x, mask=None, scale=1.0, n=1, flag=False, mode="sum", extras=None):
        y = x * scale * n
        if mask is not None:
            y = y.masked_fill(~mask, 0.0)
        if flag:
            y = -y
        for e in extras or ():
            if isinstance(e, (torch.Tensor, int, float)):
                y = y + e
        return y.sum(-1) if mode == "sum" else y


class _Edge(nn.Module):
    """Leaf module with unusual tensors: 0-d, one element (std nan), int, bool, inf, big (summarized), tiny.

    (No empty tensor: transformers' min() raises on it.)"""

    def forward(self, x):
        big = torch.arange(2 * 40 * 30, dtype=torch.float32).reshape(2, 40, 30) / 7.0
        return {
            "scalar": x.sum(),
            "one": x.reshape(-1)[:1],
            "ints": torch.arange(5),
            "bools": x > 0,
            "inf": torch.tensor([1.0, float("inf"), -float("inf")]),
            "big": big,
            "tiny": x * 1e-30,
        }


class KwargsScalarsNet(nn.Module):
    """Kwargs that are None, Python int/float/bool/str and a list (of tensors and numbers), plus edge tensors."""

    def __init__(self, d: int = 6):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.scaler = _Scaler()
        self.edge = _Edge()

    def forward(self, x, mask=None, temperature=0.5, steps=3, flip=True, mode="sum", extras=None):
        h = self.lin(x)
        s = self.scaler(h, mask=None, scale=temperature, n=steps, flag=flip, mode=mode, extras=extras)
        t = self.scaler(h, h > 0, 2.0, 2, False, "none", [1, 2.5])
        e = self.edge(h)
        return s, t, e, mode, steps


class _SubLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + self.lin(x))


class _Block(nn.Module):
    def __init__(self, d, n_inner):
        super().__init__()
        self.layers = nn.ModuleList([_SubLayer(d) for _ in range(n_inner)])
        self.gate = nn.Linear(d, d)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.gate(x)


class NestedListsNet(nn.Module):
    """ModuleList of blocks, each with a ModuleList of sublayers: pruning applies at both levels."""

    def __init__(self, d: int = 8, n_blocks: int = 4, n_inner: int = 4):
        super().__init__()
        self.embed = nn.Linear(4, d)
        self.blocks = nn.ModuleList([_Block(d, n_inner) for _ in range(n_blocks)])
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class _MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(2 * d, d)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class CalledTwiceNet(nn.Module):
    """A leaf called three times, a module with children called twice, the same module from two layers."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.mlp = _MLP(d)
        self.act = nn.SiLU()
        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(2)])

    def forward(self, x):
        x = self.norm(x)
        x = x + self.mlp(x)
        x = self.norm(x)
        x = x + self.mlp(x * 2)
        for layer in self.layers:
            x = self.act(layer(x))
        return self.norm(x)


class CallNameClashNet(nn.Module):
    """``norm`` is called twice, and other modules are *named* like plausible names for its 2nd call's files
    (``norm_call2``, ``norm_2``, ``norm_1``...). Each of those is called once, so its file must keep
    transformers' name; the 2nd call of ``norm`` must get a name that collides with nothing."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        for name in ("norm_call2", "norm_2", "norm_1", "norm_call_1", "norm_second"):
            self.add_module(name, nn.Linear(d, d))

    def forward(self, x):
        x = self.norm(x)
        x = self.norm(x * 2)  # 2nd call BEFORE the look-alikes: an implementation can't just take a free name
        for name in ("norm_call2", "norm_2", "norm_1", "norm_call_1", "norm_second"):
            x = getattr(self, name)(x)
        return self.norm(x)  # 3rd call after them


class _Container(nn.Module):
    """Has submodules but its forward never calls them."""

    def __init__(self, d):
        super().__init__()
        self.unused_a = nn.Linear(d, d)
        self.unused_b = nn.ReLU()

    def forward(self, x):
        return x * 3 + 1


class UnusedChildrenNet(nn.Module):
    """A module with submodules that it never calls: its node has outputs null and no children."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.container = _Container(d)
        self.lin = nn.Linear(d, d)
        self.never = nn.Linear(d, d)  # never called at all

    def forward(self, x):
        return self.lin(self.container(x))


class _Attention(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.out = nn.Linear(d, d)

    def forward(self, query, key, value, attn_mask=None):
        scores = query @ key.transpose(-1, -2) / key.shape[-1] ** 0.5
        if attn_mask is not None:
            scores = scores + attn_mask
        return self.out(scores.softmax(-1) @ value)


class _Memo(nn.Module):
    def forward(self, key, value=None):
        return {"key": key, "value": value if value is not None else key}


class ValueKwargNet(nn.Module):
    """Calls submodules with a kwarg literally named ``value`` (and returns a dict with a 'value' key)."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.attn = _Attention(d)
        self.memo = _Memo()

    def forward(self, x):
        q, k, v = self.q(x), self.k(x), self.v(x)
        y = self.attn(query=q, key=k, value=v, attn_mask=None)
        m = self.memo(key=y, value=3)
        return m["key"] + y


class TopLevelParamNet(nn.Module):
    """The top-level forward multiplies by parameters itself (transformers runs it with grad enabled): the
    submodule's input repr carries grad_fn=, and so does the (unreferenced) top-level output."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.scale = nn.Parameter(torch.full((d,), 0.5))

    def forward(self, x):
        return self.lin(x * self.scale) * self.scale


class ParamOnlyNet(nn.Module):
    """No submodules at all: the root keeps its outputs in the JSON, and they carry grad_fn=."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d, 3))
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x, bias=None):
        y = (x @ self.weight) * self.scale
        return y if bias is None else y + bias


class _Tok(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.emb = nn.Embedding(16, d)

    def forward(self, ids):
        return self.emb(ids)


class AliasedModuleNet(nn.Module):
    """One module registered under two names (like tied encoder/decoder embeddings): it is traced under its
    first name (``named_modules`` de-duplicates), so it is one module called twice."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.enc_embed = nn.Embedding(16, d)
        self.dec_embed = self.enc_embed  # same module object, second name
        self.mix = nn.Linear(2 * d, d)

    def forward(self, src_ids, tgt_ids):
        return self.mix(torch.cat([self.enc_embed(src_ids), self.dec_embed(tgt_ids)], dim=-1))


class SharedLayerLoopNet(nn.Module):
    """ALBERT-style: one layer block (``layers.0``) run 4 times in a loop, after two ordinary blocks. Pruning
    keeps the first and last call of the shared block among the layer blocks."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.pre = nn.ModuleList([_SubLayer(d) for _ in range(2)])
        self.layers = nn.ModuleList([_SubLayer(d)])

    def forward(self, x):
        for layer in self.pre:
            x = layer(x)
        for _ in range(4):
            x = self.layers[0](x)
        return x


class _Inner(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return self.lin(x).tanh()


class DirectForwardNet(nn.Module):
    """The parent calls a submodule's ``.forward(...)`` directly (no ``__call__``, so no hooks run) and
    another one through ``super().forward``-style indirection."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.a = _Inner(d)
        self.b = _Inner(d)
        self.c = nn.Linear(d, d)

    def forward(self, x):
        x = self.a.forward(x)  # direct call
        x = self.b(x)
        return nn.Linear.forward(self.c, x)  # unbound class forward: no module call at all
