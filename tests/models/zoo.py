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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .zoo_odd import (
    IdReuseNet,
    InplaceDataNet,
    InplaceNet,
    OddIONet,
    PatchedForwardNet,
    PrinterTortureNet,
)
from .zoo_plain import (
    AliasedModuleNet,
    CalledTwiceNet,
    CallNameClashNet,
    DictOutNet,
    DirectForwardNet,
    KwargsScalarsNet,
    ModelOutputNet,
    NestedListsNet,
    ParamOnlyNet,
    SharedLayerLoopNet,
    TopLevelParamNet,
    TupleOutNet,
    UnusedChildrenNet,
    ValueKwargNet,
)
from .zoo_transformers import _bart, _bert, _gpt2, _llama, _mistral_fp16, _mixtral, _qwen2_bf16, _t5, _vit

__all__ = ["ZOO", "ZooEntry", "get", "names"]


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
