"""TraceView of several forwards, from Python: the step trait, what each step shows, the picker's facts."""

from __future__ import annotations

import json
import time

import pytest
import torch
import traitlets

import nbtrace
from nbtrace.diff.verdict.report import STATUSES
from tests.models.core_models import Stack, seeded
from tests.models.generation import ROOT, Bug, build_reference, make_port, make_prompt, trace_generate

STEPS = 4
ATTN = f"{ROOT}.model.layers.1.self_attn"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    reference, prompt = build_reference(), make_prompt()
    root = tmp_path_factory.mktemp("view")
    rec = trace_generate(reference, prompt, STEPS, root / "a")
    trace_generate(make_port(reference, Bug.MASK), prompt, STEPS, root / "b")
    return rec, root / "a", root / "b"


@pytest.mark.parametrize("source", ["recorder", "folder", "list"])
def test_several_forwards_get_a_step_picker(run, source):
    rec, folder, _ = run
    given = {"recorder": rec, "folder": folder, "list": nbtrace.load_traces(folder)}[source]
    view = nbtrace.TraceView(given)
    assert view.step == 0 and view.step_count == STEPS
    facts = json.loads(view.steps)
    assert facts["n"] == STEPS and facts["input"] == [8, 1, 1, 1]
    assert facts["token"] == [str(t.sidecar["generation"]["tokens"][0]) for t in rec.traces]
    assert view.trace == rec.traces[0] and json.loads(view.payload)["calls_total"] == len(rec.traces[0])
    view.step = 2
    assert view.trace == rec.traces[2]
    assert view.trace["LlamaForCausalLM.model.embed_tokens"].output_tensors()[0].shape == (1, 1, 64)


def test_the_selected_call_stays_selected_across_steps(run):
    view = nbtrace.TraceView(run[0])
    view.selected = ATTN
    view.step = 3
    assert view.selected == ATTN and view.selected_node is view.trace[ATTN]
    assert view.selected_node.input_tensors()[0].shape == (1, 1, 64)  # step 3's own call
    assert view.detail(view.selected_row)["path"] == ATTN


def test_a_step_out_of_range_is_refused_by_name(run):
    view = nbtrace.TraceView(run[0])
    with pytest.raises(traitlets.TraitError, match="step 9 is out of range: this view has 4 step"):
        view.step = 9
    assert view.step == 0
    with pytest.raises(ValueError, match="single forward"):
        nbtrace.TraceView(run[0].trace, step=1)


def test_a_step_comparison_opens_at_the_first_diverging_step(run):
    _, a, b = run
    c = nbtrace.compare(a, b)
    view = nbtrace.TraceView(c)
    assert view.step == 1 and view.selected == ATTN  # the step, and the module inside it
    facts = json.loads(view.steps)
    assert facts["status"] == ["match", "first", "diverged", "diverged"] and facts["first"] == 1
    assert facts["b_token"][1] != facts["token"][1]
    assert view.comparison is c.comparison(1) and statuses(view)[view.selected_row] == "first"
    fallback = view._repr_mimebundle_()[0]["text/html"]  # what nbconvert and GitHub show: every step's verdict
    assert "first diverging step: 1" in fallback and fallback.count("<tr>") >= STEPS
    view.step = 0
    assert view.selected == ATTN and view.comparison.agree  # the same module, where it still agrees
    assert set(statuses(view)) <= {"match", "no_data"}  # nothing diverges in the prefill
    view.selected = ""
    view.step = 3  # nothing selected: the step opens on its own first divergence (its inputs differ)
    assert view.selected == ROOT and statuses(view)[view.selected_row] == "first"


def statuses(view) -> list[str]:
    return [STATUSES[code - 1] for code in view.rows["status"]]


def fastest(action, times: int = 3) -> float:
    """The shortest of ``times`` runs of ``action`` (seconds): the machine's other work left out."""
    best = float("inf")
    for _ in range(times):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def test_a_long_run_opens_without_reading_every_step(tmp_path):
    model = seeded(Stack, layers=3)
    with nbtrace.trace(model, debug_path=tmp_path, use_repr=True) as rec:
        for i in range(300):
            model(torch.full((1, 8), float(i)))
    one = fastest(lambda: nbtrace.TraceView(rec.trace))
    every = fastest(lambda: nbtrace.load_traces(tmp_path), times=2)
    opened = fastest(lambda: nbtrace.TraceView(tmp_path))
    view = nbtrace.TraceView(tmp_path)
    steps = iter([250, 120, 30])
    switch = fastest(lambda: setattr(view, "step", next(steps)))
    assert view.trace == rec.traces[30]
    # the picker reads each step's small sidecar, not its trace; a step is read when it is shown
    assert opened < 0.6 * every and switch < 10 * one + 0.05, (one, every, opened, switch)


def test_modeltrace_on_a_generate_cell_keeps_every_step_and_shows_the_picker(tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance()
    ip.run_cell("%load_ext nbtrace", store_history=False)
    ip.user_ns.update(gen_model=build_reference(), prompt=make_prompt())
    try:
        with capture_output() as io:
            result = ip.run_cell("%%modeltrace --safetensors\nout = gen_model.generate(prompt, max_new_tokens=3)")
        assert result.success, io.stdout + io.stderr
        assert "3 forwards of LlamaForCausalLM ran" in io.stderr and "every one is kept" in io.stderr
        (shown,) = [o.data for o in io.outputs]
        assert "application/vnd.jupyter.widget-view+json" in shown and "step 0 of 3" in shown["text/html"]
        folder = tmp_path / "nbtrace_traces" / "LlamaForCausalLM"
        assert len(nbtrace.load_traces(folder)) == 3 and ip.user_ns["_trace"] == nbtrace.load_trace(folder)
    finally:
        for name in ("gen_model", "prompt", "out", "_trace"):
            ip.user_ns.pop(name, None)
