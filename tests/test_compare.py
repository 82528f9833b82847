"""compare: metrics and tolerances, alignment, the Comparison interface (the widget's contract)."""

from __future__ import annotations

import math

import pytest
import torch

import nbtrace
from nbtrace.diff.comparison import Comparison
from nbtrace.diff.verdict.divergence import FirstDivergence
from nbtrace.demo import build_demo
from nbtrace.diff.measure.metrics import TOLERANCE, default_tolerance, diff_tensors, printed_numbers
from nbtrace.core.tensor import TensorValue

STATUSES = {"match", "diverged", "first", "only_a", "no_data"}


# -- metrics ----------------------------------------------------------------------------
def _tv(mean, std, low, high, dtype="torch.float32", lines=None, shape=(4, 8)):
    stats = {name: f"tensor({value:.4e})" for name, value in zip(("mean", "std", "min", "max"), (mean, std, low, high))}
    return TensorValue(shape, dtype, lines, stats)


def test_printed_numbers_skip_ellipsis_and_the_dtype_tail():
    tv = TensorValue((2, 3), "torch.float16", ["tensor([[ 1.0000e+00, -2.5000e-01,  ...,  nan],",
                                               "        [-inf,  3.1250e+02,  ...,  0.0000e+00]], dtype=torch.float16)"])
    values = printed_numbers(tv)
    assert [v for v, _ in values][:2] == [1.0, -0.25]
    assert math.isnan(values[2][0]) and values[3][0] == -math.inf
    assert values[1][1] == pytest.approx(1e-5)  # one unit of the last printed digit of 2.5000e-01
    assert len(values) == 6
    ints = printed_numbers(TensorValue((3,), "torch.int64", ["tensor([ 67, -14,   0])"]), exact=True)
    assert ints == [(67.0, 0.0), (-14.0, 0.0), (0.0, 0.0)]
    bools = printed_numbers(TensorValue((2,), "torch.bool", ["tensor([ True, False])"]), exact=True)
    assert [v for v, _ in bools] == [1.0, 0.0]


def test_stats_one_unit_of_rounding_is_not_a_difference_two_are():
    a = _tv(1.2345e-2, 1.0, -3.0, 3.0)
    one_ulp = TensorValue((4, 8), "torch.float32", None,
                          {"mean": "tensor(1.2346e-02)", "std": "tensor(1.0000e+00)", "min": "tensor(-3.0000e+00)",
                           "max": "tensor(3.0000e+00)"})
    assert diff_tensors("output", "out", "out", a, one_ulp, None, None).ok is True
    # the mean's last digit is 1e-6 here: 2e-5 of the tensor's scale is far beyond rounding and float32 noise
    off = TensorValue((4, 8), "torch.float32", None,
                      {"mean": "tensor(1.2405e-02)", "std": "tensor(1.0000e+00)", "min": "tensor(-3.0000e+00)",
                       "max": "tensor(3.0000e+00)"})
    diff = diff_tensors("output", "out", "out", a, off, None, None)
    assert diff.ok is False and diff.basis == "stats"
    assert diff.stat_diffs["mean"] == pytest.approx(6e-5 / 3.0)


def test_full_tensors(tmp_path):
    from safetensors.torch import save_file

    x = torch.randn(64, 32)
    for name, tensor in {"a": x, "same": x.clone(), "noise": x * (1 + 1e-7), "off": x + 1e-3 * x.abs().max()}.items():
        save_file({"data": tensor}, tmp_path / f"{name}.safetensors")

    def tv(name):
        return TensorValue((64, 32), "torch.float32", f"./{name}.safetensors", {}, tmp_path)

    same = diff_tensors("output", "out", "out", tv("a"), tv("same"), None, None)
    assert same.ok and same.max_abs == 0 and same.cosine == pytest.approx(1.0) and same.basis == "tensors"
    assert diff_tensors("output", "out", "out", tv("a"), tv("noise"), None, None).ok
    off = diff_tensors("output", "out", "out", tv("a"), tv("off"), None, None)
    assert not off.ok
    assert off.max_rel == pytest.approx(1e-3, rel=1e-3)
    assert off.max_abs == pytest.approx(1e-3 * x.abs().max().item(), rel=1e-3)
    assert diff_tensors("output", "out", "out", tv("a"), tv("off"), 1e-2, None).ok  # a looser rtol


def test_nan_must_sit_at_the_same_places():
    nan_a = TensorValue((3,), "torch.float32", ["tensor([1.0000e+00, nan, 2.0000e+00])"])
    nan_b = TensorValue((3,), "torch.float32", ["tensor([1.0000e+00, nan, 2.0000e+00])"])
    moved = TensorValue((3,), "torch.float32", ["tensor([nan, 1.0000e+00, 2.0000e+00])"])
    assert diff_tensors("output", "out", "out", nan_a, nan_b, None, None).ok
    bad = diff_tensors("output", "out", "out", nan_a, moved, None, None)
    assert bad.ok is False and bad.score == math.inf


