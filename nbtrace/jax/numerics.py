"""The sidecar's ``numerics`` section of a JAX trace: the framework, its versions and what the run computed with."""

from __future__ import annotations

from typing import Any


def numerics_section(jit: bool) -> dict[str, Any]:
    """JAX, jaxlib and Flax versions, the backend and its devices, x64, the default matmul precision, and whether
    the recorded values came from a compiled (``jit``) or an eager run (they differ by a few float32 ulps)."""
    import flax
    import jax
    import jaxlib

    devices = []
    for device in jax.devices():
        kind = getattr(device, "device_kind", None) or device.platform
        if kind not in devices:
            devices.append(kind)
    return {
        "framework": "jax",
        "jax": jax.__version__,
        "jaxlib": getattr(jaxlib, "__version__", None),
        "flax": flax.__version__,
        "backend": jax.default_backend(),
        "x64": bool(jax.config.jax_enable_x64),
        "default_matmul_precision": jax.config.jax_default_matmul_precision,
        "jit": jit,
        "devices": devices,
    }
