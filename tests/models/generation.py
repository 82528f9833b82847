"""A tiny Llama reference and "ports" of it with one decode-only bug, for the generation tests and docs.

The reference is transformers' ``LlamaForCausalLM`` built from a small config with a
fixed seed and eager attention (nothing downloaded). ``make_port`` copies it (same
weights) and gives every layer the port's own attention (``PortAttention``: its own
rotary, SDPA call and use of the KV cache); it optionally plants ONE bug that only shows
in the one-token decode steps of ``generate`` with a KV cache. The cache and mask bugs
are the port's own code, so they do not depend on what transformers calls its keywords;
the two position bugs edit ``position_ids`` on module *instances* of the copy. transformers
itself is never modified. ``check_planted`` proves that each bug still changes what the
port computes (and names transformers' version when an upstream change undid one).

Steps are counted like the forwards of ``generate``: step 0 is the prefill over the
prompt, step ``k >= 1`` the k-th one-token decode step. ``BUG_SITES`` says, in the
reference's naming, which module each bug lives in and the step it is born at.
"""

from __future__ import annotations

import copy
import enum
import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = "LlamaForCausalLM"
LAYERS = 3


class Bug(str, enum.Enum):
    """A decode-only bug a port can have. Each is invisible in the prefill (step 0)."""

    POSITION_IDS = "position_ids"  # LlamaModel uses arange(input length): position 0 in every one-token step
    ROPE_OFF_BY_ONE = "rope_off_by_one"  # the rotary embedding of one-token steps uses position p + 1
    KV_NOT_APPENDED = "kv_not_appended"  # one layer attends to the cached past only, stores nothing
    KV_STALE = "kv_stale"  # one layer attends to past + new but never stores the new key/value
    MASK = "mask"  # one layer gets a top-left causal mask in one-token steps: only key 0 is visible


#: bug -> (module of the reference where it lives, step it is born at); layer bugs sit in layer 1
BUG_SITES: dict[Bug, tuple[str, int]] = {
    Bug.POSITION_IDS: (f"{ROOT}.model", 1),
    Bug.ROPE_OFF_BY_ONE: (f"{ROOT}.model.rotary_emb", 1),
    Bug.KV_NOT_APPENDED: (f"{ROOT}.model.layers.1.self_attn", 1),
    Bug.KV_STALE: (f"{ROOT}.model.layers.1.self_attn", 1),
    Bug.MASK: (f"{ROOT}.model.layers.1.self_attn", 1),
}


def build_reference(layers: int = LAYERS, hidden: int = 64, seed: int = 1) -> nn.Module:
    """transformers' ``LlamaForCausalLM``, random weights from ``seed``, eager attention, eval mode.

    ``initializer_range`` is ten times Llama's, so greedy decoding picks varied tokens with
    top-2 gaps far above fp32 noise; no special tokens, so ``generate`` never stops early.
    The global RNG state is left as it was.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=hidden, intermediate_size=2 * hidden, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=layers, vocab_size=256, max_position_embeddings=1024, initializer_range=0.2,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, attn_implementation="eager",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model.eval()


def make_prompt(length: int = 8, seed: int = 1) -> torch.Tensor:
    """A ``(1, length)`` prompt of token ids, the same for the same arguments."""
    return torch.randint(0, 256, (1, length), generator=torch.Generator().manual_seed(seed))


def generate(model: nn.Module, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy ``generate`` with the KV cache: ``steps`` forwards (the prefill and ``steps - 1`` decode steps)."""
    with torch.no_grad():
        return model.generate(prompt, max_new_tokens=steps, do_sample=False, use_cache=True)


def trace_generate(model: nn.Module, prompt: torch.Tensor, steps: int, folder: Path, **options: Any):
    """``generate`` inside ``nbtrace.trace`` (full tensors, no pruning, rounding measured in float64 as it
    records, unless ``options`` say otherwise); the Recorder."""
    import nbtrace

    options = {"use_repr": False, "do_prune_layers": False, "measure_rounding": True, **options}
    with nbtrace.trace(model, debug_path=folder, **options) as rec:
        generate(model, prompt, steps)
    return rec


def last_logits(model: nn.Module, prompt: torch.Tensor, steps: int) -> list[torch.Tensor]:
    """The logits of the last position at each of ``steps`` forwards of greedy ``generate`` (a plain torch hook)."""
    seen: list[torch.Tensor] = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: seen.append(out[:, -1].detach().clone()))
    try:
        generate(model, prompt, steps)
    finally:
        hook.remove()
    return seen


