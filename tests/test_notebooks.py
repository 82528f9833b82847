"""The notebooks in notebooks/: stored without outputs, and they run top to bottom in a real kernel."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
NAMES = ["quickstart.ipynb", "compare_implementations.ipynb", "nan_hunt.ipynb", "debug_generation.ipynb"]
WIDGET = "application/vnd.jupyter.widget-view+json"


def outputs_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def execute(name: str, tmp_path: Path):
    """Run a copy of the notebook in ``tmp_path`` (its files land there) and return it with outputs."""
    shutil.copy(NOTEBOOKS / name, tmp_path / name)
    nb = nbformat.read(tmp_path / name, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


@pytest.mark.parametrize("name", NAMES)
def test_stored_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.outputs == [] and c.execution_count is None for c in code)
    assert "widgets" not in nb.metadata


def test_quickstart(tmp_path):
    nb = execute("quickstart.ipynb", tmp_path)
    text = "\n".join(outputs_text(c) for c in nb.cells)
    assert "Trace of DemoLM" in "\n".join(o.get("data", {}).get("text/html", "") for c in nb.cells for o in c.get("outputs", []))
    assert sum(WIDGET in o.get("data", {}) for c in nb.cells for o in c.get("outputs", [])) == 2  # view + magic
    assert "(True, 31, 'DemoLM')" in text  # %%modeltrace's _trace equals the traced one
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))
    assert (tmp_path / "quickstart_trace" / "DemoLM_debug_tree_FULL_TENSORS.json").is_file()
    assert (tmp_path / "nbtrace_traces" / "DemoLM" / "DemoLM_debug_tree_SUMMARY.json").is_file()


def test_compare_implementations_finds_the_bug(tmp_path):
    nb = execute("compare_implementations.ipynb", tmp_path)
    text = "\n".join(outputs_text(c) for c in nb.cells)
    assert "('Reference.layers.0.attn', 'Port.blocks.0.attention')" in text
    assert "agree" in outputs_text(nb.cells[-1])


def test_nan_hunt_names_the_first_nan(tmp_path):
    nb = execute("nan_hunt.ipynb", tmp_path)
    text = "\n".join(outputs_text(c) for c in nb.cells)
    assert "NaN in the logits: True" in text
    assert "Net.blocks.0.norm\ninputs finite:  True\noutputs finite: False" in text
    assert "no NaN anywhere: True" in text


def test_debug_generation_names_the_step_and_the_module(tmp_path):
    nb = execute("debug_generation.ipynb", tmp_path)
    text = "\n".join(outputs_text(c) for c in nb.cells)
    assert "original: [168, 254, 19," in text and "port:     [168, 254, 111," in text  # two tokens in
    assert "tokens: first differ at step 2" in text
    assert "first diverging step: 1 (1 position fed, 8 in the KV cache)" in text
    assert "layer 1's KV cache was not updated in b" in text
    assert "(1, 'LlamaForCausalLM.model.layers.1.self_attn')" in text  # first divergence, then the view's selection
    assert text.count("(1, 'LlamaForCausalLM.model.layers.1.self_attn')") == 2
    assert "agree: every step's tensors are within tolerance" in text
    assert sum(WIDGET in o.get("data", {}) for c in nb.cells for o in c.get("outputs", [])) == 2  # view + magic
    assert "(4, True)" in text
