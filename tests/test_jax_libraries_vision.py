"""Two more published Flax libraries as originals, each against a PyTorch library's port, weights converted in code.

jax-resnet's ResNet-18 (a ``Sequential`` of a stem, blocks in one list, a head; conv+norm+activation ``ConvBlock``
wrappers; channels last) against transformers' ResNet (stages numbered from 0; channels first): the original's
default folder is pruned to its list's first and last block while the live port is traced whole, and the two
houses' stacks are not alike, so the live port is thinned by what the original's twin ran in its gaps; a block
pruning hid is paired with the port's by the calls it holds, so a ReLU dropped from a wrapper is named at that
wrapper. flaim's ViT (compact modules named by class) against timm's VisionTransformer, float32 and a bfloat16
port of the float32 original: a square Flax kernel in float32 against its bfloat16 transposed weight is the other
layout of one product, never a finding where the calls' float64 functions agree.
"""

from __future__ import annotations

import torch

import nbtrace


def _named(c) -> tuple[str, str | None]:
    first = c.first_divergence
    return c.verdict, None if first is None else first.module_path


def test_jax_resnet_against_transformers_resnet_from_folders_and_live(tmp_path):
    import nbtrace.jax as ntj
    from tests.models import jax_resnet_pair as pair

    model, variables = pair.original(1)
    x = pair.inputs(1)
    ntj.trace(model, variables, x, debug_path=tmp_path / "original")
    for bug in [None, "relu_dropped", "kernel_hw_swapped"]:
        port = pair.port(variables, bug)
        with torch.no_grad(), nbtrace.trace(port, debug_path=tmp_path / f"port_{bug}"):
            port(pair.port_inputs(x))
        expected = ("agree", None) if bug is None else ("diverge", pair.BUGS[bug])
        for c in (nbtrace.compare(tmp_path / "original", tmp_path / f"port_{bug}"),
                  nbtrace.compare(tmp_path / "original", port, call=pair.live_call)):
            assert _named(c) == expected, (bug, c.summary())


def test_flaim_vit_against_a_bf16_timm_port_of_its_float32_original(tmp_path):
    import nbtrace.jax as ntj
    from tests.models import flaim_vit as pair

    model, variables = pair.original(0)
    x = pair.inputs(0)
    ntj.trace(model, variables, x, debug_path=tmp_path / "original")
    for bug in [None, "gelu_tanh", "proj_transposed", "head_norm_eps"]:
        port = pair.port(variables, bug).to(torch.bfloat16)
        with torch.no_grad(), nbtrace.trace(port, debug_path=tmp_path / f"port_{bug}"):
            port(pair.port_inputs(x, torch.bfloat16))
        expected = ("agree", None) if bug is None else ("diverge", pair.BUGS[bug])
        c = nbtrace.compare(tmp_path / "original", tmp_path / f"port_{bug}")
        assert _named(c) == expected, (bug, c.summary())
        if bug is None:  # the square projections in float32 against bfloat16, transposed: not a difference
            assert not [w for w in c.weights if w.serious], c.summary()
    live = nbtrace.compare(tmp_path / "original", port, call=pair.live_call)
    assert _named(live) == ("diverge", pair.BUGS["head_norm_eps"]), live.summary()
