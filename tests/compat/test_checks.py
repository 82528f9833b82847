"""Self-tests of the compatibility checker (tests/compat/compat_checks.py): it must accept output that follows
nbtrace's documented behaviour and reject each kind of deviation.

transformers traces three zoo models in a subprocess (never in this process: it changes torch's print
options for good); from its folders we build a "reference nbtrace" output by hand (pruned-block files
dropped, 2nd+ calls' files renamed and holding their own call's data, SUMMARY keeping non-tensor "value"
keys), check that the checker accepts it, then break it in one way at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
REPO = os.path.dirname(TESTS)
from tests.compat import compat_checks as checks  # noqa: E402

torch = pytest.importorskip("torch")
pytest.importorskip("transformers.model_debugging_utils")
from safetensors.torch import save_file  # noqa: E402

MODELS = {"called_twice": "CalledTwiceNet", "value_kwarg": "ValueKwargNet", "nested_lists": "NestedListsNet",
          "shared_layer_loop": "SharedLayerLoopNet"}


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("checks"))
    env = dict(os.environ, OMP_NUM_THREADS="1", TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore")

    def run(model):
        out = os.path.join(root, model)
        r = subprocess.run(
            [sys.executable, os.path.join(HERE, "run_impl.py"), "--impl", "transformers", "--model", model,
             "--out", out, "--all-combos", "--capture", os.path.join(out, "capture.pt")],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
        )
        assert os.path.exists(os.path.join(out, "meta.json")), r.stdout + r.stderr
        return model, out

    with ThreadPoolExecutor(2) as pool:
        dirs = dict(pool.map(run, MODELS))
    return {m: (d, torch.load(os.path.join(d, "capture.pt"), weights_only=True)) for m, d in dirs.items()}


def make_reference(a_dir: str, capture: dict, cls: str, use_repr: bool, out: str, prune: bool) -> None:
    """What nbtrace promises to write, built from transformers' folder and the capture."""
    os.makedirs(out)
    full = json.loads(checks.read_bytes(os.path.join(a_dir, f"{cls}_debug_tree_FULL_TENSORS.json")))
    if not use_repr:
        calls = checks.align(full, capture["root"], prune)
        for node in checks.iter_nodes(full):
            cn = calls[id(node)]
            for io in ("inputs", "outputs"):
                for kp, rec in checks.iter_tensor_records(node.get(io)):
                    name = rec["value"][2:]
                    if cn["idx"] >= 1:
                        name = name.replace(cn["path"], f"{cn['path']}#{cn['idx'] + 1}", 1)
                        rec["value"] = "./" + name
                    data = checks.lookup(cn[io], kp).contiguous()
                    save_file({"data": data}, os.path.join(out, name))
        for f in os.listdir(a_dir):  # the model's own outputs file: unreferenced, kept
            if f.startswith(f"{cls}_outputs"):
                shutil.copy(os.path.join(a_dir, f), out)
    with open(os.path.join(out, f"{cls}_debug_tree_FULL_TENSORS.json"), "wb") as f:
        f.write(checks.dump(full))
    with open(os.path.join(out, f"{cls}_debug_tree_SUMMARY.json"), "wb") as f:
        f.write(checks.dump(checks.strip_tensor_values(full)))


def _setup(oracle, tmp_path, model, combo):
    d, cap = oracle[model]
    a = os.path.join(d, combo)
    b = str(tmp_path / "b")
    make_reference(a, cap, MODELS[model], combo.endswith("repr"), b, combo.startswith("prune"))
    return a, b, cap, MODELS[model]


def _cmp(a, b, cls, combo, cap):
    return checks.compare_run(a, b, cls, combo.endswith("repr"), cap, "nbtrace", combo.startswith("prune"))


