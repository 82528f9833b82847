"""The docs' port-CI example (docs/examples/port_ci), loaded for the tests: its toy models and golden folder."""

from __future__ import annotations

import importlib.util
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "port_ci"
GOLDEN = EXAMPLE / "golden"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"port_ci_{name}", EXAMPLE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


toy = _load("toy_models")
