"""What one forward of a generation did, read from its Trace: input length, KV cache, the token it picked.

Each forward of a traced ``generate`` is a *step*: step 0 the prefill over the prompt, then
one-token decode steps. The facts come from the ``generation`` section of nbtrace's sidecar
when the forward was part of a run of several (``capture/generation.py`` writes it; see
docs/format.md), else from the trace itself: the root's ``input_ids`` and the full logits
tensor of the last leaf call (``lm_head``), when ``use_repr=False`` kept it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .node import Node
from .tensor import TensorValue
from .trace import Trace

GENERATION_SECTION = "generation"
#: keyword arguments that carry a KV cache into a forward (transformers and common ports)
CACHE_ARGUMENTS = ("past_key_values", "past_key_value", "cache", "kv_cache", "layer_past")


def generation_section(trace: Trace) -> dict[str, Any]:
    """The trace's ``generation`` sidecar section (``{}`` when it has none)."""
    section = trace.sidecar.get(GENERATION_SECTION)
    return section if isinstance(section, dict) else {}


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return value
    return None


@dataclass(frozen=True)
class CacheFacts:
    """A forward's KV cache, per layer: positions before (``past``) and after (``length``) it, and
    ``[mean, std, absmax]`` of the keys and values it appended (None where nothing was appended), and the
    cache's dtype (``torch.bfloat16``)."""

    past: tuple[int, ...]
    length: tuple[int, ...]
    new_keys: tuple[tuple[float, ...] | None, ...]
    new_values: tuple[tuple[float, ...] | None, ...]
    dtype: str | None = None

    @property
    def appended(self) -> tuple[int, ...]:
        """How many positions each layer's cache grew by."""
        return tuple(after - before for before, after in zip(self.past, self.length))


def _stat_rows(value: Any, layers: int) -> tuple[tuple[float, ...] | None, ...]:
    rows: list[tuple[float, ...] | None] = []
    items = value if isinstance(value, list) and len(value) == layers else [None] * layers
    for item in items:
        ok = isinstance(item, list) and len(item) == 3 and all(isinstance(x, (int, float)) for x in item)
        rows.append(tuple(float(x) for x in item) if ok else None)
    return tuple(rows)


def cache_facts(trace: Trace) -> CacheFacts | None:
    """The forward's KV cache as its sidecar recorded it, or None."""
    cache = generation_section(trace).get("cache")
    if not isinstance(cache, dict):
        return None
    past, length = _int_list(cache.get("past")), _int_list(cache.get("length"))
    if past is None or length is None or len(past) != len(length):
        return None
    layers = len(length)
    dtype = cache.get("dtype")
    return CacheFacts(tuple(past), tuple(length), _stat_rows(cache.get("new_keys"), layers),
                      _stat_rows(cache.get("new_values"), layers), dtype if isinstance(dtype, str) else None)


def _root_inputs(trace: Trace) -> dict[str, TensorValue]:
    return {arg: tensor for io, arg, tensor in trace.root.tensors() if io == "input"}


def _input_ids(tensors: dict[str, TensorValue]) -> TensorValue | None:
    """``kwargs.input_ids``, else the first integer positional argument."""
    ids = tensors.get("kwargs.input_ids")
    if ids is not None:
        return ids
    return next((t for arg, t in tensors.items() if arg.startswith("args.") and "int" in t.dtype), None)


def input_length(trace: Trace) -> int | None:
    """How many positions the forward was fed: the length of its ``input_ids`` (or ``inputs_embeds``)."""
    recorded = generation_section(trace).get("input_length")
    if isinstance(recorded, int) and not isinstance(recorded, bool):
        return recorded
    tensors = _root_inputs(trace)
    ids = _input_ids(tensors)
    if ids is not None and len(ids.shape) >= 2:
        return ids.shape[1]
    embeds = tensors.get("kwargs.inputs_embeds")
    return embeds.shape[1] if embeds is not None and len(embeds.shape) >= 3 else None


def logits_node(trace: Trace) -> Node | None:
    """The call whose output is the logits, or None: the last leaf call that recorded outputs, when it has
    one float output of two or more dimensions, wider than its input (a projection onto the vocabulary).

    (The format keeps outputs only at leaves, so the root's own output is not there; for a
    causal LM this is ``lm_head``. A model that computes its logits outside a module has none.)
    """
    for node in reversed(trace.nodes()):
        outputs = node.output_tensors()
        if node.children or not outputs:
            continue
        inputs = node.input_tensors()
        if (
            len(outputs) == 1
            and len(outputs[0].shape) >= 2
            and "float" in outputs[0].dtype
            and inputs
            and inputs[0].shape
            and outputs[0].shape[-1] > inputs[0].shape[-1]
        ):
            return node
        return None
    return None


def picked_tokens(trace: Trace) -> tuple[int, ...] | None:
    """The token each sequence of the batch picked: the argmax of the logits at the last position.

    From the sidecar, else from the full logits tensor; None without either (``use_repr=True``
    keeps printed values only, and a SUMMARY file none).
    """
    tokens = _int_list(generation_section(trace).get("tokens"))
    if tokens is not None:
        return tuple(tokens)
    node = logits_node(trace)
    if node is None:
        return None
    logits = node.output_tensors()[0]
    if logits.ref is None:
        return None
    tensor = logits.load()
    rows = tensor if tensor.ndim == 2 else tensor.reshape(-1, tensor.shape[-2], tensor.shape[-1])[:, -1, :]
    return tuple(int(i) for i in rows.float().argmax(dim=-1))


def token_margins(trace: Trace) -> tuple[float, ...] | None:
    """How far the picked token's logit is above the runner-up's, per sequence (from the sidecar), or None."""
    margins = generation_section(trace).get("margins")
    if isinstance(margins, list) and all(isinstance(m, (int, float)) for m in margins):
        return tuple(float(m) for m in margins)
    return None


_INTEGER = re.compile(r"-?\d+")


def fed_tokens(trace: Trace) -> tuple[int, ...] | None:
    """The last token each sequence was fed (``input_ids[:, -1]``), or None.

    In greedy decoding it is the token the previous step picked, so it stands in for that
    step's ``picked_tokens`` when the step's trace cannot tell. Read from the safetensors
    file, or from the printed values when they are complete (integers print exactly).
    """
    ids = _input_ids(_root_inputs(trace))
    if ids is None or len(ids.shape) != 2 or ids.numel == 0:
        return None
    if ids.ref is not None:
        return tuple(int(i) for i in ids.load()[:, -1])
    if not ids.lines:
        return None
    text = " ".join(ids.lines)
    if "..." in text:
        return None
    body = text[text.find("(") + 1 : text.rfind("]") + 1]  # the values, without "tensor(" and ", dtype=…)"
    values = [int(v) for v in _INTEGER.findall(body)]
    if len(values) != ids.numel:
        return None
    rows, columns = ids.shape
    return tuple(values[(row + 1) * columns - 1] for row in range(rows))