def test_shape_mismatch_and_no_data():
    a = _tv(0.0, 1.0, -1.0, 1.0, shape=(2, 3))
    b = _tv(0.0, 1.0, -1.0, 1.0, shape=(3, 2))
    diff = diff_tensors("output", "out", "out", a, b, None, None)
    assert diff.ok is False and diff.basis == "shape"
    ids = TensorValue((2, 3), "torch.int64", None)
    assert diff_tensors("input", "args.0", "args.0", ids, ids, None, None).ok is None


def test_tolerances_default_by_dtype():
    assert default_tolerance("torch.float32", "torch.float32") == TOLERANCE["float32"]
    assert default_tolerance("torch.float32", "torch.bfloat16") == TOLERANCE["bfloat16"]
    assert default_tolerance("torch.float16", "torch.float64") == TOLERANCE["float16"]
    assert default_tolerance("torch.int64", "torch.int64") == (0.0, 0.0)
    assert TOLERANCE["float64"][0] < TOLERANCE["float32"][0] < TOLERANCE["float16"][0] < TOLERANCE["bfloat16"][0]


# -- whole traces ------------------------------------------------------------------------
def _demo(folder, *, seed=0, edit=None, use_repr=True, prune=True, layers=4):
    model, inputs = build_demo(num_layers=layers, seed=seed)
    if edit is not None:
        edit(model)
    with nbtrace.trace(model, debug_path=folder, do_prune_layers=prune, use_repr=use_repr) as rec:
        model(**inputs)
    return rec.trace


@pytest.fixture(scope="module")
def demo_pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("cmp")
    a = _demo(base / "a")
    b = _demo(base / "b")

    def scale(model):
        with torch.no_grad():
            model.layers[3].mlp.up_proj.weight.mul_(1.01)

    c = _demo(base / "c", edit=scale)
    return a, b, c


def test_the_same_model_twice_agrees(demo_pair):
    a, b, _ = demo_pair
    c = nbtrace.compare(a, b)
    assert isinstance(c, Comparison)
    assert c.agree is True and c.first_divergence is None
    assert not c.unmatched_a and not c.unmatched_b
    assert len(c.matches) == len(a.nodes())
    assert c.compared > 50


def test_a_scaled_weight_is_found(demo_pair):
    a, _, c = demo_pair
    result = nbtrace.compare(a, c)
    first = result.first_divergence
    assert isinstance(first, FirstDivergence)
    assert first.module_path == "DemoLM.layers.3.mlp.up_proj" and first.b_path == first.module_path
    assert first.io == "output" and first.arg == "out" and first.exact
    assert first.max_rel == pytest.approx(0.01, rel=0.05)  # printed values: the weight is 1% larger
    assert first.basis == "printed" and first.cosine == pytest.approx(1.0, abs=1e-6)
    assert result.agree is False
    assert "up_proj" in str(first)


def test_paths_and_folders_are_accepted(demo_pair):
    a, _, c = demo_pair
    result = nbtrace.compare(str(a.source), c.source.parent)
    assert result.first_divergence.module_path == "DemoLM.layers.3.mlp.up_proj"
    with pytest.raises(nbtrace.TraceFormatError):
        nbtrace.compare(a, a.source.parent / "missing.json")


def test_node_report_is_aligned_with_a_nodes(demo_pair):
    a, _, c = demo_pair
    result = nbtrace.compare(a, c)
    report = result.node_report()
    assert len(report) == len(result.a.nodes())
    for row in report:
        assert {"status", "b_path", "score"} <= set(row)
        assert row["status"] in STATUSES
        assert row["score"] is None or isinstance(row["score"], float)
    by_path = {node.module_path: row for node, row in zip(result.a.nodes(), report)}
    assert by_path["DemoLM.layers.3.mlp.up_proj"]["status"] == "first"
    assert by_path["DemoLM.layers.3.mlp.up_proj"]["score"] == pytest.approx(0.01, rel=0.05)
    assert by_path["DemoLM.layers.3.mlp.gate_proj"]["status"] == "match"
    assert by_path["DemoLM.layers.3.mlp.down_proj"]["status"] == "diverged"
    assert by_path["DemoLM.layers.3"]["status"] == "diverged"  # holds a diverged call
    assert by_path["DemoLM.layers.0.mlp.up_proj"]["status"] == "match"
    assert by_path["DemoLM.embed_tokens"]["b_path"] == "DemoLM.embed_tokens"


