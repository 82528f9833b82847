"""nbtrace in a port's own test suite (nbtrace.testing): the docs' example suite run by pytest, the assertion's
failures and keywords, and the checked-in golden folder that keeps loading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest

import pytest
import torch

import nbtrace
from nbtrace.core.sidecar import SIDECAR_VERSION
from nbtrace.testing import PortDiverges, PortLosesPrecision, PortUnresolved, assert_port_matches
from tests.models import invariant_ports as ip
from tests.models.port_ci_example import EXAMPLE, GOLDEN, toy


def _run_example(bug: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ, TOY_PORT_BUG=bug or "")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE)],
                          cwd=EXAMPLE, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("bug", [None, "no_scale", "eps"])  # docs/ci.md runs it with gelu_tanh
def test_the_docs_example_suite_passes_on_the_port_and_fails_naming_a_planted_bug(bug):
    done = _run_example(bug)
    if bug is None:
        assert done.returncode == 0, done.stdout + done.stderr
        assert "2 passed" in done.stdout
        return
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 failed" in done.stdout  # against the live original and against the golden folder
    failures = [line for line in done.stdout.splitlines() if line.startswith("E ")]
    assert "nbtrace: the port computes another function than the reference" in failures[0]
    named = {line.split("first divergence: ")[1].split(" ")[0] for line in failures if "first divergence: " in line}
    assert named == {toy.PLANTED[bug]}, failures


def test_the_docs_show_the_example_suite_as_it_is():
    from tests.docs_harness.pages import parse_page

    page = parse_page(EXAMPLE.parents[1] / "ci.md")
    shown = next(step for step in page.steps if step.kind == "file" and step.path == "port_ci/test_port.py")
    assert shown.code == (EXAMPLE / "test_port.py").read_text()


@pytest.fixture(scope="module")
def original():
    return toy.build_original()


def test_a_divergence_fails_with_module_operation_line_numbers_and_rule(original):
    port = toy.ToyPort.from_original(original, bug="eps")
    with pytest.raises(AssertionError) as failed:
        assert_port_matches(original, port, toy.make_inputs(), inputs_map=toy.PORT_INPUTS)
    error = failed.value
    assert isinstance(error, PortDiverges) and error.comparison.verdict == "diverge"
    lines = str(error).splitlines()
    message = " ".join(str(error).split())  # as one line: the message is wrapped at 100 columns
    assert lines[0] == "nbtrace: the port computes another function than the reference"
    assert lines[1] == "first divergence: ToyEncoder.blocks.0.norm1 (b: ToyPort.layers.0.pre_attn)"
    # the operation and the source line inside the module (nn.LayerNorm's own forward), then the numbers and rule
    assert "layer_norm at normalization.py:" in message and "F.layer_norm(" in message
    assert "the two float64 twins differ by" in message and "decided by: float64 twins" in message
    assert len(lines) <= 16 and max(map(len, lines)) <= 100  # short enough for a CI log


def test_the_clean_port_passes_and_returns_the_comparison(original):
    port = toy.ToyPort.from_original(original)
    comparison = assert_port_matches(original, port, toy.make_inputs(), inputs_map=toy.PORT_INPUTS)
    assert comparison.verdict == "agree" and comparison.decided_by == "float64 twins"


def test_an_unresolved_verdict_fails_unless_told_not_to(original, tmp_path):
    """Two folders without the twin, a planted bug: nothing measured proves it, the verdict is unresolved."""
    x = toy.make_inputs()
    port = toy.ToyPort.from_original(original, bug="no_scale")
    with torch.no_grad():
        with nbtrace.trace(original, debug_path=tmp_path / "a", use_repr=False, measure_rounding=False):
            original(**x)
        with nbtrace.trace(port, debug_path=tmp_path / "b", use_repr=False, measure_rounding=False):
            port(x["input_ids"], x["attention_mask"])
    with pytest.raises(PortUnresolved) as failed:
        assert_port_matches(tmp_path / "a", tmp_path / "b")
    assert str(failed.value).startswith("nbtrace: the comparison is unresolved")
    assert "ToyEncoder.blocks.0.attn" in str(failed.value)
    assert not isinstance(failed.value, PortDiverges)
    assert assert_port_matches(tmp_path / "a", tmp_path / "b", unresolved_fails=False).verdict == "unresolved"


def test_a_precision_finding_fails_only_when_asked(tmp_path):
    """An RMSNorm without its float32 upcast overflows in float16 where the reference does not: the same function,
    so it passes by default and fails with precision_fails=True."""
    reference = ip.build(128, torch.float16, 0, layers=2)
    with torch.no_grad():
        reference.model.embed_tokens.weight.mul_(30000.0)
    x = ip.inputs(0, length=24)
    port = ip.port(reference, "sdpa")
    port.model.layers[0].input_layernorm = ip.UnsafeRMSNorm(port.model.layers[0].input_layernorm)
    with torch.no_grad():
        assert assert_port_matches(reference, port, x).precision
        with pytest.raises(PortLosesPrecision) as failed:
            assert_port_matches(reference, port, x, precision_fails=True)
    assert str(failed.value).startswith("nbtrace: the port computes the same function but loses precision")
    assert f"{ip.P}.layers.0.input_layernorm" in str(failed.value)


def test_unittest_counts_it_as_a_failure_not_an_error(original):
    port = toy.ToyPort.from_original(original, bug="gelu_tanh")

    class PortTest(unittest.TestCase):
        def test_port(self):
            assert_port_matches(original, port, toy.make_inputs(), inputs_map=toy.PORT_INPUTS)

    result = unittest.TestResult()
    unittest.defaultTestLoader.loadTestsFromTestCase(PortTest).run(result)
    assert len(result.failures) == 1 and not result.errors
    assert "first divergence: ToyEncoder.blocks.1.mlp" in result.failures[0][1]


def test_bad_arguments_name_what_is_wrong(original):
    port = toy.ToyPort.from_original(original)
    with pytest.raises(TypeError, match="needs inputs="):
        assert_port_matches(original, port)
    with pytest.raises(TypeError, match="inputs= is for a live reference"):
        assert_port_matches(GOLDEN, port, toy.make_inputs())
    with pytest.raises(TypeError, match="reference must be a module or a trace folder"):
        assert_port_matches(42, port)


# -- the golden folder ------------------------------------------------------------------------------------------
def test_the_checked_in_golden_folder_loads_and_decides(original):
    """Written once by an earlier version (docs/examples/port_ci/record_golden.py) and checked in: it keeps loading,
    and a port compared against it is judged as against the live original."""
    trace = nbtrace.load_trace(GOLDEN)
    assert _sidecar(GOLDEN)["version"] == 1 and trace.twin is not None and trace.twin.calls
    with torch.no_grad():
        assert assert_port_matches(GOLDEN, toy.ToyPort.from_original(original),
                                   inputs_map=toy.PORT_INPUTS).verdict == "agree"
        c = nbtrace.compare(GOLDEN, toy.ToyPort.from_original(original, bug="eps"), inputs_map=toy.PORT_INPUTS)
    assert c.first_divergence.module_path == toy.PLANTED["eps"]


def test_this_version_writes_the_golden_folders_format(tmp_path):
    """Recording the golden folder again gives the same files and the same sidecar version. When this fails the
    format changed: keep reading version 1 (the checked-in folder stays, as is) and check in a new golden beside it."""
    record = toy_record()
    record.record(tmp_path / "golden")
    assert sorted(p.name for p in (tmp_path / "golden").iterdir()) == sorted(p.name for p in GOLDEN.iterdir())
    now, checked_in = _sidecar(tmp_path / "golden"), _sidecar(GOLDEN)
    assert now["version"] == checked_in["version"] == SIDECAR_VERSION
    assert {name: section.get("version") for name, section in now["sections"].items()} == \
        {name: section.get("version") for name, section in checked_in["sections"].items()}


def _sidecar(folder):
    (path,) = folder.glob("*_debug_tree_NBTRACE.json")
    return json.loads(path.read_text())


def toy_record():
    import importlib.util

    spec = importlib.util.spec_from_file_location("record_golden", EXAMPLE / "record_golden.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("toy_models", toy)  # record_golden imports the toy models by their file's name
    spec.loader.exec_module(module)
    return module
