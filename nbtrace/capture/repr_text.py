"""The ``repr()`` of a value the format stores as text, with memory addresses masked so two runs print alike, and
the ``error`` field of a call that raised. Torch-free: the JAX capture (``nbtrace/jax/``) uses it too."""

from __future__ import annotations

import re

_ADDRESS = re.compile(r"object at 0x[0-9A-Fa-f]+")


def sanitize(text: str) -> str:
    """Replace memory addresses so two runs print the same text."""
    return _ADDRESS.sub("object at 0xXXXXXXXX", text)


_MAX_ERROR_MESSAGE = 2000


def error_record(exc: BaseException) -> dict[str, str]:
    """The ``error`` field of a call that raised: exception type and message."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    message = sanitize(str(exc))
    if len(message) > _MAX_ERROR_MESSAGE:
        message = message[:_MAX_ERROR_MESSAGE] + "…"
    return {"type": name, "message": message}
