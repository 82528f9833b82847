"""What a run computed with, and whether its rounding was measured, in a few short lines for the views.

The one home of these words: a verdict shows them beside itself (``numerics_words(trace)``), so a
porter sees at once that one side ran TF32 matmuls or a flash attention kernel on a GPU.
"""

from __future__ import annotations

from typing import Any

from ..core.measured import rounding_mode
from ..core.trace import Trace

MATMUL = "float32 matmuls: {state}{precision}"
TF32_ON, TF32_OFF = "TF32 on", "full precision"
PRECISION = " (precision {value!r})"
CONVOLUTIONS = "cuDNN convolutions: {state}"
SDPA = "sdpa: {backends}"
SDPA_NONE = "none enabled"
AUTOCAST = "autocast: {state}"
AUTOCAST_OFF = "off"
DETERMINISTIC = "deterministic algorithms: on"
DEVICES = "device: {names}"
TORCH = "torch {version}"
JAX = "JAX {version} ({backend}), flax {flax}"
JAX_RUN = {False: "eager (values of an uncompiled run)", True: "under jit (compiled)"}
X64 = "x64: {state}"
JAX_MATMUL = "matmul precision: {value}"
ROUNDING = {
    "all": "rounding measured as recorded: every call, and one float64 forward",
    "leaves": "rounding measured as recorded: leaf calls",
}
UNKNOWN = "unknown"


def _autocast(section: Any) -> str:
    if not isinstance(section, dict):
        return UNKNOWN
    on = [f"{device} {state.get('dtype')}" for device, state in section.items()
          if isinstance(state, dict) and state.get("enabled")]
    return ", ".join(on) if on else AUTOCAST_OFF


def numerics_words(trace: Trace) -> list[str]:
    """Short lines on what ``trace``'s run computed with (``trace.numerics``) and its measured rounding;
    ``[]`` for a trace that records neither."""
    numerics = trace.numerics
    lines: list[str] = []
    if numerics.get("framework") == "jax":
        lines.append(JAX.format(version=numerics.get("jax"), backend=numerics.get("backend"),
                                flax=numerics.get("flax")))
        lines.append(JAX_RUN.get(numerics.get("jit"), UNKNOWN))
        lines.append(X64.format(state="on" if numerics.get("x64") else "off"))
        lines.append(JAX_MATMUL.format(value=numerics.get("default_matmul_precision") or "default"))
        devices = numerics.get("devices") or []
        lines.append(DEVICES.format(names=", ".join(devices) if devices else UNKNOWN))
    elif numerics:
        tf32 = numerics.get("matmul_tf32")
        state = UNKNOWN if tf32 is None else TF32_ON if tf32 else TF32_OFF
        value = numerics.get("float32_matmul_precision")
        lines.append(MATMUL.format(state=state, precision=PRECISION.format(value=value) if value else ""))
        devices = numerics.get("devices") or []
        if numerics.get("cudnn_tf32") and any(name != "cpu" for name in devices):
            lines.append(CONVOLUTIONS.format(state=TF32_ON))
        backends = numerics.get("sdpa")
        lines.append(SDPA.format(backends=", ".join(backends) if backends else SDPA_NONE))
        lines.append(AUTOCAST.format(state=_autocast(numerics.get("autocast"))))
        if numerics.get("deterministic"):
            lines.append(DETERMINISTIC)
        lines.append(DEVICES.format(names=", ".join(devices) if devices else UNKNOWN))
        if numerics.get("torch"):
            lines.append(TORCH.format(version=numerics["torch"]))
    mode = rounding_mode(trace)
    if mode in ROUNDING:
        lines.append(ROUNDING[mode])
    return lines
