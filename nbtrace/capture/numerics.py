"""The sidecar's ``numerics`` section: what a forward computed with, read from torch's flags as it starts.

Two runs of the same model round differently on another machine or with other settings (TF32
matmuls, a flash attention kernel, autocast), so each forward records them: TF32 for matmuls and
cuDNN, the float32 matmul precision, reduced-precision reductions, the enabled attention backends,
autocast per device, deterministic algorithms, the names of the devices holding the model's
parameters and buffers (read once per ``trace`` block, at its first forward: walking every parameter
per forward would cost more than the rest), and torch's version. Reading flags costs no device work; a flag torch
refuses to read (legacy and new precision APIs mixed) is null. ``core/measured.py`` loads it as
``trace.numerics``; docs/format.md documents it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from itertools import chain
from typing import Any

import torch
from torch import nn

from ..core.dtypes import short_dtype
from .speculate import named_modules

_SDPA = ("flash", "mem_efficient", "math", "cudnn")


def _read(get: Callable[[], Any]) -> Any:
    try:
        return get()
    except Exception:  # noqa: BLE001 - torch refuses some reads when old and new precision APIs were mixed
        return None


def _tf32(legacy: Callable[[], bool], new: Callable[[], str]) -> bool | None:
    """TF32 on or off, by the legacy flag, else by the newer ``fp32_precision`` setting."""
    value = _read(legacy)
    if isinstance(value, bool):
        return value
    precision = _read(new)
    return precision == "tf32" if isinstance(precision, str) else None


def _sdpa_backends() -> list[str]:
    cuda = torch.backends.cuda
    found = []
    for name in _SDPA:
        check = getattr(cuda, f"{name}_sdp_enabled", None)
        if check is not None and _read(check):
            found.append(name)
    return found


def _autocast(device: str) -> dict[str, Any]:
    enabled = _read(lambda: torch.is_autocast_enabled(device))
    dtype = _read(lambda: torch.get_autocast_dtype(device))
    return {"enabled": enabled, "dtype": short_dtype(str(dtype)) if isinstance(dtype, torch.dtype) else None}


@functools.lru_cache(maxsize=None)
def device_name(device: torch.device) -> str:
    """A person's name of a device: ``cpu``, or the card's name (``NVIDIA H100 80GB HBM3``)."""
    if device.type == "cuda":
        name = _read(lambda: torch.cuda.get_device_name(device))
        if isinstance(name, str):
            return name
    return str(device)


def model_devices(model: nn.Module) -> list[str]:
    """The names of the devices holding ``model``'s parameters and buffers, sorted (read once per trace block:
    the modules' own dicts, without ``parameters()``'s generator per level of nesting)."""
    found = set()
    for _, module in named_modules(model):
        for tensor in chain(module._parameters.values(), module._buffers.values()):
            if tensor is not None:
                found.add(tensor.device)
    return sorted({device_name(device) for device in found})


def numerics_section(devices: list[str]) -> dict[str, Any]:
    """The ``numerics`` section for a forward starting now, of a model on ``devices`` (``model_devices``)."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    return {
        "torch": torch.__version__,
        "matmul_tf32": _tf32(lambda: matmul.allow_tf32, lambda: matmul.fp32_precision),
        "cudnn_tf32": _tf32(lambda: cudnn.allow_tf32, lambda: cudnn.conv.fp32_precision),
        "float32_matmul_precision": _read(torch.get_float32_matmul_precision),
        "reduced_precision_reduction": {
            "float16": _read(lambda: matmul.allow_fp16_reduced_precision_reduction),
            "bfloat16": _read(lambda: matmul.allow_bf16_reduced_precision_reduction),
        },
        "sdpa": _sdpa_backends(),
        "sdpa_math_low_precision_reduction": _read(torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed),
        "autocast": {device: _autocast(device) for device in ("cpu", "cuda")},
        "deterministic": _read(torch.are_deterministic_algorithms_enabled),
        "devices": list(devices),
    }
