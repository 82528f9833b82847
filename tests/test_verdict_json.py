"""The verdict as data (``Comparison.to_dict()``, ``nbtrace diff --json``), checked against its published schema,
and ``nbtrace diff``'s exit status for each outcome."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch

import nbtrace
from nbtrace.cli import main as cli_main
from nbtrace.diff.verdict.as_dict import EXIT_STATUS
from tests.models.port_ci_example import GOLDEN, toy


def _valid(data: dict) -> dict:
    jsonschema.validate(data, nbtrace.verdict_schema())
    json.dumps(data, allow_nan=False)  # plain JSON: no NaN or infinity slips through
    return data


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """The toy original and ports traced with the defaults (the twin) and without anything measured."""
    root = tmp_path_factory.mktemp("verdicts")
    original, x = toy.build_original(), toy.make_inputs()
    runs = {"original": original, "clean": toy.ToyPort.from_original(original),
            "eps": toy.ToyPort.from_original(original, bug="eps")}
    for name, model in runs.items():
        for measure in ("auto", False):
            folder = root / f"{name}-{measure}"
            with torch.no_grad(), nbtrace.trace(model, debug_path=folder, use_repr=False, measure_rounding=measure):
                model(**x) if name == "original" else model(x["input_ids"], x["attention_mask"])
    return root


def test_the_schema_is_a_valid_json_schema():
    jsonschema.Draft202012Validator.check_schema(nbtrace.verdict_schema())


@pytest.mark.parametrize("port, measure, verdict", [("clean", "auto", "agree"), ("eps", "auto", "diverge"),
                                                    ("eps", False, "unresolved")])
def test_to_dict_follows_the_schema_for_each_verdict(folders, port, measure, verdict):
    c = nbtrace.compare(folders / f"original-{measure}", folders / f"{port}-{measure}")
    data = _valid(c.to_dict())
    assert data["verdict"] == c.verdict == verdict and data["schema_version"] == 1 and data["kind"] == "forward"
    assert data["versions"]["torch"] == torch.__version__ and data["versions"]["nbtrace"] == nbtrace.__version__
    assert data["numerics"]["a"] == json.loads(json.dumps(c.numerics[0]))
    if verdict == "diverge":
        first = data["first_divergence"]
        assert first["module"] == toy.PLANTED["eps"] and first["b_module"] == "ToyPort.layers.0.pre_attn"
        assert data["decided_by"] == "float64 twins" and first["evidence"][0]["test"] == "twin"
        assert first["score"] == first["evidence"][0]["score"] > 1
    else:
        assert data["first_divergence"] is None
    if verdict == "unresolved":
        assert data["unresolved"][0]["module"] == "ToyEncoder.blocks.0.norm1" and not data["unresolved"][0]["holds_it"]
        assert {row["module"] for row in data["unresolved"][1:]} >= {"ToyEncoder.blocks.0", "ToyEncoder"}
    else:
        assert data["unresolved"] == []


def test_a_narrowed_divergence_carries_its_operation_and_line():
    original = toy.build_original()
    port = toy.ToyPort.from_original(original, bug="gelu_tanh")
    c = nbtrace.compare(original, port, inputs=toy.make_inputs(), inputs_map=toy.PORT_INPUTS)
    # the port has no MLP module of its own: the layer holding it is run on both sides, operation by operation
    assert nbtrace.narrow(c, reference=original).module_path == "ToyEncoder.blocks.1"
    operation = _valid(c.to_dict())["first_divergence"]["operation"]
    assert operation is not None and operation["kind"] == "math"
    assert operation["port"]["name"] == "gelu" and operation["port"]["file"].endswith("toy_models.py")
    assert "approximate=self.approximate" in operation["port"]["text"] and operation["port"]["line"] > 0


@pytest.mark.parametrize("port, measure, verdict", [("clean", "auto", "agree"), ("eps", "auto", "diverge"),
                                                    ("eps", False, "unresolved")])
def test_nbtrace_diff_json_prints_the_verdict_and_exits_with_its_status(folders, capsys, port, measure, verdict):
    status = cli_main(["diff", str(folders / f"original-{measure}"), str(folders / f"{port}-{measure}"), "--json"])
    data = _valid(json.loads(capsys.readouterr().out))
    assert data["verdict"] == verdict and status == EXIT_STATUS[verdict] == {"agree": 0, "diverge": 1,
                                                                             "unresolved": 3}[verdict]


def test_nbtrace_diff_exits_3_when_unresolved_also_without_json(folders, capsys):
    assert cli_main(["diff", str(folders / "original-False"), str(folders / "eps-False")]) == 3
    assert "unresolved" in capsys.readouterr().out


def test_a_bad_input_exits_2_with_one_line_and_no_json(tmp_path, capsys):
    assert cli_main(["diff", str(tmp_path / "missing"), str(GOLDEN), "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("nbtrace: error: ") and len(err.strip().splitlines()) == 1
