"""A vision transformer laid out as a vision library lays it out (tests/models/vit.py: a convolutional patch embedding,
a fused qkv, two dozen Identity and Dropout modules that compute nothing in eval mode) against a port laid out as
transformers lays it out (a linear projection of unfolded patches, separate q/k/v, sdpa, one dropout called twice
per layer). In every mode a user takes (default folders, full-tensor folders, the live port replayed, both live),
float32 and bfloat16, two seeds, with a rename map and without: the correct port agrees and each planted bug is
named at its module."""

from __future__ import annotations

import pytest
import torch

import nbtrace
from tests.models import vit as v
from tests.models.folders import without_twin
from tests.models.modes import every_mode, reference_folders, traced
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)

@pytest.fixture(scope="module", params=[(0, "float32"), (1, "bfloat16")], ids=["seed0-fp32", "seed1-bf16"])
def case(request, tmp_path_factory):
    seed, dtype = request.param
    base = tmp_path_factory.mktemp(f"vit{seed}")
    original, x = v.build(seed, getattr(torch, dtype)), v.inputs(seed, dtype=getattr(torch, dtype))
    return original, x, reference_folders(original, (x,), base), base


def _verdicts(case, port, name, rename):
    original, x, references, base = case
    return every_mode(original, port, (x,), references, base / name, v.RENAME if rename else None)


@pytest.mark.parametrize("rename", [True, False], ids=["rename", "by-structure"])
def test_the_correct_port_agrees_in_every_mode(case, rename):
    port = v.ViTPort.from_original(case[0])
    for mode, c in _verdicts(case, port, f"clean-{rename}", rename).items():
        assert c.verdict == "agree", f"{mode}: {c.summary()}"
        assert c.coverage > 0.8, f"{mode}: {c.coverage}"  # the Identity and Dropout calls are not counted


@pytest.mark.parametrize("bug", sorted(v.BUGS))
def test_a_bug_is_named_at_its_module_in_every_mode(case, bug):
    port = v.ViTPort.from_original(case[0], {bug})
    for rename in (True, False):
        for mode, c in _verdicts(case, port, f"{bug}-{rename}", rename).items():
            found = c.first_divergence
            assert found is not None and found.module_path == v.BUGS[bug], f"{mode}, rename={rename}: {c.summary()}"


@pytest.mark.parametrize("bug", [None, *sorted(v.BUGS)])
def test_measured_folders_without_a_twin(tmp_path, bug):
    """Float32 folders that measured their rounding and hold no float64 twin decide from the rounding they measured:
    the correct port agrees, each bug is named at its module (the conv kernel against the linear matrix, a layout,
    is no finding)."""
    original, x = v.build(2), v.inputs(2)
    port = v.ViTPort.from_original(original, {bug} if bug else set())
    measured = {"use_repr": False, "do_prune_layers": False, "measure_rounding": True}
    a = without_twin(traced(original, (x,), tmp_path / "a", **measured))
    c = nbtrace.compare(a, without_twin(traced(port, (x,), tmp_path / "b", **measured)), rename=v.RENAME)
    assert c.decided_by == "measured rounding"
    if bug is None:
        assert c.verdict == "agree", c.summary()
    else:
        assert c.first_divergence is not None and c.first_divergence.module_path == v.BUGS[bug], c.summary()


def test_calls_that_compute_nothing_are_out_of_the_alignment(case):
    """The original's Identity and Dropout calls have no counterpart and are not counted against the alignment; the
    port's one dropout per layer, called twice, pairs with the original's two Dropout modules by ``#k``; the
    convolution's kernel, converted to the linear projection's matrix, is the same values in another shape."""
    original, x = case[0], case[1]
    c = nbtrace.compare(original, v.ViTPort.from_original(original), inputs=x, rename=v.RENAME)
    idle = {n.module_path for n in c.alignment.idle_a}
    root = v.ROOT
    assert {f"{root}.norm_pre", f"{root}.blocks.0.ls1", f"{root}.blocks.2.drop_path2", f"{root}.fc_norm"} <= idle
    assert not idle & {n.module_path for n in c.unmatched_a}
    assert len(c.matches) / (len(c.a.nodes()) - len(idle)) == pytest.approx(c.coverage)
    status = {row["module_path"]: row["status"] for row in c.node_report()}
    assert status[f"{root}.norm_pre"] == "no_data"
    calls = {a.module_path: b.call_index for a, b in c.alignment.pairs if b.module_path.endswith("layer.1.dropout")}
    assert calls == {f"{root}.blocks.1.attn.proj_drop": 0, f"{root}.blocks.1.mlp.drop2": 1}
    [kernel] = [w for w in c.weights if w.module_path.endswith("patch_embed.proj")]
    assert kernel.kind == "layout" and not kernel.serious  # a conv kernel [64, 3, 4, 4] as a matrix [64, 48]


def test_the_patch_embedding_pairs_with_its_counterpart_by_structure(case):
    """Without a rename, the original's patch embedding pairs with the port's patch embeddings, not with the
    embeddings module around it (which adds the class token and the positions)."""
    original, x = case[0], case[1]
    c = nbtrace.compare(original, v.ViTPort.from_original(original), inputs=x)
    paired = {a.module_path: b.module_path for a, b in c.alignment.pairs}
    assert paired[f"{v.ROOT}.patch_embed"] == f"{v.PORT}.vit.embeddings.patch_embeddings"


@pytest.mark.parametrize("seed", [0, 3])
def test_a_bfloat16_port_against_the_float32_original(tmp_path, seed):
    """The port's weights and inputs are the original's rounded into bfloat16: part of its rounding, never a finding.
    The original's twin also ran rounded to bfloat16, so the correct port agrees from folders and replayed, and every
    bug is named at its module, GELU's tanh form (far below bfloat16's rounding) too; the note says how."""
    original, x = v.build(seed), v.inputs(seed)
    reference = traced(original, (x,), tmp_path / "a")
    for bug in [None, "no_scale", "qkv_swap", "patch_order", "gelu_tanh"]:
        port = v.ViTPort.from_original(original, {bug} if bug else set()).to(torch.bfloat16)
        folders = nbtrace.compare(reference, traced(port, (x.bfloat16(),), tmp_path / f"b-{bug}"), rename=v.RENAME)
        replayed = nbtrace.compare(reference, port, rename=v.RENAME)
        for mode, c in (("folders", folders), ("replayed", replayed)):
            assert any("rounded to bfloat16" in note for note in c.notes), c.notes
            if bug is None:
                assert c.verdict == "agree", f"{bug} {mode}: {c.summary()}"
            else:
                assert c.first_divergence.module_path == v.BUGS[bug], f"{bug} {mode}: {c.summary()}"