def _all(res):
    return "\n".join(res.harness + res.failures)


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("combo", ["prune-repr", "noprune-repr", "prune-st", "noprune-st"])
def test_reference_output_is_accepted(oracle, tmp_path, model, combo):
    a, b, cap, cls = _setup(oracle, tmp_path, model, combo)
    res = _cmp(a, b, cls, combo, cap)
    assert not res.harness and not res.failures, _all(res)
    if model == "called_twice" and combo == "noprune-st":
        assert res.new_refs
    if model == "nested_lists" and combo == "prune-st":
        assert res.pruned_files and all(".blocks.1" in f or ".blocks.2" in f or ".layers.1" in f
                                        or ".layers.2" in f for f in res.pruned_files)
    if model == "value_kwarg":
        assert res.summary_kept_value_keys


def _edit_json(path, fn):
    obj = json.loads(checks.read_bytes(path))
    fn(obj)
    with open(path, "wb") as f:
        f.write(checks.dump(obj))


def _first_tensor_record(tree, io="outputs", pred=lambda n: True):
    for node in checks.iter_nodes(tree):
        if pred(node):
            for kp, rec in checks.iter_tensor_records(node.get(io)):
                return node, kp, rec
    raise AssertionError("no tensor record")


def test_one_changed_digit_is_reported_with_a_diff(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "called_twice", "prune-repr")
    p = os.path.join(b, f"{cls}_debug_tree_FULL_TENSORS.json")
    raw = checks.read_bytes(p)
    i = raw.index(b"e-0")
    with open(p, "wb") as f:
        f.write(raw[: i - 1] + (b"7" if raw[i - 1: i] != b"7" else b"8") + raw[i:])
    res = _cmp(a, b, cls, "prune-repr", cap)
    msg = _all(res)
    assert "FULL_TENSORS.json differs" in msg and "\n-" in msg and "\n+" in msg


def test_other_formatting_is_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "value_kwarg", "noprune-repr")
    p = os.path.join(b, f"{cls}_debug_tree_SUMMARY.json")
    obj = json.loads(checks.read_bytes(p))
    with open(p, "w") as f:
        json.dump(obj, f, indent=1)
    assert "SUMMARY.json differs" in _all(_cmp(a, b, cls, "noprune-repr", cap))


def test_summary_stripping_the_value_kwarg_is_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "value_kwarg", "prune-repr")
    name = f"{cls}_debug_tree_SUMMARY.json"
    shutil.copy(os.path.join(a, name), os.path.join(b, name))  # transformers' behaviour
    msg = _all(_cmp(a, b, cls, "prune-repr", cap))
    assert "strips non-tensor 'value' keys" in msg


def test_first_call_renamed_is_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "called_twice", "noprune-st")
    p = os.path.join(b, f"{cls}_debug_tree_FULL_TENSORS.json")

    def rename(tree):
        _, _, rec = _first_tensor_record(tree, pred=lambda n: n["module_path"] == f"{cls}.norm")
        old = rec["value"][2:]
        rec["value"] = "./renamed.safetensors"
        os.rename(os.path.join(b, old), os.path.join(b, "renamed.safetensors"))

    _edit_json(p, rename)
    assert "must keep transformers' name" in _all(_cmp(a, b, cls, "noprune-st", cap))


def test_second_call_holding_first_calls_data_is_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "called_twice", "noprune-st")
    norm_files = sorted(f for f in os.listdir(b) if f.startswith(f"{cls}.norm#2_outputs"))
    assert norm_files
    shutil.copy(os.path.join(a, f"{cls}.norm_outputs.safetensors"), os.path.join(b, norm_files[0]))
    # transformers' file holds the LAST (3rd) call's data, not the 2nd's
    assert "not this call's data" in _all(_cmp(a, b, cls, "noprune-st", cap))


def test_first_call_holding_last_calls_data_is_reported(oracle, tmp_path):
    """transformers' own behaviour (overwriting) must not pass for nbtrace."""
    a, b, cap, cls = _setup(oracle, tmp_path, "called_twice", "noprune-st")
    shutil.copy(os.path.join(a, f"{cls}.norm_outputs.safetensors"), os.path.join(b, f"{cls}.norm_outputs.safetensors"))
    assert "not this call's data" in _all(_cmp(a, b, cls, "noprune-st", cap))


