"""A tiny Llama reference and "ports" of it with one decode-only bug, for the generation tests and docs.

The reference is transformers' ``LlamaForCausalLM`` built from a small config with a
fixed seed and eager attention (nothing downloaded). ``make_port`` copies it (same
weights), switches the copy to SDPA attention and optionally plants ONE bug that only
shows in the one-token decode steps of ``generate`` with a KV cache. Bugs are planted
by replacing the ``forward`` of module *instances* of the copy; transformers itself is
never modified.

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
    """``generate`` inside ``nbtrace.trace`` (full tensors, no pruning unless ``options`` say so); the Recorder."""
    import nbtrace

    options = {"use_repr": False, "do_prune_layers": False, **options}
    with nbtrace.trace(model, debug_path=folder, **options) as rec:
        generate(model, prompt, steps)
    return rec


# -- the port ---------------------------------------------------------------------------------------
def make_port(reference: nn.Module, bug: Bug | str | None = None, layer: int = 1) -> nn.Module:
    """A deep copy of ``reference`` with SDPA attention and, optionally, one decode-only ``bug``."""
    port = copy.deepcopy(reference)
    port.set_attn_implementation("sdpa")
    port.eval()
    if bug is not None:
        _PLANTERS[Bug(bug)](port, layer)
    return port


def _replace_forward(module: nn.Module, edit: Callable[[dict[str, Any]], None]) -> None:
    """Give ``module`` (this instance) a forward that lets ``edit`` change its arguments, by name, first."""
    original = module.forward
    signature = inspect.signature(original)

    @functools.wraps(original)
    def forward(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        arguments = dict(bound.arguments)
        edit(arguments)
        named: dict[str, Any] = {}
        for name, value in arguments.items():
            if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
                named.update(value)
            else:
                named[name] = value
        return original(**named)

    module.forward = forward


def _one_token_step(arguments: dict[str, Any]) -> bool:
    return arguments["hidden_states"].shape[1] == 1 and arguments.get("past_key_values") is not None


def _plant_position_ids(port: nn.Module, layer: int) -> None:
    def edit(arguments: dict[str, Any]) -> None:
        source = arguments["input_ids"] if arguments.get("input_ids") is not None else arguments["inputs_embeds"]
        batch, length = source.shape[:2]
        arguments["position_ids"] = torch.arange(length, device=source.device).expand(batch, length)

    _replace_forward(port.model, edit)


def _plant_rope_off_by_one(port: nn.Module, layer: int) -> None:
    def edit(arguments: dict[str, Any]) -> None:
        if arguments["position_ids"].shape[-1] == 1:
            arguments["position_ids"] = arguments["position_ids"] + 1

    _replace_forward(port.model.rotary_emb, edit)


def _plant_cache_bug(append: bool) -> Callable[[nn.Module, int], None]:
    def plant(port: nn.Module, layer: int) -> None:
        def edit(arguments: dict[str, Any]) -> None:
            if _one_token_step(arguments):
                arguments["past_key_values"] = _UnstoredCache(arguments["past_key_values"], append)

        _replace_forward(port.model.layers[layer].self_attn, edit)

    return plant


def _plant_mask(port: nn.Module, layer: int) -> None:
    attention = port.model.layers[layer].self_attn

    def edit(arguments: dict[str, Any]) -> None:
        if not _one_token_step(arguments):
            return
        hidden = arguments["hidden_states"]
        keys = arguments["past_key_values"].get_seq_length(attention.layer_idx) + 1
        wrong = torch.ones(1, keys, dtype=torch.bool, device=hidden.device).tril()[None, None]
        wrong = wrong.expand(hidden.shape[0], 1, 1, keys)
        mask = arguments.get("attention_mask")
        if mask is None:
            arguments["attention_mask"] = wrong
        elif mask.dtype == torch.bool:
            arguments["attention_mask"] = mask & wrong
        else:
            arguments["attention_mask"] = mask.masked_fill(~wrong, torch.finfo(mask.dtype).min)

    _replace_forward(attention, edit)


class _UnstoredCache:
    """Stands in for a transformers ``Cache`` in one attention call: ``update`` does not store.

    ``update`` returns the layer's cached keys/values, followed by the new ones when
    ``append``, and leaves the cache as it was. Everything else is the real cache's.
    """

    def __init__(self, cache: Any, append: bool) -> None:
        self._cache = cache
        self._append = append

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args: Any, **kwargs: Any):
        cached = self._cache.layers[layer_idx]
        if not self._append:
            return cached.keys, cached.values
        return torch.cat([cached.keys, key_states], dim=-2), torch.cat([cached.values, value_states], dim=-2)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache, name)

    def __repr__(self) -> str:
        return repr(self._cache)


_PLANTERS: dict[Bug, Callable[[nn.Module, int], None]] = {
    Bug.POSITION_IDS: _plant_position_ids,
    Bug.ROPE_OFF_BY_ONE: _plant_rope_off_by_one,
    Bug.KV_NOT_APPENDED: _plant_cache_bug(append=False),
    Bug.KV_STALE: _plant_cache_bug(append=True),
    Bug.MASK: _plant_mask,
}
