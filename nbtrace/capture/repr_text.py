"""The ``repr()`` of a value the format stores as text, with memory addresses masked so two runs print alike.
Torch-free: the JAX capture (``nbtrace/jax/``) uses it too."""

from __future__ import annotations

import re

_ADDRESS = re.compile(r"object at 0x[0-9A-Fa-f]+")


def sanitize(text: str) -> str:
    """Replace memory addresses so two runs print the same text."""
    return _ADDRESS.sub("object at 0xXXXXXXXX", text)
