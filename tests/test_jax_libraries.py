"""A published Flax library as the original: gemma's own modules (PyPI ``gemma``), transformers' Gemma as the port.

gemma's ``FeedForward`` builds its ``gating_einsum`` and ``linear`` projections with ``nn.share_scope``, and its
blocks take ``(x, segment_pos, cache, attn_mask)`` positionally: the capture must name those projections as calls of
their own and the arguments by name, or a correct port is blamed at the first MLP and every later bug with it. Both
folders are the defaults (``nbtrace.jax.trace``, ``nbtrace.trace``), float32, two seeds and both of gemma's attention
layouts (``q_einsum`` + ``kv_einsum`` with grouped heads, one ``qkv_einsum`` without).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import nbtrace
from tests.models import gemma_library

CASES = [(1, gemma_library.GemmaSize(kv_heads=2)), (2, gemma_library.GemmaSize(kv_heads=4))]


def _named(comparison) -> str | None:
    first = comparison.first_divergence
    return None if first is None else first.module_path.split(".", 1)[1]


@pytest.mark.parametrize(("seed", "size"), CASES, ids=["grouped", "qkv"])
def test_a_port_of_gemma_agrees_and_each_bug_is_named_at_its_module(tmp_path, seed, size):
    import nbtrace.jax as ntj

    model, variables, ids = gemma_library.make_original(size, seed)
    recorded = ntj.trace(model, variables, ids, debug_path=tmp_path / "original")
    trace, parameters = recorded.trace, recorded.trace.sidecar["parameters"]
    for block in ("layer.0", "layer.1"):  # the share_scope projections: calls of their own, owning their kernels
        mlp = trace[f"GemmaDecoder.{block}.mlp"]
        assert [child.module_path for child in mlp.children] == [f"GemmaDecoder.{block}.mlp.gating_einsum",
                                                                  f"GemmaDecoder.{block}.mlp.linear"]
        assert list(parameters[f"GemmaDecoder.{block}.mlp.linear"]) == ["linear"]
        assert f"GemmaDecoder.{block}.mlp" not in parameters
    assert list(trace["GemmaDecoder.layer.0"].inputs["kwargs"]) == ["x", "segment_pos", "cache", "attn_mask"]
    tokens = torch.from_numpy(ids.astype(np.int64))
    for bug in [None, *gemma_library.BUG_MODULES]:
        port = gemma_library.make_port(variables, size, bug)
        with nbtrace.trace(port, debug_path=tmp_path / f"port_{bug}"):
            port(tokens)
        expected = gemma_library.BUG_MODULES.get(bug)
        from_folders = nbtrace.compare(tmp_path / "original", tmp_path / f"port_{bug}")
        assert (from_folders.verdict, _named(from_folders)) == ("agree" if bug is None else "diverge", expected), (
            bug, str(from_folders))
        live = nbtrace.compare(tmp_path / "original", port)
        assert (live.verdict, _named(live)) == ("agree" if bug is None else "diverge", expected), (bug, str(live))


def test_a_bf16_port_of_gemma_sees_through_its_rounded_constants(tmp_path):
    """docs/jax.md's bfloat16 recipe (the variables cast to bfloat16, the port ``.to(torch.bfloat16)``): the port holds
    its embedding scale and rotary frequencies rounded to bfloat16, constants its float64 twin sees through (the
    scale kept as a Python number beside its buffer, the frequencies computed again from the config), so they need
    no allowance, and differences of function far below bfloat16's rounding are named."""
    import jax
    import jax.numpy as jnp

    import nbtrace.jax as ntj

    size = gemma_library.GemmaSize(kv_heads=2)
    model, variables, ids = gemma_library.make_original(size, 5)
    ntj.trace(model, jax.tree_util.tree_map(lambda a: a.astype(jnp.bfloat16), variables), ids,
              debug_path=tmp_path / "original")
    tokens = torch.from_numpy(ids.astype(np.int64))
    for bug in [None, "gelu_exact", "attn_scale", "final_norm_eps"]:
        port = gemma_library.make_port(variables, size, bug).to(torch.bfloat16)
        with nbtrace.trace(port, debug_path=tmp_path / f"port_{bug}"):
            port(tokens)
        c = nbtrace.compare(tmp_path / "original", tmp_path / f"port_{bug}")
        assert (c.verdict, _named(c)) == ("agree" if bug is None else "diverge", gemma_library.BUG_MODULES.get(bug)), (
            bug, str(c))


