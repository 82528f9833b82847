"""torchvision's models as the originals of ports into other houses, weights converted in code
(``tests/models/torchvision_vit.py``, ``tests/models/torchvision_efficientnet.py``).

- torchvision's ViT against transformers' ViT: its attention is one ``nn.MultiheadAttention`` call (no module calls
  inside: the fused ``in_proj_weight`` and the out projection are run as functions) where the port calls four
  projections inside its attention; its blocks are named ``encoder_layer_0…`` (pruning never thins them) where the
  port's are a numbered list (pruning does). The attention pairs with the port's attention (``align/fused_calls.py``),
  the port's pruned block sets aside the original's named one (``align/unnumbered.py``), and a bug in that block's
  attention is named at it from the twins (``verdict/hidden_pairs.py``).
- torchvision's Swin against transformers' Swin: torchvision holds the map as ``(B, H, W, C)``, transformers as
  ``(B, H·W, C)``; torchvision's ``features`` list (patch embedding, stages, mergings) is pruned where transformers'
  two stages are not, and the leaves the files lack are found from the twins by their element counts.
- torchvision's MobileNetV3-Small against timm's: hard activations, a head one side runs as a linear map and the
  other as a 1x1 convolution.
- torchvision's EfficientNet-B0 against timm's: ``features.0…8`` is the stem, seven stages and the head, timm's
  ``blocks.0…6`` the stages, so the default folders are pruned by other numbers (the stem and head against the first
  and last stage: ``align/twin_leaves.py``); timm fuses each norm with its activation in one call, and a bug in the
  norm is named at torchvision's norm, followed back through its own twin (``verdict/twin_chain.py``).
"""

from __future__ import annotations

import pytest
import torch

import nbtrace
from tests.models import torchvision_efficientnet as e
from tests.models import torchvision_mobilenet as m
from tests.models import torchvision_swin as s
from tests.models import torchvision_vit as v
from tests.models.modes import every_mode, reference_folders, traced
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    base = tmp_path_factory.mktemp("tv-vit")
    original, x = v.original(0), v.inputs(0)
    return original, x, reference_folders(original, (x,), base), base


def test_the_correct_vit_port_agrees_in_every_mode(vit):
    """MultiheadAttention (a leaf) pairs with the port's attention (a container), so nothing of the clean port is
    blamed on the call after it (before: 'diverge' at the first block's MLP on every path)."""
    original, x, references, base = vit
    for mode, c in every_mode(original, v.port(original), (x,), references, base / "clean", None).items():
        assert c.verdict == "agree", f"{mode}: {c.summary()}"
        assert not [w for w in c.weights if w.serious], f"{mode}: {c.weights}"
    paired = {a.module_path: b.module_path for a, b in c.alignment.pairs}
    assert paired[f"{v.ROOT}.encoder.layers.encoder_layer_1.self_attention"] == f"{v.PORT}.vit.layers.1.attention"


@pytest.mark.parametrize("bug", sorted(v.BUGS))
def test_a_vit_bug_is_named_at_its_module(vit, bug):
    """From default folders: the port's files hold blocks 0 and 2, torchvision's all three; a bug in block 1 (the
    attention's scale, a norm's eps) is named at its module there, the value projection scaled at the attention
    that holds the fused projection."""
    original, x, (default, _), base = vit
    c = nbtrace.compare(default, traced(v.port(original, bug), (x,), base / bug))
    found = c.first_divergence
    assert c.verdict == "diverge" and found is not None and found.module_path == v.BUGS[bug], c.summary()


def test_the_vit_bf16_port_of_the_fp32_original_agrees(vit, tmp_path):
    original, x, (default, _), _ = vit
    port = v.port(original).to(torch.bfloat16)
    c = nbtrace.compare(default, traced(port, (x.to(torch.bfloat16),), tmp_path / "b"))
    assert c.verdict == "agree", c.summary()


@pytest.fixture(scope="module")
def efficientnet(tmp_path_factory):
    base = tmp_path_factory.mktemp("tv-efficientnet")
    original, x = e.original(0), e.inputs(0)
    return original, x, traced(original, (x,), base / "original"), base


@pytest.mark.parametrize("bug", [None, "bn_eps", "act_dropped"])
def test_efficientnet_from_default_folders_pruned_by_other_numbers(efficientnet, bug):
    """torchvision's files keep the stem and the head, timm's the first and last stage: the correct port agrees
    (before: 'diverge' at the stem, its norm paired with timm's first block), a depthwise convolution's norm eps is
    named at that norm (timm's norm and activation are one call), and the activation dropped after an expansion's
    norm at the ``Conv2dNormActivation`` holding the norm and the activation (the port fuses the two)."""
    original, x, reference, base = efficientnet
    c = nbtrace.compare(reference, traced(e.port(original, bug), (x,), base / str(bug)))
    found = c.first_divergence
    assert (found.module_path if found else None) == e.BUGS.get(bug), c.summary()
    assert c.verdict == ("agree" if bug is None else "diverge"), c.summary()


@pytest.mark.parametrize("bug", [None, "norm_eps", "merge_eps"])
def test_swin_from_default_folders_pruned_on_one_side(tmp_path, bug):
    """torchvision's files hold the patch embedding and the last stage only: the correct port agrees (before: its
    norm after the patch embedding paired with a norm of the port's first stage, 'diverge'), and a norm's eps in a
    stage or a merging the files pruned is named at that norm from the twins."""
    original, x = s.original(0), s.inputs(0)
    reference = traced(original, (x,), tmp_path / "a")
    c = nbtrace.compare(reference, traced(s.port(original, bug), (x,), tmp_path / "b"))
    found = c.first_divergence
    assert (found.module_path if found else None) == s.BUGS.get(bug), c.summary()


@pytest.mark.parametrize("bug", [None, "act_relu", "head_scaled"])
def test_mobilenet_port_with_its_head_as_a_convolution(tmp_path, bug):
    """Unpruned folders: the correct port agrees; a hard-swish planted as a ReLU is named at the activation, the
    head's weight scaled (a 1x1 convolution in the port, a linear map in the original) at the linear map."""
    original, x = m.original(0), m.inputs(0)
    options = {"use_repr": False, "do_prune_layers": False}
    c = nbtrace.compare(traced(original, (x,), tmp_path / "a", **options),
                        traced(m.port(original, bug), (x,), tmp_path / "b", **options))
    found = c.first_divergence
    assert (found.module_path if found else None) == m.BUGS.get(bug), c.summary()
