"""Where an offloaded model's weights are: the twin gets them the way the model's own hooks do.

A model larger than its device runs offloaded: accelerate's ``cpu_offload``, ``disk_offload`` and ``dispatch_model``
with an offload map keep a module's parameters on the meta device and, as the module runs, put each in place from a
weights map (host memory, or a memory-mapped file on disk) through the hook they attach (``module._hf_hook``,
which wraps ``module.forward``; its ``_old_forward`` is the module's own). The float64 twin and the weight
fingerprints read the values from that same map, one tensor at a time; the copy runs the module's own forward,
without the hook. Nothing here imports accelerate: a hook is recognised by the attributes it holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn


def _hooks(hook: Any) -> Iterator[Any]:
    """A hook and, for a sequence of hooks (``SequentialHook``), each of them."""
    if hook is None:
        return
    inner = getattr(hook, "hooks", None)
    if isinstance(inner, (list, tuple)):
        for one in inner:
            yield from _hooks(one)
    else:
        yield hook


def _sources(module: nn.Module) -> Iterator[tuple[Any, bool, Any]]:
    """``(weights map, whether it covers submodules, the device it puts them on)`` of each offloading hook."""
    for hook in _hooks(getattr(module, "_hf_hook", None)):
        weights = getattr(hook, "weights_map", None)
        if weights is not None and getattr(hook, "offload", False):
            yield weights, bool(getattr(hook, "place_submodules", False)), getattr(hook, "execution_device", None)


def offloaded_values(model: nn.Module) -> dict[int, tuple[torch.Tensor, Any]]:
    """``id(tensor on the meta device) -> (its values, the device its module runs on)`` for every parameter and
    buffer of ``model`` that an offloading hook puts in place when its module runs (read from the hook's weights map,
    as the hook reads it; the values stay where the map keeps them)."""
    found: dict[int, tuple[torch.Tensor, Any]] = {}
    for module in model.modules():
        for weights, recurse, device in _sources(module):
            held = list(module.named_parameters(recurse=recurse))
            held += list(module.named_buffers(recurse=recurse))
            for name, tensor in held:
                if tensor.is_meta and id(tensor) not in found:
                    try:
                        value = weights[name]
                    except (KeyError, AttributeError, TypeError):
                        continue
                    if isinstance(value, torch.Tensor) and not value.is_meta and value.shape == tensor.shape:
                        found[id(tensor)] = value, device
    return found


def execution_device(model: nn.Module) -> torch.device | None:
    """The device the first offloading hook of ``model`` runs its module on (None: no such hook)."""
    for module in model.modules():
        for hook in _hooks(getattr(module, "_hf_hook", None)):
            device = getattr(hook, "execution_device", None)
            if device is not None:
                return torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    return None


def own_forward(module: nn.Module) -> Any:
    """The module's own ``forward`` under an accelerate hook (``_old_forward``), or None where it has no hook."""
    if getattr(module, "_hf_hook", None) is None:
        return None
    return module.__dict__.get("_old_forward")


#: attributes of an offloading hook a copy of the module leaves behind (the copy holds its weights itself)
HOOK_ATTRIBUTES = frozenset({"_hf_hook", "_old_forward"})
