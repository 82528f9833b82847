"""A zoo of tiny, deterministic models for tests (compatibility harness, and anyone else).

Every entry is built from code: random init from a small config after ``torch.manual_seed(0)``, eval mode,
sizes small enough that a forward takes milliseconds. No weights are ever downloaded.

    from tests.models.zoo import ZOO, get
    model, args, kwargs = get("llama").build()
    model(*args, **kwargs)

Each ``ZooEntry`` has flags describing what makes it interesting:

- ``calls_twice``: some module is called more than once in one forward (transformers overwrites its
  safetensors file; nbtrace keeps one per call).
- ``value_kwarg``: some module is called with a kwarg literally named ``value`` (transformers' SUMMARY
  strips it; nbtrace's keeps it).
- ``prunes``: with ``do_prune_layers=True`` some layer blocks are removed from the JSON.
- ``transformers``: the model comes from ``transformers`` (needs it importable).
- ``grad_fn_top``: the top-level forward does its own arithmetic with a parameter, so the top-level output
  carries ``grad_fn=`` (transformers does not run the top-level forward under ``no_grad``).
- ``grad_mode``: run the forward under ``torch.inference_mode()`` or ``torch.no_grad()`` (use
  ``entry.forward_context()`` around the call). Inference tensors have no version counter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import nn

__all__ = ["ZooEntry", "ZOO", "get", "names"]


@dataclass(frozen=True)
class ZooEntry:
    name: str
    factory: Callable[[], tuple[nn.Module, Callable[[], tuple[tuple, dict]]]]
    calls_twice: bool = False
    value_kwarg: bool = False
    prunes: bool = False
    transformers: bool = False
    grad_fn_top: bool = False
    description: str = ""
    #: "inference_mode" / "no_grad": the forward runs inside that torch mode (entered outside the tracer)
    grad_mode: str = ""

    def forward_context(self):
        """The context manager to run the (traced) forward in."""
        import contextlib

        if self.grad_mode == "inference_mode":
            return torch.inference_mode()
        if self.grad_mode == "no_grad":
            return torch.no_grad()
        return contextlib.nullcontext()

    def build(self) -> tuple[nn.Module, tuple, dict[str, Any]]:
        """Return ``(model, args, kwargs)``, deterministic: same weights and inputs on every call."""
        torch.manual_seed(0)
        model, make_inputs = self.factory()
        model.eval()
        torch.manual_seed(0)
        args, kwargs = make_inputs()
        return model, tuple(args), dict(kwargs)


# ----------------------------------------------------------------------------------------------------------
# transformers models (imported lazily so the plain models work without transformers)
# ----------------------------------------------------------------------------------------------------------

VOCAB = 64


def _ids(batch: int = 2, seq: int = 6, vocab: int = VOCAB, low: int = 3) -> torch.Tensor:
    return torch.randint(low, vocab, (batch, seq))


def _padded_mask(batch: int = 2, seq: int = 6) -> torch.Tensor:
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[-1, :2] = 0  # left padding in the last row
    return mask


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=4, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, attn_implementation="eager",
    )
    model = LlamaForCausalLM(cfg)

    def inputs():
        ids = _ids()
        return (), {"input_ids": ids, "attention_mask": _padded_mask(), "labels": ids.clone(), "use_cache": False}

    return model, inputs


def _gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=16, n_layer=2, n_head=2, bos_token_id=0, eos_token_id=1,
        attn_implementation="eager",
    )
    model = GPT2LMHeadModel(cfg)

    def inputs():
        # use_cache=True: the output holds a DynamicCache object (its repr goes into the JSON)
        return (), {"input_ids": _ids(), "attention_mask": torch.ones(2, 6, dtype=torch.long), "use_cache": True}

    return model, inputs


def _qwen2_bf16():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, attn_implementation="eager",
    )
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)

    def inputs():
        return (), {"input_ids": _ids(), "use_cache": False}

    return model, inputs


def _mistral_fp16():
    from transformers import MistralConfig, MistralForCausalLM

    cfg = MistralConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=3, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, sliding_window=None, attn_implementation="eager",
    )
    model = MistralForCausalLM(cfg).to(torch.float16)

    def inputs():
        return (), {"input_ids": _ids(), "attention_mask": _padded_mask(), "use_cache": False}

    return model, inputs


def _bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=VOCAB, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=32, type_vocab_size=2, attn_implementation="eager",
    )
    model = BertModel(cfg)

    def inputs():
        tt = torch.zeros(2, 6, dtype=torch.long)
        tt[:, 3:] = 1
        return (), {"input_ids": _ids(), "attention_mask": _padded_mask(), "token_type_ids": tt}

    return model, inputs


def _t5():
    from transformers import T5Config, T5ForConditionalGeneration

    cfg = T5Config(
        vocab_size=VOCAB, d_model=16, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=2, num_heads=2,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, decoder_start_token_id=0,
        pad_token_id=0, eos_token_id=1, attn_implementation="eager",
    )
    model = T5ForConditionalGeneration(cfg)

    def inputs():
        return (), {
            "input_ids": _ids(), "attention_mask": _padded_mask(), "labels": _ids(seq=4), "use_cache": False,
        }

    return model, inputs


def _bart():
    from transformers import BartConfig, BartForConditionalGeneration

    cfg = BartConfig(
        vocab_size=VOCAB, d_model=16, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=32,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, attn_implementation="eager",
    )
    model = BartForConditionalGeneration(cfg)

    def inputs():
        ids = _ids()
        dec = _ids(seq=4)
        return (), {"input_ids": ids, "decoder_input_ids": dec, "use_cache": False}

    return model, inputs


def _vit():
    from transformers import ViTConfig, ViTModel

    cfg = ViTConfig(
        image_size=16, patch_size=8, num_channels=3, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, attn_implementation="eager",
    )
    model = ViTModel(cfg)

    def inputs():
        return (), {"pixel_values": torch.randn(1, 3, 16, 16)}

    return model, inputs


def _mixtral():
    from transformers import MixtralConfig, MixtralForCausalLM

    cfg = MixtralConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
        attn_implementation="eager",
    )
    model = MixtralForCausalLM(cfg)

    def inputs():
        return (), {"input_ids": _ids(), "use_cache": False, "output_router_logits": True}

    return model, inputs


# ----------------------------------------------------------------------------------------------------------
# plain nn.Module models
# ----------------------------------------------------------------------------------------------------------


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
        loss: Optional[torch.FloatTensor] = None
        logits: Optional[torch.FloatTensor] = None
        hidden_states: Optional[tuple] = None
        attentions: Optional[tuple] = None

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


class _AddOneInPlace(nn.Module):
    def forward(self, x):
        return x.add_(1.0)  # mutates its input


class InplaceNet(nn.Module):
    """In-place ops: ReLU(inplace=True), a leaf that mutates its input, and the parent mutating a child's
    output afterwards. A tracer must record each tensor as it was at that moment (transformers serializes
    inputs before the call and outputs right after it)."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.relu = nn.ReLU(inplace=True)
        self.bump = _AddOneInPlace()
        self.out = nn.Linear(d, d)

    def forward(self, x):
        h = self.lin(x)
        h.mul_(3.0)  # changes lin's recorded output if it were read later
        h = self.relu(h)
        h = self.bump(h)
        h.sub_(0.5)
        x.mul_(2.0)  # the caller's input tensor too (the test builds fresh inputs per run)
        return self.out(h)


