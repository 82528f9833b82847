"""Facts of one module call that the recorder notes beside its inputs and outputs: the autocast it ran under (the
error it raised, the format's ``error`` field, is ``repr_text.error_record``: the JAX capture writes it too)."""

from __future__ import annotations

import torch

any_autocast = getattr(torch._C, "_is_any_autocast_enabled", lambda: False)
_AUTOCAST_DEVICES = ("cuda", "cpu", "xpu", "mps", "hpu")


def autocast_state() -> tuple[str, torch.dtype] | None:
    """``(device type, dtype)`` of the autocast in effect now, or None (one cheap check when there is none)."""
    if not any_autocast():
        return None
    for device in _AUTOCAST_DEVICES:
        try:
            if torch.is_autocast_enabled(device):
                return device, torch.get_autocast_dtype(device)
        except (RuntimeError, TypeError):  # a device type this torch does not know
            continue
    return None