def check_planted(reference: nn.Module, prompt: torch.Tensor, bug: Bug | str | None, steps: int = 3) -> list[float]:
    """The largest logit difference port - reference at each step; AssertionError, naming the versions of
    transformers and torch, when the planted ``bug`` no longer changes a decode step (or the clean port does)."""
    import transformers

    differences = [
        float((a - b).abs().max())
        for a, b in zip(last_logits(reference, prompt, steps), last_logits(make_port(reference, bug), prompt, steps))
    ]
    versions = f"transformers=={transformers.__version__}, torch=={torch.__version__}"
    if bug is None:
        assert max(differences) < 1e-3, f"the clean port differs from the reference by {differences} ({versions})"
    else:
        assert differences[0] < 1e-3, f"{Bug(bug).value} shows in the prefill: {differences} ({versions})"
        assert max(differences[1:]) > 1e-2, (
            f"planting {Bug(bug).value} no longer changes the port's decode steps ({differences}) with {versions}: "
            "an upstream change bypasses the planted code; see the versions tests/models/generation.py knows"
        )
    return differences


# -- the port ---------------------------------------------------------------------------------------
# What the port touches of transformers, and the versions it is known to work with (4.48 .. 5.24):
# - the decoder layer calls ``self_attn`` with the hidden states first and the rotary ``(cos, sin)`` pair and
#   the KV cache among its keywords; their NAMES changed (``past_key_value`` -> ``past_key_values`` (4.56) ->
#   ``cache`` (5.24)), so ``PortAttention`` finds them by what they are, never by name;
# - it unpacks two results from ``self_attn`` (the output, the attention weights);
# - ``Cache.update(keys, values, layer_idx)`` stores a step's keys/values and returns the layer's whole cache;
# - ``LlamaModel.forward`` and ``LlamaRotaryEmbedding.forward`` take ``position_ids`` (the two position bugs).
# A release that changes one of these makes ``check_planted`` fail, naming transformers' version.
def make_port(reference: nn.Module, bug: Bug | str | None = None, layer: int = 1) -> nn.Module:
    """A deep copy of ``reference`` whose attention is the port's own (``PortAttention``, SDPA), with,
    optionally, one decode-only ``bug`` (the cache and mask bugs live in layer ``layer``'s attention)."""
    port = copy.deepcopy(reference)
    port.set_attn_implementation("sdpa")
    bug = Bug(bug) if bug is not None else None
    for index, block in enumerate(port.model.layers):
        block.self_attn = PortAttention(block.self_attn, bug if index == layer and bug in _ATTENTION_BUGS else None)
    if bug in _PLANTERS:
        _PLANTERS[bug](port)
    return port.eval()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class PortAttention(nn.Module):
    """The port's own attention: the reference layer's projections, its own rotary and SDPA call, and its
    own use of the KV cache, where the attention bugs of ``Bug`` are planted.

    It keeps the keys/values it last stored (``past``), which is what a cache bug attends to in place of
    the cache it fails to update. Without a mask argument of its own: the prompt is causal, and a one-token
    step sees every cached position (but for ``Bug.MASK``).
    """

    def __init__(self, reference: nn.Module, bug: Bug | None = None) -> None:
        super().__init__()
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (
            copy.deepcopy(getattr(reference, name)) for name in ("q_proj", "k_proj", "v_proj", "o_proj")
        )
        self.layer_idx = reference.layer_idx
        self.head_dim = reference.head_dim
        self.bug = bug
        self.past: tuple[torch.Tensor, torch.Tensor] | None = None

    def project(self, hidden_states: torch.Tensor, kwargs: dict[str, Any]) -> tuple:
        """Queries, keys (both rotated) and values of ``hidden_states``, and the cache given as a keyword."""
        batch, length, _ = hidden_states.shape
        cos, sin = _find(kwargs, _is_rotary, "the rotary (cos, sin) pair")
        query, key, value = (
            project(hidden_states).view(batch, length, -1, self.head_dim).transpose(1, 2)
            for project in (self.q_proj, self.k_proj, self.v_proj)
        )
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query, key = query * cos + _rotate_half(query) * sin, key * cos + _rotate_half(key) * sin
        return query, key, value, _find(kwargs, _is_cache, None)

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
        """Attention over ``hidden_states`` (batch, length, hidden); the rotary pair and cache come as keywords."""
        batch, length, _ = hidden_states.shape
        query, key, value, cache = self.project(hidden_states, kwargs)
        one_token_step = length == 1 and cache is not None and self.past is not None
        mask = None
        if one_token_step and self.bug is Bug.KV_NOT_APPENDED:
            key, value = self.past  # attends to the cached past only and stores nothing
        elif one_token_step and self.bug is Bug.KV_STALE:
            key, value = torch.cat([self.past[0], key], dim=-2), torch.cat([self.past[1], value], dim=-2)
        elif cache is not None:
            key, value = cache.update(key, value, self.layer_idx)
            self.past = key, value
        if one_token_step and self.bug is Bug.MASK:  # a top-left causal mask: only key 0 is visible
            mask = torch.zeros(1, key.shape[-2], dtype=torch.bool, device=key.device)
            mask[0, 0] = True
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        out = nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=mask, is_causal=mask is None and length > 1 and length == key.shape[-2]
        )
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1)), None