def test_two_references_to_one_file_are_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "called_twice", "noprune-st")
    p = os.path.join(b, f"{cls}_debug_tree_FULL_TENSORS.json")

    def dup(tree):
        refs = [rec for n in checks.iter_nodes(tree) if n["module_path"] == f"{cls}.norm"
                for _, rec in checks.iter_tensor_records(n.get("outputs"))]
        refs[1]["value"] = refs[0]["value"]

    _edit_json(p, dup)
    msg = _all(_cmp(a, b, cls, "noprune-st", cap))
    assert "referenced twice" in msg or "must keep" in msg or "differs" in msg


def test_pruned_block_files_written_are_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "nested_lists", "prune-st")
    res0 = _cmp(a, b, cls, "prune-st", cap)
    f = sorted(res0.pruned_files)[0]
    shutil.copy(os.path.join(a, f), b)
    msg = _all(_cmp(a, b, cls, "prune-st", cap))
    assert "extra (1)" in msg and f in msg


def test_missing_file_is_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "nested_lists", "noprune-st")
    victim = sorted(f for f in os.listdir(b) if ".head_outputs" in f)[0]
    os.remove(os.path.join(b, victim))
    msg = _all(_cmp(a, b, cls, "noprune-st", cap))
    assert "missing (1)" in msg and victim in msg


def test_changed_tensor_is_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "nested_lists", "prune-st")
    victim = sorted(f for f in os.listdir(b) if ".head_outputs" in f)[0]
    t = checks.load_st(os.path.join(b, victim))["data"]
    t = t.clone()
    t.view(-1)[0] += 1e-6
    save_file({"data": t}, os.path.join(b, victim))
    assert "values differ" in _all(_cmp(a, b, cls, "prune-st", cap))


def test_dtype_change_is_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "nested_lists", "noprune-st")
    victim = f"{cls}_outputs.safetensors"
    t = checks.load_st(os.path.join(b, victim))["data"]
    save_file({"data": t.double()}, os.path.join(b, victim))
    assert "dtype" in _all(_cmp(a, b, cls, "noprune-st", cap))


def test_stray_files_are_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "value_kwarg", "prune-repr")
    open(os.path.join(b, f"{cls}_debug_tree_FULL_TENSORS.json.tmp"), "w").close()
    assert "unexpected extra files" in _all(_cmp(a, b, cls, "prune-repr", cap))


def test_safetensors_in_repr_mode_are_reported(oracle, tmp_path):
    a, b, cap, cls = _setup(oracle, tmp_path, "value_kwarg", "prune-repr")
    save_file({"data": torch.zeros(1)}, os.path.join(b, "x.safetensors"))
    assert "use_repr=True" in _all(_cmp(a, b, cls, "prune-repr", cap))


def test_unified_diff_is_cut():
    a = "\n".join(f"line {i}" for i in range(200)).encode()
    b = "\n".join(f"line {i}" if i % 2 else f"LINE {i}" for i in range(200)).encode()
    d = checks.unified_diff(a, b, "a", "b", max_lines=10)
    assert sum(1 for line in d.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))) == 10
    assert "more differing lines" in d


def test_state_problems():
    from tests.compat import run_impl

    base = {"print_opts": {"sci_mode": None}, "grad_enabled": True, "default_dtype": "torch.float32",
            "global_hooks": {}, "forward_in_dict": {"p": 1, "q": 2}, "module_hooks": {"x": [1, 0]},
            "model_attrs": ["a"]}
    after = json.loads(json.dumps(base))
    assert run_impl.state_problems(base, after, base) == ([], [])
    after.update(print_opts={"sci_mode": True}, forward_in_dict={"<root>": 5, "q": 3},
                 module_hooks={"x": [1, 0], "y": [1, 0]}, model_attrs=["a", "_call_tree"])
    problems, notes = run_impl.state_problems(base, after, base)
    assert len(problems) == 5 and "print options" in problems[0] and "_call_tree" in notes[0]
    text = "\n".join(problems)
    assert "left in __dict__" in text and "removed from ['p']" in text and "replaced on ['q']" in text
