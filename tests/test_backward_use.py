"""Where a backward trace is used: nbtrace show/diff, the JSON verdict, assert_port_matches(backward=True), the
gradient table and plot, and %%modeltrace --backward (issue 38)."""

from __future__ import annotations

import json
import re

import jsonschema
import matplotlib
import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import nbtrace
from nbtrace.cli import main as cli_main
from nbtrace.testing import PortBackwardDiverges, assert_port_matches
from tests.models import backward_models as bm

matplotlib.use("Agg")


def _record(folder, bug=None, **switches):
    model = bm.build(0, bug=bug, **switches).train()
    with nbtrace.trace(model, folder, backward=True, measure_rounding="twin"):
        bm.train_step(model, bug=bug)
    return str(folder)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("backward_use")
    return {"a": _record(root / "a"), "sdpa": _record(root / "sdpa", sdpa=True),
            "bug": _record(root / "bug", bug="wrong_backward")}


def test_nbtrace_diff_names_the_backward_and_exits_1(folders, capsys):
    assert cli_main(["diff", folders["a"], folders["bug"]]) == 1
    out = capsys.readouterr().out
    assert "BACKWARD DIVERGES" in out and bm.BUGS["wrong_backward"] in out
    assert cli_main(["diff", folders["a"], folders["sdpa"]]) == 0
    assert "backward agrees" in capsys.readouterr().out


def test_the_json_verdict_carries_the_backward(folders, capsys):
    assert cli_main(["diff", folders["a"], folders["bug"], "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    jsonschema.validate(data, nbtrace.verdict_schema())
    assert data["schema_minor"] >= 2 and data["verdict"] == "agree"  # the forward agrees
    assert data["backward"]["state"] == "diverge"
    assert data["backward"]["first_divergence"]["module_path"] == bm.BUGS["wrong_backward"]
    plain = nbtrace.compare(folders["a"], folders["sdpa"]).to_dict()
    jsonschema.validate(plain, nbtrace.verdict_schema())
    assert plain["backward"]["state"] == "agree"


def test_nbtrace_show_tells_the_backward(folders, capsys):
    assert cli_main(["show", folders["a"]]) == 0
    out = capsys.readouterr().out
    assert "backward: 1 pass(es) recorded (float64 twin's backward: recorded)" in out
    assert re.search(r"gradient norm at each layer's outputs: 0: \S+, 1: \S+, 2: \S+", out)  # pruned layer 1 too


def test_nbtrace_show_tells_the_backward_of_each_forward(tmp_path, capsys):
    model = bm.build(0).train()
    with nbtrace.trace(model, tmp_path, backward=True, measure_rounding=False):
        bm.train_step(model)
        bm.train_step(model, seed=1)
    assert cli_main(["show", str(tmp_path), "--step", "0"]) == 0
    assert "backward: 1 pass(es) recorded" in capsys.readouterr().out


def test_assert_port_matches_backward(folders):
    assert_port_matches(folders["a"], folders["sdpa"], backward=True)
    assert_port_matches(folders["a"], folders["bug"])  # the forward alone agrees
    with pytest.raises(PortBackwardDiverges) as failed:
        assert_port_matches(folders["a"], folders["bug"], backward=True)
    assert bm.BUGS["wrong_backward"] in str(failed.value)
    with pytest.raises(TypeError, match="backward=True"):
        assert_port_matches(folders["a"], bm.build(0), backward=True)


def test_gradient_table_and_plot(folders):
    backward = nbtrace.load_trace(folders["a"]).backward
    frame = backward.to_dataframe()
    assert set(frame["io"]) == {"grad_output", "grad_input", "parameter"}
    norm = frame[(frame.module_path == "TinyTrainLM.layers.0") & (frame.io == "grad_output")]["norm"].iloc[0]
    tensor = nbtrace.load_trace(folders["a"]).backward.trace["TinyTrainLM.layers.0"].outputs
    assert norm == pytest.approx((tensor.mean ** 2 + tensor.std ** 2) ** 0.5 * tensor.numel ** 0.5)
    assert "Backward of TinyTrainLM" in backward._repr_html_() and "TinyTrainLM.layers.0" in backward._repr_html_()
    ax = nbtrace.plot_gradient_norms(folders["a"], compare=folders["bug"])
    assert len(ax.get_lines()) == 2 and ax.get_yscale() == "log"
    xs = list(ax.get_lines()[0].get_xdata())
    assert xs == [0, 1, 2]  # layer 1 of 3, pruned from the files, from the norms its backward file keeps


def test_forward_and_backward_side_by_side(folders):
    from nbtrace.render.backward_frame import side_by_side

    trace = nbtrace.load_trace(folders["a"])
    table = side_by_side(trace).set_index("module_path")
    row = table.loc["TinyTrainLM.layers.0.mlp.down_proj"]
    grads = trace.backward.last
    weight = grads.module_parameters("TinyTrainLM.layers.0.mlp.down_proj")["weight"]
    assert row["parameters"] == 1
    assert row["parameter_grad_norm"] == pytest.approx((weight.mean ** 2 + weight.std ** 2) ** 0.5 * weight.numel ** 0.5)
    assert row["grad_output_rms"] > 0 and row["output_rms"] > 0


def test_the_view_shows_a_call_s_gradients(folders):
    trace = nbtrace.load_trace(folders["a"])
    view = nbtrace.TraceView(trace)
    detail = view.detail(view._shown.row_of(trace["TinyTrainLM.layers.0.mlp.down_proj"]))
    shown = {(x["io"], x["arg"]): x for x in detail["tensors"]}
    assert {("output", "grad out"), ("input", "grad args.0"), ("output", "grad weight")} <= set(shown)
    grads = trace.backward.trace["TinyTrainLM.layers.0.mlp.down_proj"]
    assert shown[("output", "grad out")]["shape"] == list(grads.outputs.shape)


def test_modeltrace_backward(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext nbtrace", store_history=False)
    ip.user_ns.update(bm=bm, model=bm.build(0))
    with capture_output():
        result = ip.run_cell("%%modeltrace model --backward -o run\nbm.train_step(model)")
    assert result.success
    backward = ip.user_ns["_trace"].backward
    assert backward is not None and backward.trace.root.outputs is not None
    for name in ("_trace", "bm", "model"):
        ip.user_ns.pop(name, None)
