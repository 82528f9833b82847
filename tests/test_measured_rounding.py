"""trace(measure_rounding=...): the numbers are right, the files stay transformers', the user's objects stay theirs."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

import nbtrace
from nbtrace import TraceFormatError
from nbtrace.core.measured import Measured

SIDECAR = "_debug_tree_NBTRACE.json"


def mlp(dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16)).to(dtype).eval()


def inputs(dtype: torch.dtype = torch.float32, seed: int = 1) -> torch.Tensor:
    return torch.randn(4, 32, generator=torch.Generator().manual_seed(seed)).to(dtype)


def traced(model, x, folder, **options):
    with nbtrace.trace(model, debug_path=folder, **options) as rec:
        model(x)
    return rec


def rms(t: torch.Tensor) -> float:
    return t.double().square().mean().sqrt().item()


def test_the_numbers_are_the_rms_norms_the_interface_names(tmp_path):
    model, x = mlp(torch.bfloat16), inputs(torch.bfloat16)
    t = traced(model, x, tmp_path, measure_rounding=True).trace
    first, relu, last = (t[f"Sequential.{i}"].measured["out"] for i in range(3))
    layer = model[0]
    y = layer(x).double()
    exact = x.double() @ layer.weight.double().T + layer.bias.double()
    assert first.own == pytest.approx(rms(y - exact), rel=1e-6)
    assert first.scale == pytest.approx(rms(exact), rel=1e-6)
    assert first.one == pytest.approx(rms(exact - exact.to(torch.bfloat16).double()), rel=1e-6)
    assert first.acc == first.own  # its inputs are the forward's own: nothing accumulated before it
    assert relu.own == 0.0 and relu.one == 0.0  # a ReLU is exact in any dtype
    assert relu.acc == pytest.approx(rms(torch.relu(y) - torch.relu(exact)), rel=1e-6)  # what the Linear left
    assert t.root.measured["out"].acc == last.acc  # the model's output is its last layer's
    assert t.measured_rounding and all(m.reason is None for n in t.nodes() for m in n.measured.values())


def test_a_bf16_linear_rounds_about_once_far_above_a_float32_one(tmp_path):
    low = traced(mlp(torch.bfloat16), inputs(torch.bfloat16), tmp_path / "bf16", measure_rounding="leaves").trace
    high = traced(mlp(torch.float32), inputs(torch.float32), tmp_path / "fp32", measure_rounding="leaves").trace
    bf16, fp32 = low["Sequential.0"].measured["out"], high["Sequential.0"].measured["out"]
    assert 0.5 * bf16.one <= bf16.own <= 2 * bf16.one  # one rounding of the exact result, give or take
    assert bf16.own > 1000 * fp32.own > 0  # bfloat16 keeps 8 bits, float32 24
    assert bf16.acc is None  # "leaves": own rounding of leaf calls, nothing accumulated
    root = low.root.measured["out"]  # and the root's own, which its float64 twin gives for free
    assert root.own is not None and root.acc is None


def test_off_writes_no_rounding_and_runs_each_module_once(tmp_path):
    calls: list[str] = []

    class Counted(nn.Linear):
        def forward(self, x):
            calls.append("linear")
            return super().forward(x)

    model = nn.Sequential(Counted(32, 8), nn.ReLU())
    rec = traced(model, inputs(), tmp_path / "off", measure_rounding=False)
    assert calls == ["linear"] and rec.rounding is None
    assert "rounding" not in json.loads((tmp_path / "off" / f"Sequential{SIDECAR}").read_text())["sections"]
    assert not rec.trace.measured_rounding and all(n.measured == {} for n in rec.trace.nodes())
    calls.clear()
    traced(model, inputs(), tmp_path / "twin", measure_rounding="twin")
    # recorded, the model's float64 twin, the twin moved by one float64 rounding, the twin rounded to bfloat16 (a
    # float32 model: what judges a bfloat16 port of it)
    assert calls == ["linear"] * 4
    calls.clear()
    traced(model, inputs(), tmp_path / "on", measure_rounding="leaves")
    assert calls == ["linear"] * 5  # recorded, its float64 copy, and the twin's three runs
    calls.clear()
    traced(model, inputs(), tmp_path / "all", measure_rounding=True)
    assert calls == ["linear"] * 5


def _state():
    matmul = torch.backends.cuda.matmul
    return (matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision, torch.get_rng_state(),
            torch.is_autocast_enabled("cpu"))


class RaisesLate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(32, 8)
        self.dropout = nn.Dropout(0.5)  # training mode: the float64 copies draw random numbers too

    def forward(self, x):
        self.dropout(self.first(x))
        raise RuntimeError("boom after two measured calls")


def test_an_exception_in_the_model_leaves_forwards_flags_and_random_state_as_they_were(tmp_path):
    model = RaisesLate().train()
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # as a GPU user sets it
    try:
        before = _state()
        with pytest.raises(RuntimeError, match="boom"):
            traced(model, inputs(), tmp_path, measure_rounding=True)
        after = _state()
    finally:
        torch.backends.cuda.matmul.fp32_precision = "none"
    assert after[:2] == before[:2] and after[3] == before[3]
    assert not torch.equal(after[2], before[2])  # the model's own dropout drew numbers: the measurement did not
    torch.set_rng_state(before[2])
    model.dropout(torch.ones(4, 8))  # the draw the forward made, and nothing else
    assert torch.equal(torch.get_rng_state(), after[2])
    assert [name for name, m in model.named_modules() if "forward" in m.__dict__] == []
    assert model.training and model.first.weight.dtype == torch.float32
    failed = nbtrace.load_trace(tmp_path)
    assert failed.root.error and failed["RaisesLate.first"].measured["out"].own is not None


class Float32Only(nn.Module):
    def forward(self, x):
        if x.dtype == torch.float64:
            raise TypeError("no float64 here")
        return x * 2


def test_a_module_that_cannot_run_in_float64_gets_null_numbers_and_the_reason(tmp_path):
    model = nn.Sequential(nn.Linear(32, 8), Float32Only())
    t = traced(model, inputs(), tmp_path, measure_rounding=True).trace
    odd = t["Sequential.1"].measured["out"]
    assert odd.own is None and odd.acc is None and "no float64 here" in odd.reason
    assert "could not run in float64" in odd.reason and "float64 twin of the whole model failed" in odd.reason
    assert t["Sequential.0"].measured["out"].own is not None  # the rest is measured


def test_a_training_batchnorm_keeps_its_statistics(tmp_path):
    model = nn.Sequential(nn.Linear(32, 8), nn.BatchNorm1d(8)).train()
    plain = nn.Sequential(nn.Linear(32, 8), nn.BatchNorm1d(8)).train()
    plain.load_state_dict(model.state_dict())
    plain(inputs())
    traced(model, inputs(), tmp_path, measure_rounding=True)
    for name, value in plain.state_dict().items():
        assert torch.equal(value, model.state_dict()[name]), name


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.endswith(SIDECAR)}


@pytest.mark.parametrize("use_repr", [True, False])
def test_the_transformers_files_are_the_same_bytes_with_the_option(tmp_path, use_repr):
    from tests.models.generation import build_reference, make_prompt

    llama, prompt = build_reference(layers=3), make_prompt()  # 3 layers: the middle one is pruned
    for name, model, x in (("llama", llama, prompt), ("mlp", mlp(), inputs())):
        written = {}
        for option in (False, "leaves", True):
            folder = tmp_path / f"{name}_{option}"
            with torch.no_grad():
                traced(model, x, folder, use_repr=use_repr, measure_rounding=option)
            written[option] = _files(folder)
        assert written[False] == written["leaves"] == written[True], name
        assert len(written[False]) > 2 or use_repr


def test_a_measured_trace_loads_round_trips_and_rejects_a_bad_section(tmp_path):
    rec = traced(mlp(torch.float16), inputs(torch.float16), tmp_path, measure_rounding=True, use_repr=False)
    loaded = nbtrace.load_trace(tmp_path)
    assert loaded.measured_rounding and loaded.numerics == rec.trace.numerics
    assert [n.measured for n in loaded.nodes()] == [n.measured for n in rec.trace.nodes()]
    section = loaded.sidecar["rounding"]
    assert section["mode"] == "all" and set(section["calls"]["Sequential.0"]["out"]) == {"own", "acc", "scale", "one"}
    numerics = loaded.numerics
    assert numerics["devices"] == ["cpu"] and numerics["torch"] == torch.__version__
    assert {"matmul_tf32", "float32_matmul_precision", "sdpa", "autocast", "deterministic"} <= set(numerics)
    path = tmp_path / f"Sequential{SIDECAR}"
    document = json.loads(path.read_text())
    document["sections"]["rounding"]["calls"]["Sequential.0"]["out"]["own"] = -1
    path.write_text(json.dumps(document))
    with pytest.raises(TraceFormatError, match="rounding.*own must be a finite number") as info:
        nbtrace.load_trace(tmp_path)
    assert path.name in str(info.value)


def test_a_trace_without_the_sections_loads_with_empty_numerics(tmp_path):
    traced(mlp(), inputs(), tmp_path)
    path = tmp_path / f"Sequential{SIDECAR}"
    path.unlink()
    old = nbtrace.load_trace(tmp_path)
    assert old.numerics == {} and not old.measured_rounding and old["Sequential.0"].measured == {}


def test_the_option_is_checked():
    with pytest.raises(ValueError, match="measure_rounding must be one of False, True, 'leaves', 'twin', 'auto', "
                                         "got 'all'"):
        with nbtrace.trace(mlp(), measure_rounding="all"):
            pass


def test_every_forward_of_generate_is_measured_and_the_cache_is_left_alone(tmp_path):
    from tests.models.generation import build_reference, generate, make_prompt, trace_generate

    model, prompt = build_reference(layers=2), make_prompt()
    expected = generate(model, prompt, 3)
    rec = trace_generate(model, prompt, 3, tmp_path, measure_rounding=True)
    assert len(rec) == 3
    again = generate(model, prompt, 3)
    assert torch.equal(again, expected)
    for step in nbtrace.load_traces(tmp_path):  # decode steps too: the attention re-run on a copy of the cache
        attention = step["LlamaForCausalLM.model.layers.1.self_attn"].measured["out.0"]
        assert attention.own is not None and attention.acc is not None and attention.reason is None
        embedding = step["LlamaForCausalLM.model.embed_tokens"].measured["out"]
        assert embedding.own == embedding.acc == 0.0  # a lookup is exact
        assert step.root.measured["out.logits"].acc > 0


def test_pruned_layers_keep_the_numbers_of_the_calls_written(tmp_path):
    from tests.models.generation import build_reference, make_prompt

    model = build_reference(layers=4)
    with torch.no_grad():
        t = traced(model, make_prompt(), tmp_path, measure_rounding="leaves", do_prune_layers=True).trace
    leaves = [n for n in t.nodes() if not n.children and n.output_tensors()]
    assert leaves and all(n.measured for n in leaves)
    assert "LlamaForCausalLM.model.layers.2.mlp.up_proj" not in t.sidecar["rounding"]["calls"]  # pruned
    assert all(isinstance(m, Measured) and not math.isnan(m.own) for n in leaves for m in n.measured.values())


def test_the_numerics_read_in_a_few_words(tmp_path):
    from nbtrace.render.numerics_words import numerics_words

    plain = traced(mlp(), inputs(), tmp_path / "plain").trace
    words = numerics_words(plain)
    assert words[0].startswith("float32 matmuls: full precision") and "device: cpu" in words
    assert any(w.startswith("sdpa: ") for w in words) and "autocast: off" in words
    with torch.autocast("cpu", dtype=torch.bfloat16):
        auto = traced(mlp(), inputs(), tmp_path / "autocast", measure_rounding="leaves").trace
    assert "autocast: cpu bfloat16" in numerics_words(auto)
    assert numerics_words(auto)[-1] == "rounding measured as recorded: leaf calls"
    (tmp_path / "plain" / f"Sequential{SIDECAR}").unlink()
    assert numerics_words(nbtrace.load_trace(tmp_path / "plain")) == []


def test_the_numbers_ride_with_the_forwards_one_transfer(tmp_path, monkeypatch):
    from nbtrace.capture import transfer

    moved = []
    to_host = transfer.to_host
    monkeypatch.setattr(transfer, "to_host", lambda tensor: moved.append(tensor.numel()) or to_host(tensor))
    monkeypatch.setattr(transfer, "host_readable", lambda tensor: False)  # as on a GPU: every read is a transfer
    t = traced(mlp(), inputs(), tmp_path / "off", measure_rounding=False).trace
    assert len(moved) == 1
    moved.clear()
    measured = traced(mlp(), inputs(), tmp_path / "on", measure_rounding=True).trace
    # the forward's numbers (the float64 twin's among them), the top-level inputs a printed trace keeps whole, and
    # whether rounding this float32 model into bfloat16 changes a weight or an input (twin/exact.py: one number)
    assert len(moved) == 3 and sorted(moved)[0] == 1 and measured["Sequential.2"].measured["out"].acc is not None
    assert [n.outputs for n in measured.nodes()] == [n.outputs for n in t.nodes()]
