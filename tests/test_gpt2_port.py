"""A natural port is not a bug: transformers' GPT-2 against a from-scratch port (tests/models/gpt2_port.py).

The port holds GPT-2's Conv1D weights transposed in nn.Linear, looks position embeddings up from 1-D
position ids (its ``pos`` gives ``[T, D]`` where ``wpe`` gives ``[1, T, D]``), has its own names and
``forward(ids)``. The clean port must agree; each planted bug must be named at its module, replayed or from
folders that measured their rounding; from files where nothing measured it, named there or left unresolved;
no case may name a wrong module.
"""

from __future__ import annotations

import pytest
import torch

import nbtrace
from tests.models.gpt2_port import BUGS, RENAME, build_original, build_port, make_inputs
from tests.models.precision import one_thread  # noqa: F401  (a module fixture: one torch thread)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """``store(dtype, bug, measured)`` -> (reference folder, port folder, live port), each built once; ``measured``:
    both folders traced with ``measure_rounding=True``."""
    built: dict = {}

    def get(dtype: str, bug: str | None, measured: bool = False):
        if (dtype, bug, measured) not in built:
            if (dtype, "ref", measured) not in built:
                original = build_original(DTYPES[dtype])
                folder = tmp_path_factory.mktemp(f"gpt2-{dtype}")
                with torch.no_grad(), nbtrace.trace(original, debug_path=folder, use_repr=False,
                                                    do_prune_layers=False, measure_rounding=measured):
                    original(**make_inputs())
                built[(dtype, "ref", measured)] = (original, folder)
            original, a = built[(dtype, "ref", measured)]
            port = build_port(original, bug)
            b = tmp_path_factory.mktemp(f"port-{dtype}-{bug}")
            with torch.no_grad(), nbtrace.trace(port, debug_path=b, use_repr=False, do_prune_layers=False,
                                                measure_rounding=measured):
                port(make_inputs()["input_ids"])
            built[(dtype, bug, measured)] = (a, b, port)
        return built[(dtype, bug, measured)]

    return get


def _compare(store, dtype, bug, mode, rename):
    """``mode``: "files" (two folders that measured their rounding) or "replay" (the live port)."""
    a, b, port = store(dtype, bug, measured=mode == "files")
    return nbtrace.compare(a, b if mode == "files" else port, rename=RENAME if rename else None)


def _named(comparison) -> str | None:
    """The module the verdict names, or None where it names none (agreement or an unresolved verdict)."""
    if comparison.verdict == "unresolved":
        assert comparison.unresolved is not None and comparison.first_divergence is None
        return None
    first = comparison.first_divergence
    return None if first is None else first.module_path


def _cases(bug: str | None):
    """(dtype, mode) pairs."""
    for dtype in DTYPES:
        for mode in ("files", "replay"):
            yield pytest.param(dtype, mode, id=f"{dtype}-{mode}")


@pytest.mark.parametrize("rename", [True, False], ids=["rename", "plain"])
@pytest.mark.parametrize("dtype, mode", list(_cases(None)))
def test_the_clean_port_agrees(store, dtype, mode, rename):
    comparison = _compare(store, dtype, None, mode, rename)
    assert _named(comparison) is None, str(comparison.first_divergence)
    assert not [w for w in comparison.weights if w.serious], [str(w) for w in comparison.weights]


@pytest.mark.parametrize("rename", [True, False], ids=["rename", "plain"])
@pytest.mark.parametrize("bug, dtype, mode", [pytest.param(bug, *case.values, marks=case.marks, id=f"{bug}-{case.id}")
                                               for bug in BUGS for case in _cases(bug)])
def test_each_bug_is_named_at_its_module(store, bug, dtype, mode, rename):
    comparison = _compare(store, dtype, bug, mode, rename)
    converted = {BUGS[bug]} if bug == "scaled_fc_in" else set()  # the only bug in the weights, not the code
    assert {w.module_path for w in comparison.weights if w.serious} == converted, [str(w) for w in comparison.weights]
    named = _named(comparison)
    assert named == BUGS[bug], str(comparison.first_divergence)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("bug", [None, *BUGS])
def test_unmeasured_files_name_the_module_or_stay_unresolved(store, bug, dtype):
    a, b, _ = store(dtype, bug, measured=False)
    comparison = nbtrace.compare(a, b, rename=RENAME)
    named = _named(comparison)
    assert named == (BUGS[bug] if bug else None) or named is None and comparison.verdict == "unresolved", (
        comparison.verdict, str(comparison.first_divergence))


def test_the_natural_layout_is_no_weight_difference_and_a_scale_reads_as_a_scale(store):
    clean = _compare(store, "fp32", None, "files", True)
    layouts = [w for w in clean.weights if w.kind == "layout"]
    assert layouts and all("up to layout" in w.detail or "same product" in w.detail for w in layouts)
    scaled = [w for w in _compare(store, "fp32", "scaled_fc_in", "files", True).weights if w.serious]
    assert [(w.module_path, w.name, w.kind) for w in scaled] == [(BUGS["scaled_fc_in"], "weight", "scaled")]
    assert "stored transposed" in scaled[0].detail and "scaled by 1.01" in scaled[0].detail


def test_position_embeddings_equal_after_broadcasting(store):
    comparison = _compare(store, "fp32", None, "files", True)
    wpe = next(m for m in comparison.matches if m.a.module_path.endswith(".wpe"))
    assert _output_shapes(wpe) == {((1, 16, 128), (16, 128))}
    assert all(d.ok and d.basis == "tensors" and d.max_abs == 0 for d in wpe.diffs if d.io == "output")


def _output_shapes(match) -> set:
    return {(tuple(d.shape), tuple(d.b_shape)) for d in match.diffs if d.io == "output"}
