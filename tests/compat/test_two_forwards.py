"""Several top-level forwards in one block: debug_path holds the last one, byte for byte as transformers
writes it, and nbtrace keeps the earlier ones in forward_<i>/ instead of overwriting them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, torch
    from nbtrace.demo import build_demo
    if sys.argv[1] == "transformers":
        from transformers.model_debugging_utils import model_addition_debugger_context as context
    else:
        from nbtrace import model_addition_debugger_context as context
    model, inputs = build_demo(num_layers=4)
    second = {"input_ids": inputs["input_ids"].flip(-1), "attention_mask": inputs["attention_mask"]}
    with context(model, debug_path=sys.argv[2], do_prune_layers=True, use_repr=sys.argv[3] == "repr"):
        model(**inputs)
        model(**second)
    """
)


@pytest.mark.parametrize("mode", ["repr", "safetensors"])
def test_the_last_forward_is_what_transformers_writes(tmp_path, mode):
    for impl in ("transformers", "nbtrace"):
        run = subprocess.run([sys.executable, "-c", SCRIPT, impl, str(tmp_path / impl), mode],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr
    for name in ("DemoLM_debug_tree_FULL_TENSORS.json", "DemoLM_debug_tree_SUMMARY.json"):
        assert (tmp_path / "nbtrace" / name).read_bytes() == (tmp_path / "transformers" / name).read_bytes()
    earlier = tmp_path / "nbtrace" / "forward_0"
    assert (earlier / "DemoLM_debug_tree_FULL_TENSORS.json").is_file()
    assert (earlier / "DemoLM_debug_tree_FULL_TENSORS.json").read_bytes() != (
        tmp_path / "nbtrace" / "DemoLM_debug_tree_FULL_TENSORS.json"
    ).read_bytes()
    if mode == "safetensors":
        import nbtrace

        first = nbtrace.load_trace(earlier)
        assert first["DemoLM.lm_head"].outputs.load().shape == (1, 16, 256)
