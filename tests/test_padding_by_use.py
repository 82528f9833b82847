"""A run's padding mask is found by what it holds, whatever its argument is called, or declared once; a mask of all
ones is no padding; an integer tensor paired with another by order alone decides nothing.

transformers' Llama (built from a tiny config) is the original, called with ``attention_mask=``; the port is
``tests/models/keyword_port.py``'s, called ``port(tokens=ids, keep=mask)`` with a left-padded row. A correct port
agrees from default folders, from a folder against the live port and with both live, each decided by the float64
twins (which need both runs' padding left out alike); a transposed weight is named at its module.
"""

from __future__ import annotations

import warnings

import pytest
import torch

import nbtrace
from nbtrace.diff.verdict.twin_verdict import usable
from tests.models.keyword_port import KeywordPort, PositionsPort, SegmentPort, padded_inputs
from tests.models.ports import BUGS, build_original

SEEDS = [0, 1]
TWINS = "float64 twins"


def _reference(folder, ids, mask, **extra):
    model = build_original()
    with nbtrace.trace(model, debug_path=folder):  # the defaults: printed values, pruned layers, the twin
        model(input_ids=ids, attention_mask=mask, use_cache=False, **extra)
    return folder


def _port(folder, cls=KeywordPort, bugs=(), padding_mask=None, **call):
    port = cls.from_original(build_original(), set(bugs))
    declared = {} if padding_mask is None else {"padding_mask": padding_mask}
    with nbtrace.trace(port, debug_path=folder, **declared):
        port(**call)
    return folder


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Default folders of the original and of the keyword port (correct, or with a transposed weight), per seed."""
    base = tmp_path_factory.mktemp("padding")
    made: dict = {}

    def get(side: str, seed: int, bug: str | None = None):
        key = (side, seed, bug)
        if key not in made:
            ids, mask = padded_inputs(seed)
            folder = base / f"{side}-{seed}-{bug}"
            made[key] = (_reference(folder, ids, mask) if side == "a" else
                         _port(folder, bugs=[bug] if bug else [], tokens=ids, keep=mask))
        return made[key]

    return get


@pytest.mark.parametrize("seed", SEEDS)
def test_a_mask_under_another_name_is_found_and_the_twins_decide(folders, seed):
    a, b = nbtrace.load_trace(folders("a", seed)), nbtrace.load_trace(folders("b", seed))
    assert a.twin.padded is not None and b.twin.padding == a.twin.padding
    assert (a.twin.padding_from, b.twin.padding_from) == ("kwargs.attention_mask", "kwargs.keep")
    c = nbtrace.compare(a, b)
    assert c.agree is True and c.decided_by == TWINS, c.summary()
    bug = nbtrace.compare(a, folders("b", seed, "transposed_o"))
    assert bug.first_divergence.module_path == BUGS["transposed_o"] and bug.decided_by == TWINS, bug.summary()


@pytest.mark.parametrize(("bug", "seed"), [(None, 0), (None, 1), ("transposed_o", 1)])
def test_a_folder_against_the_live_port_and_both_live(folders, seed, bug):
    ids, mask = padded_inputs(seed)
    port = KeywordPort.from_original(build_original(), {bug} if bug else set())
    live = nbtrace.compare(folders("a", seed), port, inputs_map={"input_ids": "tokens", "attention_mask": "keep"})
    inputs = {"input_ids": ids, "attention_mask": mask, "use_cache": False}
    both = nbtrace.compare(build_original(), port, inputs=inputs, port_inputs={"tokens": ids, "keep": mask})
    for c in (live, both):
        assert c.decided_by == TWINS, c.summary()
        if bug is None:
            assert c.agree is True, c.summary()
        else:
            assert c.first_divergence.module_path == BUGS[bug], c.summary()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_mask_of_all_ones_is_no_padding(tmp_path, seed):
    ids, _ = padded_inputs(seed)
    a = _reference(tmp_path / "a", ids, torch.ones_like(ids))
    b = _port(tmp_path / "b", tokens=ids)  # no mask at all
    assert nbtrace.load_trace(a).twin.padding is None and nbtrace.load_trace(b).twin.padding is None
    c = nbtrace.compare(a, b)
    assert c.agree is True and c.decided_by == TWINS, c.summary()


@pytest.mark.parametrize("seed", SEEDS)
def test_a_mask_against_position_ids_paired_by_order_is_no_difference(tmp_path, seed):
    """Both sides hand on two integer tensors of one shape, in other orders under other names: the mask meets the
    port's positions by order, and their values differing is no difference of the port."""
    ids, mask = padded_inputs(seed)
    positions = torch.arange(ids.shape[1]).expand_as(ids).contiguous()
    a = _reference(tmp_path / "a", ids, mask, position_ids=positions)
    for bug in (None, "transposed_o"):
        b = _port(tmp_path / f"b-{bug}", PositionsPort, [bug] if bug else [], tokens=ids, positions=positions,
                  keep=mask)
        c = nbtrace.compare(a, b)
        assert c.decided_by == TWINS, c.summary()
        if bug is None:
            assert c.agree is True, c.summary()
        else:
            assert c.first_divergence.module_path == BUGS[bug], c.summary()


