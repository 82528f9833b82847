"""Two real trace folders, both written with ``measure_rounding=True``, compared from their files alone.

transformers' Llama (small config, eager attention, bf16) is the reference; the port is the same model with
sdpa attention (a correct kernel: must agree) or with one bug planted (must be named at its module). Nothing is
measured in-process here: the verdict reads the ``rounding`` section capture wrote into each folder's sidecar.
Each folder's float64 twin is taken out (as where the model's float64 copy did not fit in memory and the twin was
skipped), so that the measured rounding decides; with the twin in place, the twins decide and agree.
"""

from __future__ import annotations

import json

import torch

import nbtrace
from nbtrace.core.measured import ROUNDING_SECTION
from nbtrace.core.sidecar import sidecar_path
from tests.models import invariant_ports as ip
from tests.models.folders import without_twin
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)


def _folder(model, x, folder):
    with torch.no_grad(), nbtrace.trace(model, debug_path=folder, use_repr=False, do_prune_layers=False,
                                        measure_rounding=True):
        model(**x)
    return without_twin(folder)


def _compare(tmp_path, bug):
    reference = ip.build(256, torch.bfloat16, seed=0, layers=2)
    x = ip.inputs(seed=0, length=40)
    a = _folder(reference, x, tmp_path / "a")
    b = _folder(ip.port(reference, "sdpa", bug), x, tmp_path / "b")
    return a, nbtrace.compare(a, b)  # paths: everything the verdict knows comes from the files


def test_the_folders_hold_their_measured_rounding(tmp_path):
    folder, _ = _compare(tmp_path, None)
    [path] = list(folder.glob("*_SUMMARY.json"))
    section = json.loads(sidecar_path(path).read_text())["sections"][ROUNDING_SECTION]
    assert section["mode"] == "all" and section["calls"]
    trace = nbtrace.load_trace(folder)
    assert trace.measured_rounding
    measured = [m for node in trace.nodes() for m in (node.measured or {}).values()]
    assert measured and all(m.acc is not None for m in measured if m.reason is None)
    assert any(m.acc > 0 for m in measured if m.acc is not None)  # bf16 rounds (an embedding lookup is exact)


def test_an_sdpa_port_agrees_from_measured_files(tmp_path):
    _, c = _compare(tmp_path, None)
    assert c.decided_by == "measured rounding", c.summary()
    assert c.verdict == "agree" and c.first_divergence is None, c.summary()


def test_a_bug_is_named_at_its_module_from_measured_files(tmp_path):
    """A wrong RMSNorm eps: no weight differs, so only the measured rounding can prove the difference."""
    _, c = _compare(tmp_path, "wrong_eps")
    assert c.decided_by == "measured rounding", c.summary()
    assert c.verdict == "diverge" and c.first_divergence is not None, c.summary()
    assert c.first_divergence.module_path == ip.BUGS["wrong_eps"][1], c.summary()
    top = c.first_divergence.evidence[0]
    assert top.test == "proven" and top.score >= 1 and "k = 2 allows" in top.sentence


def test_a_bug_in_pruned_layers_is_named_between_the_kept_blocks_from_measured_files(tmp_path):
    """Pruning keys the sidecar by the calls written: a bug in a pruned block is born between the kept ones, and
    the same pruned sdpa port without the bug agrees."""
    from tests.models.precision import BUGS, DTYPES, P, build_reference, make_inputs, sdpa_port

    def traced(model, folder):
        with torch.no_grad(), nbtrace.trace(model, debug_path=folder, use_repr=False, do_prune_layers=True,
                                            measure_rounding=True):
            model(**inputs, use_cache=False)
        return without_twin(folder)

    reference, inputs = build_reference(DTYPES["fp16"]), make_inputs()
    a = traced(reference, tmp_path / "a")
    clean = nbtrace.compare(a, traced(sdpa_port(reference), tmp_path / "clean"))
    assert (clean.verdict, clean.decided_by) == ("agree", "measured rounding"), clean.summary()
    port = sdpa_port(reference)
    BUGS["down_scale"].inject(port)  # layer 2 of 0..3: pruned
    c = nbtrace.compare(a, traced(port, tmp_path / "b"))
    first = c.first_divergence
    assert c.decided_by == "measured rounding" and first is not None, c.summary()
    assert first.module_path == P and first.pruned == (f"{P}.layers.1", f"{P}.layers.2"), c.summary()