class _Const(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.table = nn.Parameter(torch.randn(3, d))

    def forward(self):
        return self.table  # a Parameter ("Parameter containing:" in its repr)


class _Nothing(nn.Module):
    def forward(self, x, cfg=None):
        return None


class _Describe(nn.Module):
    def forward(self, x, label="", opts=None):
        return f"{label}:{tuple(x.shape)}", len(opts or {}), 1.5


class _Casts(nn.Module):
    def forward(self, x):
        return {
            "f64": x.double() / 3,  # no stats for float64 in the format
            "u8": (x.abs() * 10).to(torch.uint8),
            "i8": (x * 10).to(torch.int8),
            "half": x.half(),
            "bf16": x.bfloat16(),
            "cplx_abs": torch.view_as_real(torch.complex(x, -x)),
        }


class OddIONet(nn.Module):
    """A module called with no arguments that returns a Parameter, one that returns None, one that returns a
    str/int/float tuple, a dict kwarg, a unicode/quote-laden str kwarg, and float64/uint8/int8/half/bf16
    tensors inside a float32 model."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.const = _Const(d)
        self.nothing = _Nothing()
        self.describe = _Describe()
        self.casts = _Casts()

    def forward(self, x, label='naïve ✓ "quoted" \\ tab\t\n'):
        t = self.const()
        self.nothing(x, cfg={"k": torch.ones(2), "n": 3, "nested": {"s": "x", "l": [1, None]}})
        desc = self.describe(x, label=label, opts={"a": 1})
        c = self.casts(x @ t.T)
        return c["f64"].float().sum(-1) + len(desc[0])


class _PrinterTorture(nn.Module):
    """Returns tensors chosen to hit every branch of torch's tensor printer (which nbtrace may reimplement):
    integer-valued floats, mixed magnitudes, +-0/nan/inf, huge/tiny, summarization (1-D, 2-D, 3-D, ints),
    wide rows that wrap at 120 columns, every common dtype, complex, channels_last, 0-d of each dtype."""

    def forward(self, x):
        g = torch.Generator().manual_seed(1234)
        out = {
            "int_valued": torch.tensor([1.0, 2.0, -3.0, 100.0]),
            "halves": torch.tensor([0.5, -0.25, 0.125]),
            "specials": torch.tensor([0.0, -0.0, float("nan"), float("inf"), -float("inf"), 1.0]),
            "all_nan": torch.full((2, 2), float("nan")),
            "huge_tiny": torch.tensor([1e30, -1e-30, 3.4e38, 1.2e-38, 5e-45]),
            "mixed_mag": torch.tensor([[1e-8, 1.0, 1e8], [-123456.789, 0.001, 42.0]]),
            "wide_row": torch.randn(3, 23, generator=g) * 1000,
            "long_1d": torch.arange(1500, dtype=torch.float32) - 700.5,
            "summ_2d": torch.randn(40, 40, generator=g),
            "summ_3d": torch.randn(12, 11, 10, generator=g) * 1e-5,
            "summ_int": torch.randint(-10**6, 10**6, (1100,), generator=g),
            "int64_big": torch.tensor([2**62, -2**62, 0, 7]),
            "int32": torch.tensor([[1, -2], [300, 4]], dtype=torch.int32),
            "int16": torch.tensor([-32768, 32767], dtype=torch.int16),
            "uint8": torch.tensor([0, 255, 17], dtype=torch.uint8),
            "bool_2d": torch.randn(3, 5, generator=g) > 0,
            "f64": torch.randn(2, 3, generator=g, dtype=torch.float64) * 1e100,
            "f16": (torch.randn(2, 6, generator=g) * 1000).half(),
            "f16_ext": torch.tensor([65504.0, 6e-8, -0.0, float("inf")], dtype=torch.float16),
            "bf16": (torch.randn(2, 6, generator=g) * 1e20).bfloat16(),
            "bf16_ints": torch.tensor([1.0, 256.0, 257.0, -3.0], dtype=torch.bfloat16),
            "complex": torch.complex(torch.randn(3, generator=g), torch.randn(3, generator=g)),
            "channels_last": torch.randn(1, 3, 2, 2, generator=g).to(memory_format=torch.channels_last),
            "strided": torch.randn(4, 6, generator=g)[::2, 1::2],
            "expanded": torch.randn(1, 3, generator=g).expand(4, 3),
            "zero_d_f32": torch.tensor(3.0),
            "zero_d_f16": torch.tensor(-0.5, dtype=torch.float16),
            "zero_d_i64": torch.tensor(-7),
            "zero_d_bool": torch.tensor(True),
            "one_elem_nan": torch.tensor([float("nan")]),
            "same_tensor_twice": x,
            "same_again": x,
            "x_view": x[0],
        }
        return out


class PrinterTortureNet(nn.Module):
    """See _PrinterTorture; also dict outputs with non-str keys and str arguments with emoji, control and
    non-BMP characters (json's ensure_ascii escaping)."""

    def __init__(self):
        super().__init__()
        self.torture = _PrinterTorture()
        self.keys = _OddKeys()

    def forward(self, x, note="emoji 😀 ctrl \x01\x1f\x7f\b\f\r é ß \u2028 end"):
        out = self.torture(x)
        k = self.keys(x, note=note)
        return out["int_valued"].sum() + x.sum() + k[0].sum()


class _OddKeys(nn.Module):
    def forward(self, x, note=""):
        return {0: x, 2.5: x * 2, None: x + 1, True: "yes", "ключ": x - 1, "emoji😀": note}


class _PassThrough(nn.Module):
    def forward(self, x):
        return x


class InplaceDataNet(nn.Module):
    """The same tensor object flows through several modules while its data changes in ways that do NOT bump
    its version counter (``.data`` writes, a copy through a second view's ``.data``). An implementation that
    reuses an earlier file for an "unchanged" tensor must still record each call's actual values."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.first = _PassThrough()
        self.second = _PassThrough()
        self.third = _PassThrough()
        self.out = nn.Linear(d, d)

    def forward(self, x):
        h = self.lin(x)
        self.first(h)
        h.data.mul_(2.0)  # h._version unchanged
        self.second(h)
        h[0].data.add_(1.0)  # through a view's .data: still no version bump on h
        self.third(h)
        return self.out(h)


class _Scale(nn.Module):
    def forward(self, t, k):
        return t * k


class IdReuseNet(nn.Module):
    """Many short-lived tensors in a loop: CPython reuses the id() (and the allocator the storage) of freed
    tensors, so an implementation keying anything on id() or data_ptr() without holding a reference mixes
    calls up."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.scale = _Scale()
        self.probe = _PassThrough()

    def forward(self, x):
        acc = x.new_zeros(())
        for i in range(6):
            t = x * (i + 1)  # the previous t is freed here
            u = self.scale(t, float(i))
            acc = acc + self.probe(u).sum()
            del t, u
        return acc


class PatchedForwardNet(nn.Module):
    """A submodule whose forward was replaced on the instance (as accelerate's hooks or a user's monkeypatch
    do): both tracers must call the patched forward, and leave that same function in place afterwards."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.inner = _Inner(d)
        self.head = nn.Linear(d, 2)
        orig = self.inner.forward

        def patched(x):
            return orig(x) * 10.0

        self.inner.forward = patched

    def forward(self, x):
        return self.head(self.inner(x))


def _plain(cls, make_inputs):
    def factory():
        return cls(), make_inputs

    return factory


def _dict_inputs():
    return (torch.randint(0, 16, (2, 5)),), {}


def _tuple_inputs():
    return (torch.randn(2, 3, 8), torch.randn(2, 3, 8)), {}


def _model_output_inputs():
    return (torch.randn(2, 4, 8),), {"labels": torch.randint(0, 3, (2, 4)), "output_hidden_states": True}


class _Tag:
    """A plain object: its default repr holds a memory address, which the format sanitizes."""


def _kwargs_inputs():
    x = torch.randn(2, 6)
    return (x,), {
        "mask": None, "temperature": 0.25, "steps": 2, "flip": True, "mode": "sum",
        "extras": [torch.ones(2, 6), 3, 0.5, "tag", None, _Tag(), (1, "two")],
    }


def _x(*shape):
    def make():
        return (torch.randn(*shape),), {}

    return make


# ----------------------------------------------------------------------------------------------------------
# registry
# ----------------------------------------------------------------------------------------------------------

ZOO: dict[str, ZooEntry] = {}


def _register(entry: ZooEntry) -> None:
    assert entry.name not in ZOO, entry.name
    ZOO[entry.name] = entry


for _e in [
    ZooEntry("llama", _llama, transformers=True, prunes=True,
             description="LlamaForCausalLM, 4 layers, padded attention mask, labels (loss)"),
    ZooEntry("gpt2", _gpt2, transformers=True,
             description="GPT2LMHeadModel, 2 layers (Conv1D, dropouts), use_cache=True (DynamicCache in outputs)"),
    ZooEntry("qwen2_bf16", _qwen2_bf16, transformers=True, prunes=True,
             description="Qwen2ForCausalLM in bfloat16, 3 layers"),
    ZooEntry("mistral_fp16", _mistral_fp16, transformers=True, prunes=True,
             description="MistralForCausalLM in float16, 3 layers, padded mask"),
    ZooEntry("bert", _bert, transformers=True, description="BertModel encoder, token types, padded mask"),
    ZooEntry("t5", _t5, transformers=True, calls_twice=True,
             description="T5ForConditionalGeneration with labels (each stack's dropout is called twice)"),
    ZooEntry("bart", _bart, transformers=True, description="BartForConditionalGeneration with decoder_input_ids"),
    ZooEntry("vit", _vit, transformers=True, calls_twice=True,
             description="ViTModel on 16x16 pixel_values (each layer's dropout is called twice)"),
    ZooEntry("mixtral", _mixtral, transformers=True,
             description="MixtralForCausalLM, 4 experts top-2, router logits in the outputs"),
    ZooEntry("dict_out", _plain(DictOutNet, _dict_inputs), description="dict outputs (and an int in them)"),
    ZooEntry("tuple_out", _plain(TupleOutNet, _tuple_inputs), description="nested tuple outputs, positional args"),
    ZooEntry("model_output", _plain(ModelOutputNet, _model_output_inputs), transformers=True,
             description="returns a transformers ModelOutput"),
    ZooEntry("kwargs_scalars", _plain(KwargsScalarsNet, _kwargs_inputs), calls_twice=True,
             description="None / int / float / bool / str / list / object kwargs; 0-d, nan-std, int, bool, "
                         "inf, big (summarized) tensors"),
    ZooEntry("nested_lists", _plain(NestedListsNet, _x(2, 3, 4)), prunes=True,
             description="ModuleList of blocks of ModuleLists: pruning at two levels"),
    ZooEntry("called_twice", _plain(CalledTwiceNet, _x(2, 3, 8)), calls_twice=True,
             description="leaf called 3x, a module with children called 2x"),
    ZooEntry("call_name_clash", _plain(CallNameClashNet, _x(2, 3, 8)), calls_twice=True,
             description="a module called twice next to modules named norm_call2 / norm_2 / norm_1 ..."),
    ZooEntry("aliased_module", _plain(AliasedModuleNet, lambda: ((torch.randint(0, 16, (2, 4)),
                                                                   torch.randint(0, 16, (2, 4))), {})),
             calls_twice=True, description="one module under two names, called through both"),
    ZooEntry("shared_layer_loop", _plain(SharedLayerLoopNet, _x(2, 3, 8)), calls_twice=True, prunes=True,
             description="ALBERT-style layer block called 4 times in a loop (pruning among repeated calls)"),
    ZooEntry("direct_forward", _plain(DirectForwardNet, _x(2, 8)),
             description="parent calls child.forward(...) directly, and Linear.forward(child, ...) unbound"),
    ZooEntry("inplace", _plain(InplaceNet, _x(2, 8)),
             description="in-place ops on inputs and outputs (records must be taken at call time)"),
    ZooEntry("odd_io", _plain(OddIONet, _x(2, 8)),
             description="no-arg module returning a Parameter, None / str outputs, dict + unicode kwargs, "
                         "float64/uint8/int8/half/bf16 tensors"),
    ZooEntry("printer_torture", _plain(PrinterTortureNet, _x(2, 3)),
             description="tensors for every branch of torch's printer; non-str dict keys; emoji/control chars"),
    ZooEntry("inplace_data", _plain(InplaceDataNet, _x(2, 8)),
             description="one tensor through several modules, changed via .data (no version bump)"),
    ZooEntry("id_reuse", _plain(IdReuseNet, _x(2, 8)), calls_twice=True,
             description="short-lived tensors in a loop (ids / storage reused), modules called 6 times"),
    ZooEntry("inplace_inference_mode", _plain(InplaceNet, _x(2, 8)), grad_mode="inference_mode",
             description="the in-place model under torch.inference_mode() (no version counters)"),
    ZooEntry("llama_inference_mode", _llama, transformers=True, prunes=True, grad_mode="inference_mode",
             description="the llama entry under torch.inference_mode()"),
    ZooEntry("patched_forward", _plain(PatchedForwardNet, _x(2, 8)),
             description="a submodule's forward replaced on the instance (accelerate-style)"),
    ZooEntry("unused_children", _plain(UnusedChildrenNet, _x(2, 8)),
             description="module with children it never calls (outputs null)"),
    ZooEntry("value_kwarg", _plain(ValueKwargNet, _x(2, 3, 8)), value_kwarg=True,
             description="attn(query=, key=, value=) and a kwarg value=3"),
    ZooEntry("top_level_param", _plain(TopLevelParamNet, _x(2, 8)), grad_fn_top=True,
             description="top-level forward multiplies by a Parameter (grad_fn= in reprs)"),
    ZooEntry("param_only", _plain(ParamOnlyNet, _x(2, 8)), grad_fn_top=True,
             description="no submodules: root keeps its outputs (with grad_fn=) in the JSON"),
]:
    _register(_e)


def get(name: str) -> ZooEntry:
    try:
        return ZOO[name]
    except KeyError:
        raise KeyError(f"unknown zoo model {name!r}; known: {', '.join(ZOO)}") from None


def names() -> list[str]:
    return list(ZOO)
