"""A CLIP-style dual encoder (tests/models/dual_encoder.py: a text tower and a vision tower, a projection matrix held
as a parameter, the temperature exponentiated in the root's code) against a port laid out as transformers lays out
CLIP, which runs its towers in the other order. In every mode (default folders, full-tensor folders, the live port
replayed, both live), float32 and bfloat16, with a rename map and without: the correct port agrees and each
planted bug is named at its module."""

from __future__ import annotations

import pytest
import torch

import nbtrace
from nbtrace.diff.align import align as alignment
from tests.models import dual_encoder as de
from tests.models.modes import every_mode, reference_folders
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


@pytest.fixture(scope="module", params=[(0, "float32"), (1, "bfloat16")], ids=["seed0-fp32", "seed1-bf16"])
def case(request, tmp_path_factory):
    seed, dtype = request.param
    base = tmp_path_factory.mktemp(f"clip{seed}")
    original = de.build(seed, getattr(torch, dtype))
    x = de.inputs(seed, getattr(torch, dtype))
    return original, x, reference_folders(original, x, base), base


@pytest.mark.parametrize("bug", [None, *sorted(de.BUGS)])
@pytest.mark.parametrize("rename", [True, False], ids=["rename", "by-structure"])
def test_every_mode_names_the_bug_or_agrees(case, bug, rename):
    port = de.CLIPPort.from_original(case[0], {bug} if bug else set())
    original, x, references, base = case
    for mode, c in every_mode(original, port, x, references, base / f"{bug}-{rename}",
                              de.RENAME if rename else None).items():
        if bug is None:
            assert c.verdict == "agree", f"{mode}: {c.summary()}"
        else:
            found = c.first_divergence
            assert found is not None and found.module_path == de.BUGS[bug], f"{mode}: {c.summary()}"
        assert c.coverage > 0.75, f"{mode}: {c.coverage}"  # both towers aligned, whatever order they run in


def test_towers_in_another_order_pair_by_part(case):
    """The port runs its text tower first, the original its vision tower: without a rename each tower still pairs
    with its counterpart, and each projection with its own."""
    original, x = case[0], case[1]
    c = nbtrace.compare(original, de.CLIPPort.from_original(original), inputs=x)
    paired = {a.module_path: b.module_path for a, b in c.alignment.pairs}
    assert paired[f"{de.ROOT}.transformer.blocks.1.mlp.fc2"] == f"{de.PORT}.text_model.layers.1.output"
    assert paired[f"{de.ROOT}.visual.blocks.2.attn"] == f"{de.PORT}.vision_model.vit.layer.2.attention"
    assert paired[f"{de.ROOT}.visual.head"] == f"{de.PORT}.visual_projection"


def test_a_poor_alignment_whose_outputs_agree_names_nothing(case, monkeypatch):
    """Aligned in call order only (the towers' parts never matched across the order), little of a pairs: the two
    models' float64 outputs agree, so no call inside is named and the correct port agrees, however little aligned
    (issue 35); a note says how little aligned and to pass rename=."""
    monkeypatch.setattr(alignment, "_REORDERED", 0.0)
    original, x = case[0], case[1]
    c = nbtrace.compare(original, de.CLIPPort.from_original(original), inputs=x)
    assert c.coverage < 0.5 and c.first_divergence is None and c.verdict == "agree", c.summary()
    assert any("could be aligned" in note and "rename=" in note for note in c.notes), c.notes