def test_a_declared_mask_decides_where_values_cannot_and_a_missing_one_is_said(tmp_path):
    """A 0/1 segment argument ahead of the mask is taken for it; the twins then say which side left out what and how
    to declare it, and the declared mask decides."""
    ids, mask = padded_inputs(0)
    segments = torch.ones_like(ids)
    segments[:, :3] = 0  # a first segment of three tokens: 0/1 with a 1 in every row, as a mask would be
    a = _reference(tmp_path / "a", ids, mask)
    found = _port(tmp_path / "found", SegmentPort, tokens=ids, segments=segments, keep=mask)
    refused = nbtrace.compare(a, found)
    why = usable(refused)
    assert why is not None and "padding_mask=" in why and "kwargs.segments" in why and "kwargs.attention_mask" in why
    assert f"not decided by the float64 twins: {why}" in refused.summary()  # said, never silently dropped
    declared = _port(tmp_path / "declared", SegmentPort, padding_mask="keep", tokens=ids, segments=segments, keep=mask)
    c = nbtrace.compare(a, declared)
    assert c.agree is True and c.decided_by == TWINS, c.summary()
    both = nbtrace.compare(build_original(), SegmentPort.from_original(build_original()),
                           inputs={"input_ids": ids, "attention_mask": mask, "use_cache": False},
                           port_inputs={"tokens": ids, "segments": segments, "keep": mask})
    assert both.agree is True and both.decided_by == TWINS, both.summary()  # the reference's mask, declared
    none = _port(tmp_path / "none", padding_mask=False, tokens=ids, keep=mask)
    why = usable(nbtrace.compare(a, none))
    assert "b's run had no padding mask" in why and "trace b again" in why


def test_a_declared_name_that_is_not_an_input_warns_and_the_forward_runs(tmp_path):
    ids, mask = padded_inputs(1)
    with pytest.raises(TypeError, match="padding_mask"):
        with nbtrace.trace(KeywordPort.from_original(build_original()), debug_path=tmp_path, padding_mask=1):
            pass
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        folder = _port(tmp_path / "b", padding_mask="nope", tokens=ids, keep=mask)
    assert any("padding_mask='nope'" in str(w.message) for w in caught)
    assert nbtrace.load_trace(folder).twin.calls and nbtrace.load_trace(folder).twin.padding is None


def test_the_jax_capture_finds_the_mask_by_the_same_rule():
    """nbtrace.jax's top-level inputs are numpy on the host: the same rule, by values, whatever the positions."""
    pytest.importorskip("jax")
    import numpy as np

    from nbtrace.jax.twin import find_valid

    ids, mask = (t.numpy() for t in padded_inputs(1))
    positions = np.broadcast_to(np.arange(ids.shape[1]), ids.shape)
    assert (find_valid((ids, positions, mask), {}) == (mask != 0)).all()  # positions first: not a mask
    assert (find_valid((ids,), {"keep": mask}) == (mask != 0)).all()
    assert find_valid((ids, positions), {}) is None
    assert find_valid((ids,), {"attention_mask": np.ones_like(mask)}).all()  # all ones: leaves nothing out
