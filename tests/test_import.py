"""`import nbtrace` and a repr-mode trace need torch alone: the notebook extras load lazily."""

from __future__ import annotations

import subprocess
import sys
import textwrap

OPTIONAL = ["pandas", "matplotlib", "ipywidgets", "anywidget", "IPython", "transformers", "safetensors", "numpy"]


def test_import_and_trace_with_torch_alone(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys
        for name in {OPTIONAL!r}:
            sys.modules[name] = None  # any import of these now fails
        import torch, nbtrace
        from nbtrace.demo import build_demo
        model, inputs = build_demo(num_layers=2)
        with nbtrace.trace(model, debug_path={str(tmp_path)!r}) as rec:
            model(**inputs)
        loaded = nbtrace.load_trace({str(tmp_path)!r})
        assert loaded == rec.trace
        print(len(loaded), sorted(m for m in {OPTIONAL!r} if sys.modules.get(m) is not None))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0].isdigit() and result.stdout.strip().endswith("[]")
