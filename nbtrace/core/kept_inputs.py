"""The top-level inputs of a forward, kept whole in the sidecar: the section ``inputs``, read as ``trace.kept_inputs``.

A trace of printed values (``use_repr=True``, the format's default) holds the model's inputs only as torch printed
them; a live port cannot be run on that. Where nbtrace records a forward's float64 twin it also keeps the
top-level input tensors (token ids, masks, pixel values: up to 16 MiB, else nothing), as one ``torch.save`` blob of
a dict of tensors (read back with ``torch.load(weights_only=True)``: tensors only, nothing executed), base64-encoded
(a trace written without torch, by ``nbtrace.jax``, holds one safetensors blob under ``"safetensors"`` instead)::

    {"version": 1, "torch": "<base64 of torch.save({place: tensor})>", "places": ["args.0", "kwargs.attention_mask"]}

Each tensor is stored under its place name as the trace names it (``args.0``, ``kwargs.input_ids``). A trace whose
root inputs are in safetensors files (``use_repr=False``) keeps no section: its files hold them.
"""

from __future__ import annotations

import base64
import io
from typing import TYPE_CHECKING, Any

from ..errors import TraceFormatError
from .sidecar import sidecar_path

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .trace import Trace

INPUTS_SECTION = "inputs"
INPUTS_VERSION = 1


def inputs_section(tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    """The section for ``tensors`` (host tensors, by place)."""
    import torch

    buffer = io.BytesIO()
    torch.save({place: t.contiguous() for place, t in tensors.items()}, buffer)
    return {"version": INPUTS_VERSION, "torch": base64.b64encode(buffer.getvalue()).decode("ascii"),
            "places": list(tensors)}


def inputs_section_of_arrays(arrays: dict[str, Any]) -> dict[str, Any]:
    """The section for numpy ``arrays`` by place, without torch (a JAX trace): one safetensors blob instead of
    ``torch.save``'s, read back by ``kept_inputs`` alike."""
    import numpy as np
    from safetensors.numpy import save

    blob = save({place: np.ascontiguousarray(a) for place, a in arrays.items()})
    return {"version": INPUTS_VERSION, "safetensors": base64.b64encode(blob).decode("ascii"), "places": list(arrays)}


def kept_inputs(trace: Trace) -> dict[str, torch.Tensor]:
    """The top-level input tensors the trace kept, by place (empty without a section); a malformed section is a
    TraceFormatError naming the sidecar."""
    section = trace.sidecar.get(INPUTS_SECTION)
    if section is None:
        return {}
    where = sidecar_path(trace.source) if trace.source is not None else "<recorded trace>"
    if not isinstance(section, dict) or not any(isinstance(section.get(k), str) for k in ("torch", "safetensors")):
        raise TraceFormatError(where, f"bad '{INPUTS_SECTION}' section: it must hold a 'torch' or 'safetensors' string")
    version = section.get("version")
    if not isinstance(version, int) or version > INPUTS_VERSION:
        raise TraceFormatError(where, f"bad '{INPUTS_SECTION}' section: version {version!r}; this nbtrace reads up "
                                      f"to {INPUTS_VERSION}")
    import torch

    try:
        if isinstance(section.get("torch"), str):
            loaded = torch.load(io.BytesIO(base64.b64decode(section["torch"], validate=True)), weights_only=True)
        else:
            from safetensors.torch import load

            loaded = load(base64.b64decode(section["safetensors"], validate=True))
    except Exception as exc:  # noqa: BLE001 - whatever a corrupt blob raises, it is a bad section
        raise TraceFormatError(where, f"bad '{INPUTS_SECTION}' section: {exc}") from None
    if not isinstance(loaded, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                               for k, v in loaded.items()):
        raise TraceFormatError(where, f"bad '{INPUTS_SECTION}' section: it must hold tensors by place")
    return loaded