class OwnCacheAttention(PortAttention):
    """A correct port's attention that keeps its KV cache itself, as many hand-written ports do: ``self.past``
    reassigned at every step, or (``in_place``) one preallocated tensor pair written in place, as Meta's Llama
    does. It keeps transformers' cache in step too (``generate`` reads its length), but attends over its own."""

    def __init__(self, reference: nn.Module, in_place: bool = False, gap: bool = False) -> None:
        super().__init__(reference)
        self.in_place = in_place
        self.gap = gap  # a bug: a decode step writes one position too far, leaving a zero key/value behind
        self.cache_k: torch.Tensor | None = None
        self.cache_v: torch.Tensor | None = None
        self.filled = 0

    def forward(self, hidden_states: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, None]:
        batch, length, _ = hidden_states.shape
        query, key, value, cache = self.project(hidden_states, kwargs)
        if cache is not None:
            cache.update(key, value, self.layer_idx)  # only so that generate knows the length
        if self.in_place:
            if length > 1:  # a prompt starts the cache over
                self.cache_k = key.new_zeros(batch, key.shape[1], 64, self.head_dim)
                self.cache_v = torch.zeros_like(self.cache_k)
                self.filled = 0
            if self.gap and length == 1:
                self.filled += 1
            self.cache_k[:, :, self.filled:self.filled + length] = key
            self.cache_v[:, :, self.filled:self.filled + length] = value
            self.filled += length
            key, value = self.cache_k[:, :, :self.filled], self.cache_v[:, :, :self.filled]
        else:
            if length == 1 and self.past is not None:
                key, value = torch.cat([self.past[0], key], dim=-2), torch.cat([self.past[1], value], dim=-2)
            self.past = key, value
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        out = nn.functional.scaled_dot_product_attention(query, key, value, is_causal=length > 1)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1)), None


def make_own_cache_port(reference: nn.Module, in_place: bool = False, gap_layer: int | None = None) -> nn.Module:
    """A port whose every attention keeps its own KV cache (``OwnCacheAttention``): correct, or with layer
    ``gap_layer``'s decode steps writing one position too far (``in_place``)."""
    port = copy.deepcopy(reference)
    port.set_attn_implementation("sdpa")
    for index, block in enumerate(port.model.layers):
        block.self_attn = OwnCacheAttention(block.self_attn, in_place, gap=index == gap_layer)
    return port.eval()


def _is_rotary(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, torch.Tensor) for v in value)


def _is_cache(value: Any) -> bool:
    return callable(getattr(value, "update", None)) and callable(getattr(value, "get_seq_length", None))


def _find(kwargs: dict[str, Any], test: Callable[[Any], bool], required: str | None) -> Any:
    """The one keyword argument that passes ``test``, whatever its name; ``required`` names it if missing."""
    found = [value for value in kwargs.values() if test(value)]
    if not found and required is not None:
        import transformers

        raise TypeError(
            f"PortAttention: no {required} among the keywords {sorted(kwargs)} "
            f"(transformers=={transformers.__version__}; see the versions this port knows in tests/models/generation.py)"
        )
    return found[0] if found else None


def _replace_forward(module: nn.Module, edit: Callable[[dict[str, Any]], None]) -> None:
    """Give ``module`` (this instance) a forward that lets ``edit`` change its arguments, by name, first.

    The instance gets a subclass of its class of the same name (so a copy of the port, such as nbtrace's
    float64 copy, runs the copy's own code, never this instance's bound forward)."""
    cls = type(module)
    signature = inspect.signature(cls.forward)

    @functools.wraps(cls.forward)
    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(self, *args, **kwargs)
        arguments = dict(bound.arguments)
        edit(arguments)
        arguments.pop("self")
        named: dict[str, Any] = {}
        for name, value in arguments.items():
            if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        return cls.forward(self, **named)

    module.__class__ = type(cls.__name__, (cls,), {"forward": forward, "__qualname__": cls.__qualname__,
                                                    "__module__": cls.__module__})


def _plant_position_ids(port: nn.Module) -> None:
    def edit(arguments: dict[str, Any]) -> None:
        source = arguments["input_ids"] if arguments.get("input_ids") is not None else arguments["inputs_embeds"]
        batch, length = source.shape[:2]
        arguments["position_ids"] = torch.arange(length, device=source.device).expand(batch, length)

    _replace_forward(port.model, edit)


def _plant_rope_off_by_one(port: nn.Module) -> None:
    def edit(arguments: dict[str, Any]) -> None:
        if arguments["position_ids"].shape[-1] == 1:
            arguments["position_ids"] = arguments["position_ids"] + 1

    _replace_forward(port.model.rotary_emb, edit)


_ATTENTION_BUGS = (Bug.KV_NOT_APPENDED, Bug.KV_STALE, Bug.MASK)
_PLANTERS: dict[Bug, Callable[[nn.Module], None]] = {
    Bug.POSITION_IDS: _plant_position_ids,
    Bug.ROPE_OFF_BY_ONE: _plant_rope_off_by_one,
}