def test_comparison_table_and_html(demo_pair):
    a, _, c = demo_pair
    result = nbtrace.compare(a, c)
    df = result.to_dataframe()
    for column in ("module_path", "b_path", "status", "io", "arg", "b_arg", "basis", "max_abs", "max_rel",
                   "cosine", "mean_diff", "std_diff", "min_diff", "max_diff", "score", "ok"):
        assert column in df.columns
    assert df["max_rel"].dtype == "float64" and str(df["ok"].dtype) == "boolean"
    first = df[df.status == "first"]
    assert set(first.module_path) == {"DemoLM.layers.3.mlp.up_proj"}
    assert (first[first.io == "output"]["ok"] == False).all()  # noqa: E712
    html = result._repr_html_()
    assert "DemoLM.layers.3.mlp.up_proj" in html and "first divergence" in html
    assert "<script" not in html.lower()
    agree = nbtrace.compare(a, a)._repr_html_()
    assert "agree" in agree


def test_rename_pairs_by_path_and_bad_regex_is_named(demo_pair):
    a, _, c = demo_pair
    result = nbtrace.compare(a, c, rename={r"^DemoLM": "DemoLM"})
    assert result.alignment.method == "rename"
    assert result.first_divergence.module_path == "DemoLM.layers.3.mlp.up_proj"
    with pytest.raises(ValueError, match=r"\(unclosed"):
        nbtrace.compare(a, c, rename={"(unclosed": "x"})
    nothing = nbtrace.compare(a, c, rename={r"^DemoLM": "Other"})
    assert nothing.agree is False and nothing.first_divergence is None and nothing.compared == 0
    assert len(nothing.unmatched_a) == len(a.nodes())


def test_float_dtypes_compare_with_the_looser_tolerance(tmp_path):
    from tests.models.ports import trace_original

    a = trace_original(tmp_path / "f32", use_repr=False, prune=True)
    b = trace_original(tmp_path / "bf16", use_repr=False, prune=True, dtype=torch.bfloat16)
    result = nbtrace.compare(a, b)
    assert len(result.matches) == len(a.nodes())
    diffs = [d for m in result.matches for d in m.diffs
             if d.dtype == "float32" and d.b_dtype == "bfloat16" and d.basis != "mask"]
    assert diffs and all(d.rtol == TOLERANCE["bfloat16"][0] for d in diffs)
    embed = result.match_of(a["LlamaForCausalLM.model.embed_tokens"])
    assert embed.verdict("output") is True  # bf16 rounding of the same embedding is within bf16 tolerance
    # the same model with its weights rounded to bfloat16 computes the same function, rounded: the twins agree
    assert result.verdict == "agree" and result.decided_by == "float64 twins", result.summary()
    strict = nbtrace.compare(a, b, rtol=1e-5)
    assert strict.first_divergence.module_path == "LlamaForCausalLM.model.embed_tokens"


def test_compare_stays_a_function_after_importing_its_module():
    import importlib

    importlib.import_module("nbtrace.diff.comparison")
    assert callable(nbtrace.compare) and nbtrace.compare.__name__ == "compare"
    assert nbtrace.Comparison is Comparison


def _leaf_tree(root: str, mask_min: str) -> dict:
    def rec(value: str, shape=(2, 4)):
        return {"shape": f"torch.Size({list(shape)})", "dtype": "torch.float32",
                "value": [f"tensor([[{value}]])"], "mean": f"tensor({value})", "std": "tensor(0.0000e+00)",
                "min": f"tensor({value})", "max": f"tensor({value})"}

    x, out = rec("1.0000e+00", (2, 3)), rec("2.0000e+00", (2, 3))
    return {"module_path": root, "inputs": {"args": [x]}, "children": [
        {"module_path": f"{root}.attn", "inputs": {"args": [x], "kwargs": {"attention_mask": rec(mask_min)}},
         "outputs": out},
    ]}


def test_ignore_skips_representation_differences():
    a = nbtrace.Trace.from_tree(_leaf_tree("Orig", "-3.4028e+38"))
    b = nbtrace.Trace.from_tree(_leaf_tree("Port", "-inf"))
    strict = nbtrace.compare(a, b)
    assert strict.first_divergence.module_path == "Orig"  # its own code built a different mask
    assert strict.first_divergence.arg == "kwargs.attention_mask"
    relaxed = nbtrace.compare(a, b, ignore=r"mask")
    assert relaxed.agree and relaxed.first_divergence is None
    with pytest.raises(ValueError, match="ignore"):
        nbtrace.compare(a, b, ignore="(")


def test_leaf_whose_inputs_cannot_be_compared(tmp_path):
    """SUMMARY files carry no stats for integer ids: the embedding's inputs are unchecked, it is still named."""

    def scale(model):
        with torch.no_grad():
            model.embed_tokens.weight.mul_(1.5)

    a = _demo(tmp_path / "a")
    b = _demo(tmp_path / "b", edit=scale)
    summary = "DemoLM_debug_tree_SUMMARY.json"
    first = nbtrace.compare(a.source.parent / summary, b.source.parent / summary).first_divergence
    assert first.module_path == "DemoLM.embed_tokens" and first.basis == "stats"
    assert "could not be compared" in first.reason
    printed = nbtrace.compare(a, b).first_divergence  # printed ids are compared: the inputs agree
    assert printed.module_path == "DemoLM.embed_tokens" and "inputs agree" in printed.reason
