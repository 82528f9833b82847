"""The host's available memory, torch-free: what a float64 twin on the CPU may take (``budget.py``; the JAX
capture's ``nbtrace/jax/twin.py``)."""

from __future__ import annotations

SHARE = 0.5  # of the free memory a float64 copy of the model may take


def available_host_memory() -> int | None:
    """Bytes the host can still give (``MemAvailable``); None when it cannot be told."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
