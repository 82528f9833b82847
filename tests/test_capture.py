"""What a user sees when tracing: the trace, its files, and a model left as it was."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import nbtrace
from nbtrace.demo import build_demo

from tests.models.core_models import (
    Boom,
    CalledTwice,
    Failing,
    OddWrapper,
    ScaledTop,
    Stack,
    UnsafeWrapper,
    seeded,
)


def instance_forwards(model: torch.nn.Module) -> list[str]:
    return [name for name, module in model.named_modules() if "forward" in module.__dict__]


def full_json(folder: Path, cls: str) -> dict:
    return json.loads((folder / f"{cls}_debug_tree_FULL_TENSORS.json").read_text())


def test_trace_yields_the_recorded_tree_and_writes_both_files(tmp_path):
    model, inputs = build_demo(num_layers=4)
    with nbtrace.trace(model, debug_path=tmp_path) as rec:
        assert rec.trace is None
        model(**inputs)
    t = rec.trace
    assert isinstance(t, nbtrace.Trace) and rec.traces == [t]
    assert t.model_name == "DemoLM"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "DemoLM_debug_tree_FULL_TENSORS.json",
        "DemoLM_debug_tree_NBTRACE.json",  # nbtrace's own sidecar: parameter fingerprints
        "DemoLM_debug_tree_SUMMARY.json",
    ]
    paths = [n.module_path for n in t.nodes()]
    assert paths[:3] == ["DemoLM", "DemoLM.embed_tokens", "DemoLM.rotary_emb"]
    # pruning keeps the first and the last layer block
    assert "DemoLM.layers.0" in paths and "DemoLM.layers.3" in paths
    assert "DemoLM.layers.1" not in paths and "DemoLM.layers.2" not in paths
    assert t.root.pruned_layers() == [(3, "DemoLM.layers", 1, 2)]
    q = t["DemoLM.layers.0.self_attn.q_proj"]
    assert q.depth == 3 and q.parent.module_path == "DemoLM.layers.0.self_attn"
    out = q.outputs
    assert out.shape == (1, 16, 64) and out.dtype == "torch.float32"
    assert isinstance(out.mean, float) and out.std > 0 and out.min < out.mean < out.max
    assert out.lines[0].startswith("tensor([[[")
    assert all(n.duration is not None and n.duration >= 0 for n in t.nodes())
    assert t == nbtrace.load_trace(tmp_path)
    assert t.to_dict() == full_json(tmp_path, "DemoLM")


def test_stats_are_the_numbers_torch_computes(tmp_path):
    model, inputs = build_demo(num_layers=2)
    with nbtrace.trace(model, debug_path=tmp_path) as rec:
        model(**inputs)
    embedded = model.embed_tokens(inputs["input_ids"])
    out = rec.trace["DemoLM.embed_tokens"].outputs
    assert out.mean == pytest.approx(embedded.mean().item(), rel=1e-4, abs=1e-7)
    assert out.std == pytest.approx(embedded.std().item(), rel=1e-4)
    assert out.min == pytest.approx(embedded.min().item(), rel=1e-4)
    assert out.max == pytest.approx(embedded.max().item(), rel=1e-4)


def test_model_addition_debugger_context_yields_the_model(tmp_path):
    model, inputs = build_demo(num_layers=1)
    with nbtrace.model_addition_debugger_context(model, debug_path=str(tmp_path)) as yielded:
        assert yielded is model
        model(**inputs)
    assert (tmp_path / "DemoLM_debug_tree_SUMMARY.json").is_file()


def test_debug_path_none_writes_into_the_working_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model, inputs = build_demo(num_layers=1)
    with nbtrace.trace(model) as rec:
        model(**inputs)
    assert (tmp_path / "DemoLM_debug_tree_FULL_TENSORS.json").is_file()
    assert rec.trace.source == tmp_path / "DemoLM_debug_tree_FULL_TENSORS.json"


def test_direct_forward_calls_are_traced(tmp_path):
    model, inputs = build_demo(num_layers=1)
    with nbtrace.trace(model, debug_path=tmp_path) as rec:
        model.forward(**inputs)
    assert len(rec.trace) > 5


def test_model_and_print_options_are_left_exactly_as_they_were(tmp_path):
    model = seeded(Stack)
    patched = model.layers[1]
    own_forward = patched.forward  # an instance attribute the user set before tracing
    patched.forward = own_forward
    torch.set_printoptions(precision=6, linewidth=91, sci_mode=False)
    try:
        before = torch._tensor_str.get_printoptions()
        grad_before = torch.is_grad_enabled()
        with nbtrace.trace(model, debug_path=tmp_path):
            assert instance_forwards(model)  # wrapped while inside
            model(torch.randn(2, 8))
        assert torch._tensor_str.get_printoptions() == before
        assert torch.is_grad_enabled() == grad_before
        assert instance_forwards(model) == ["layers.1"]
        assert patched.__dict__["forward"] is own_forward
    finally:
        torch.set_printoptions(profile="default")
        torch.set_printoptions(sci_mode=None)


def test_print_options_are_untouched_inside_the_users_forward(tmp_path):
    seen = []

    class Peek(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x):
            seen.append(torch._tensor_str.get_printoptions()["sci_mode"])
            return self.lin(x)

    model = Peek()
    with nbtrace.trace(model, debug_path=tmp_path):
        model(torch.ones(1, 2))
    assert seen and set(seen) == {None}  # the forward, and the float64 twin's runs of a copy of it


def test_submodules_run_without_grad_and_the_top_level_keeps_the_callers_mode(tmp_path):
    model = seeded(ScaledTop)
    with nbtrace.trace(model, debug_path=tmp_path) as rec:
        out = model(torch.ones(1, 3))
    assert out.requires_grad  # the top-level multiply by a parameter ran with grad
    root = full_json(tmp_path, "ScaledTop")
    assert "outputs" not in root  # the root has children, so the format drops its outputs
    assert not rec.trace["ScaledTop.lin"].outputs.stats["mean"].endswith("grad_fn=<MeanBackward0>)")


def test_module_called_twice_keeps_a_file_per_call(tmp_path):
    model = seeded(CalledTwice)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    handle = model.act.register_forward_hook(lambda m, args, out: seen.append((args[0].clone(), out.clone())))
    x = torch.randn(3, 4)
    try:
        with nbtrace.trace(model, debug_path=tmp_path, use_repr=False) as rec:
            model(x)
    finally:
        handle.remove()
    calls = rec.trace.find(r"\.act$")
    assert [c.call_index for c in calls] == [0, 1]
    first_out, second_out = (c.outputs for c in calls)
    assert first_out.ref == "./CalledTwice.act_outputs.safetensors"
    assert first_out.ref != second_out.ref
    for call, (expected_in, expected_out) in zip(calls, seen):
        assert torch.equal(call.inputs["args"][0].load(), expected_in)
        assert torch.equal(call.outputs.load(), expected_out)
    assert not torch.equal(seen[0][1], seen[1][1])


def test_a_forward_that_raises_still_leaves_a_trace(tmp_path):
    model = seeded(Failing)
    x = torch.randn(2, 4)
    with pytest.raises(Boom) as caught:
        with nbtrace.trace(model, debug_path=tmp_path, use_repr=False) as rec:
            model(x)
    assert caught.value is model.bad.error  # the very exception, unchanged
    assert instance_forwards(model) == []
    tree = full_json(tmp_path, "Failing")
    message = "layer two exploded at object at 0xXXXXXXXX"
    error = {"type": "tests.models.core_models.Boom", "message": message}
    assert tree["error"] == error
    ok, bad = tree["children"]
    assert ok["module_path"] == "Failing.ok" and "error" not in ok
    assert bad["module_path"] == "Failing.bad" and bad["error"] == error
    assert [c["module_path"] for c in bad["children"]] == ["Failing.bad.inner"]
    assert "Failing.never" not in json.dumps(tree)
    t = rec.trace
    assert [n.module_path for n in t.errors()] == ["Failing", "Failing.bad"]
    assert t == nbtrace.load_trace(tmp_path)
    assert torch.equal(t["Failing.ok"].inputs["args"][0].load(), x)


def test_odd_tensors_never_crash_the_trace(tmp_path):
    model = seeded(OddWrapper)
    for use_repr in (True, False):
        folder = tmp_path / f"repr{use_repr}"
        with nbtrace.trace(model, debug_path=folder, use_repr=use_repr) as rec:
            model(torch.ones(1, 2))
        out = rec.trace["OddWrapper.odd"].outputs
        assert set(out) >= {"empty", "nan_inf", "complex", "int", "bool", "double", "meta"}
        assert out["empty"].shape == (0, 3) and out["empty"].mean is None
        assert out["nan_inf"].nonfinite and rec.trace["OddWrapper.odd"].nonfinite
        assert not out["one"].nonfinite  # std of one element is nan by definition, not a problem
        assert out["meta"].shape == (2, 3)
        assert out["int"].mean is None and out["double"].mean is None
        assert out["scalar"].shape == ()
        assert nbtrace.load_trace(folder) == rec.trace
        if use_repr:
            assert out["complex"].lines == ["tensor([1.0000e+00+2.0000e+00j, 3.0000e+00-4.0000e+00j])"]
            assert out["meta"].lines == ["tensor(..., device='meta', size=(2, 3))"]
        else:
            assert torch.equal(out["complex"].load(), torch.tensor([1 + 2j, 3 - 4j]))
            assert out["empty"].load().shape == (0, 3)
            assert out["meta"].lines == ["tensor(..., device='meta', size=(2, 3))"]


def test_no_file_is_written_outside_debug_path(tmp_path):
    outside = tmp_path / "work"
    debug = outside / "debug"
    model = seeded(UnsafeWrapper)
    with nbtrace.trace(model, debug_path=debug, use_repr=False) as rec:
        model(torch.ones(1, 2))
    everything = {p.relative_to(tmp_path) for p in tmp_path.rglob("*")}
    assert all(p.parts[:2] == ("work", "debug") or p == Path("work") or p == Path("work/debug") for p in everything)
    assert all(p.parent == debug for p in debug.rglob("*"))  # one flat folder
    outputs = rec.trace["UnsafeWrapper.inner"].outputs
    assert outputs["ok"].ref == "./UnsafeWrapper.inner_outputs_ok.safetensors"
    for key, offset in (("../escape", 0), ("/abs", 1), ("a/b", 2), ("..", 3)):
        assert "/" not in outputs[key].ref[2:]
        assert outputs[key].path.parent == debug
        assert torch.allclose(outputs[key].load(), outputs["ok"].load() - 4 + offset)


def test_unusable_debug_path_is_a_clear_error_before_the_model_runs(tmp_path):
    model = seeded(Stack)
    calls = []
    model.register_forward_pre_hook(lambda *a: calls.append(1))
    a_file = tmp_path / "not_a_folder"
    a_file.write_text("x")
    for bad in (a_file, a_file / "below"):
        with pytest.raises(ValueError, match=str(bad)):
            with nbtrace.trace(model, debug_path=bad):
                model(torch.ones(1, 8))
    assert calls == [] and instance_forwards(model) == []


@pytest.mark.skipif(os.name != "posix", reason="needs fork and setuid")
def test_a_folder_without_write_permission_is_a_clear_error():
    import shutil
    import tempfile

    outer = Path(tempfile.mkdtemp(prefix="nbtrace-perm-"))  # pytest's tmp_path is private to root
    outer.chmod(0o755)
    locked = outer / "locked"
    locked.mkdir(mode=0o755)
    if os.geteuid() != 0:
        locked.chmod(0o555)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop root, then try
        try:
            os.close(read_end)
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            try:
                with nbtrace.trace(torch.nn.Linear(1, 1), debug_path=locked):
                    message = "no error"
            except ValueError as exc:
                message = f"ValueError: {exc}"
            os.write(write_end, message.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        message = pipe.read()
    os.waitpid(pid, 0)
    shutil.rmtree(outer, ignore_errors=True)
    assert message.startswith("ValueError:") and str(locked) in message and "not writable" in message


def test_every_forward_is_kept_and_earlier_files_move_aside(tmp_path):
    model = seeded(Stack, layers=3)
    xs = [torch.randn(1, 8), torch.randn(1, 8), torch.randn(1, 8)]
    with nbtrace.trace(model, debug_path=tmp_path, use_repr=False) as rec:
        for x in xs:
            model(x)
    assert len(rec.traces) == 3 and rec.trace is rec.traces[-1]
    assert (tmp_path / "forward_0" / "Stack_debug_tree_FULL_TENSORS.json").is_file()
    assert (tmp_path / "forward_1" / "Stack_debug_tree_SUMMARY.json").is_file()
    for t, x in zip(rec.traces, xs):
        assert torch.equal(t["Stack.layers.0.proj"].inputs["args"][0].load(), x)
    assert nbtrace.load_trace(tmp_path / "forward_0") == rec.traces[0]
    assert nbtrace.load_trace(tmp_path) == rec.traces[2]


def test_pruned_layer_blocks_write_no_files_but_the_model_output_file_stays(tmp_path):
    model = seeded(Stack, layers=5)
    with nbtrace.trace(model, debug_path=tmp_path, use_repr=False):
        model(torch.randn(1, 8))
    names = {p.name for p in tmp_path.iterdir()}
    assert not [n for n in names if n.startswith(("Stack.layers.1", "Stack.layers.2", "Stack.layers.3"))]
    assert "Stack.layers.0_inputs_args_0.safetensors" in names
    assert "Stack.layers.4.proj_outputs.safetensors" in names
    assert "Stack_outputs.safetensors" in names
    referenced = {n.split("/")[-1] for n in json.dumps(full_json(tmp_path, "Stack")).split('"') if n.endswith(".safetensors")}
    assert referenced | {"Stack_outputs.safetensors"} == {n for n in names if n.endswith(".safetensors")}


def test_a_module_called_outside_the_model_forward_is_a_forward_of_its_own(tmp_path):
    """nbtrace.trace records it rooted at its path (generate runs an encoder so); the drop-in, as transformers, not."""
    model = seeded(Stack, layers=2)
    with nbtrace.trace(model, debug_path=tmp_path / "trace") as rec:
        out = model.head(torch.ones(1, 8, requires_grad=True))
    [alone] = rec.traces
    assert alone.model_name == "Stack.head" and len(alone) == 1 and not out.requires_grad
    with nbtrace.model_addition_debugger_context(model, debug_path=tmp_path / "drop-in"):
        out = model.head(torch.ones(1, 8, requires_grad=True))
    assert not list((tmp_path / "drop-in").glob("*.json")) and not out.requires_grad


def test_a_non_module_is_refused():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        with nbtrace.trace(lambda x: x):
            pass


def test_a_truncated_write_never_replaces_a_good_file(tmp_path, monkeypatch):
    model, inputs = build_demo(num_layers=1)
    with nbtrace.trace(model, debug_path=tmp_path):
        model(**inputs)
    good = (tmp_path / "DemoLM_debug_tree_FULL_TENSORS.json").read_bytes()

    def crash(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("nbtrace.capture.write.os.replace", crash)
    with pytest.raises(OSError, match="No space"):
        with nbtrace.trace(model, debug_path=tmp_path):
            model(**inputs)
    assert (tmp_path / "DemoLM_debug_tree_FULL_TENSORS.json").read_bytes() == good
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "DemoLM_debug_tree_FULL_TENSORS.json",
        "DemoLM_debug_tree_NBTRACE.json",
        "DemoLM_debug_tree_SUMMARY.json",
    ]


@pytest.mark.parametrize("use_repr", [True, False])
def test_tracing_under_inference_mode_gives_the_same_trace(tmp_path, use_repr):
    model, inputs = build_demo(num_layers=2)
    traces = []
    for mode, folder in ((torch.no_grad, tmp_path / "no_grad"), (torch.inference_mode, tmp_path / "inference")):
        with nbtrace.trace(model, debug_path=folder, use_repr=use_repr) as rec:
            with mode():
                model(**inputs)
        traces.append(rec.trace)
    assert traces[0].to_dict() == traces[1].to_dict()


def test_an_infinite_attention_mask_is_not_a_nan_alarm_but_a_nan_is(tmp_path):
    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = torch.nn.Softmax(dim=-1)
            self.out = torch.nn.Linear(4, 4)

        def forward(self, x, mask):
            return self.out(self.attn(x + mask))

    model = Masked()
    mask = torch.tensor([0.0, 0.0, float("-inf"), float("-inf")])
    with nbtrace.trace(model, debug_path=tmp_path / "ok") as rec:
        model(torch.randn(2, 4), mask)
    assert rec.trace.first_nonfinite() is None  # -inf went in, only finite numbers came out
    x = torch.randn(2, 4)
    x[0, 0] = float("nan")
    with nbtrace.trace(model, debug_path=tmp_path / "nan") as rec:
        model(x, mask)
    assert rec.trace.first_nonfinite().module_path == "Masked"  # the NaN came in with the input
    assert rec.trace["Masked.attn"].nonfinite and rec.trace["Masked.out"].nonfinite


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_demo_model_traces_in_half_precision(tmp_path, dtype):
    model, inputs = build_demo(num_layers=2)
    model.to(dtype)
    with nbtrace.trace(model, debug_path=tmp_path) as rec:
        out = model(**inputs)["logits"]
    assert out.dtype == dtype
    logits = rec.trace["DemoLM.lm_head"].outputs
    assert logits.dtype == str(dtype) and logits.stats["mean"].endswith(f"dtype={dtype})")


def test_the_text_tree_keeps_three_significant_digits():
    from nbtrace.render.vocabulary import format_number

    shown = [format_number(x) for x in (1.0, 0.99995, 12.0, 99.99, 1234.5, 0.0123, -1.5, 6.9e-4, 0.0, None)]
    assert shown == ["1.00", "1.000", "12.0", "100", "1234", "0.012", "-1.50", "6.90e-04", "0", "-"]