def test_a_bf16_port_of_a_float32_flax_original(tmp_path):
    """The Flax original traced in float32 as it is, the port ``.to(torch.bfloat16)``: the original's float64 twin
    runs once more with its variables rounded to bfloat16 (``p_bf16``), and the port's twin is compared with that
    run, float64 against float64, with no allowance for the weights' rounding: the clean port agrees, and a GELU's
    exact form and an attention scale 2% off (each far below bfloat16's rounding of a weight) are named."""
    import nbtrace.jax as ntj

    size = gemma_library.GemmaSize(kv_heads=2)
    model, variables, ids = gemma_library.make_original(size, 6)
    ntj.trace(model, variables, ids, debug_path=tmp_path / "original")
    twin = nbtrace.load_trace(tmp_path / "original").twin
    assert twin is not None and all(p.bf16 is not None for p in twin.of(nbtrace.load_trace(
        tmp_path / "original").root).values())
    tokens = torch.from_numpy(ids.astype(np.int64))
    for bug in [None, "gelu_exact", "attn_scale"]:
        port = gemma_library.make_port(variables, size, bug).to(torch.bfloat16)
        with nbtrace.trace(port, debug_path=tmp_path / f"port_{bug}"):
            port(tokens)
        for c in (nbtrace.compare(tmp_path / "original", tmp_path / f"port_{bug}"),
                  nbtrace.compare(tmp_path / "original", port)):
            assert (c.verdict, _named(c)) == ("agree" if bug is None else "diverge",
                                              gemma_library.BUG_MODULES.get(bug)), (bug, str(c))
            assert bug is None or "rounded to bfloat16" in c.summary(), c.summary()


@pytest.mark.parametrize("seed", [0])
def test_the_pytorch_griffin_of_recurrentgemma_against_its_flax_griffin(tmp_path, seed):
    """A second published Flax library: recurrentgemma's Flax Griffin (an RG-LRU recurrent block, a local attention
    block) as the original, the library's own PyTorch Griffin as the port, converted by the library: the clean port
    agrees and each planted bug is named at its module, from two default folders and against the live port."""
    import nbtrace.jax as ntj
    from tests.models import griffin_library

    model, variables, tokens, positions = griffin_library.make_original(seed)
    ntj.trace(model, variables, tokens, segment_pos=positions, debug_path=tmp_path / "original")
    for bug in [None, *griffin_library.BUG_MODULES]:
        port = griffin_library.make_port(variables, bug)
        with torch.no_grad(), nbtrace.trace(port, debug_path=tmp_path / f"port_{bug}"):
            port(*griffin_library.port_inputs(tokens, positions))
        expected = ("agree", None) if bug is None else ("diverge", griffin_library.BUG_MODULES[bug])
        for c in (nbtrace.compare(tmp_path / "original", tmp_path / f"port_{bug}"),
                  nbtrace.compare(tmp_path / "original", port)):
            assert (c.verdict, _named(c)) == expected, (bug, str(c))


def test_a_channels_last_flax_cnn_against_its_channels_first_pytorch_port(tmp_path):
    """flaxmodels' ResNet-18 (every activation ``[N, H, W, C]``) against timm's ResNet-18 (``[N, C, H, W]``), weights
    converted in code: no tensor of the two houses shares a layout past the input, and the twins compare them
    through their layout sums. The clean port agrees; a norm's eps, a kernel scaled by 1.05 in conversion and a
    shortcut norm's eps in a block pruning keeps out of both folders are named at their modules (before the layout
    sums: every case "unresolved" or the root)."""
    import nbtrace.jax as ntj
    from tests.models import flax_resnet

    model, variables = flax_resnet.original(0)
    x = flax_resnet.inputs(0)
    ntj.trace(model, variables, x, train=False, debug_path=tmp_path / "original")
    pixels = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
    for bug in [None, "bn_eps", "conv_scaled", "shortcut_eps"]:
        port = flax_resnet.port(variables, bug)
        with torch.no_grad(), nbtrace.trace(port, debug_path=tmp_path / f"port_{bug}"):
            port(pixels)
        c = nbtrace.compare(tmp_path / "original", tmp_path / f"port_{bug}")
        found = c.first_divergence
        assert (c.verdict, found.module_path if found else None) == (
            ("agree", None) if bug is None else ("diverge", flax_resnet.BUGS[bug])), (bug, c.summary())
        assert not c.precision, c.summary()  # the port's run measured as it returned its blocks (in place)
