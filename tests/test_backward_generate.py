"""backward=True around ``generate`` (tests/models/generation.py: transformers' Llama): generate runs under no_grad,
so there is no backward to record; the block says so in a warning, the tokens and the forward's files are those of a
trace without the option, and a training step before a generate in one block keeps its backward."""

from __future__ import annotations

import filecmp
import warnings

import pytest
import torch

import nbtrace
from tests.models.generation import build_reference, make_prompt


@pytest.fixture(scope="module")
def model_and_prompt():
    return build_reference(), make_prompt()


def test_generate_alone_warns_that_no_backward_ran_and_changes_nothing(model_and_prompt, tmp_path):
    model, prompt = model_and_prompt
    plain = model.generate(prompt, max_new_tokens=3, do_sample=False)
    with pytest.warns(UserWarning, match="no backward pass ran inside the block: its 3 forward"):
        with nbtrace.trace(model, tmp_path / "with", backward=True, measure_rounding=False):
            tokens = model.generate(prompt, max_new_tokens=3, do_sample=False)
    with nbtrace.trace(model, tmp_path / "without", measure_rounding=False):
        model.generate(prompt, max_new_tokens=3, do_sample=False)
    assert torch.equal(tokens, plain)
    for name in ("LlamaForCausalLM_debug_tree_FULL_TENSORS.json", "LlamaForCausalLM_debug_tree_SUMMARY.json"):
        assert filecmp.cmp(tmp_path / "with" / "forward_0" / name, tmp_path / "without" / "forward_0" / name,
                           shallow=False)
    assert nbtrace.load_trace(tmp_path / "with" / "forward_0").backward is None


def test_a_training_step_then_generate_keeps_the_step_s_backward(model_and_prompt, tmp_path):
    model, prompt = model_and_prompt
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a backward ran: nothing to warn about
        with nbtrace.trace(model, tmp_path, backward=True, measure_rounding=False) as rec:
            model(prompt).logits.float().pow(2).mean().backward()
            model.generate(prompt, max_new_tokens=2, do_sample=False)
    model.zero_grad()
    passes = [None if t.backward is None else len(t.backward) for t in rec.traces]
    assert passes == [1, None, None]


def test_a_block_that_raises_does_not_add_the_warning(model_and_prompt, tmp_path):
    model, prompt = model_and_prompt
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(KeyError), nbtrace.trace(model, tmp_path, backward=True, measure_rounding=False):
            model(prompt)
            raise KeyError("the user's own error")


def test_the_view_of_the_block_plots_the_step_with_a_backward_only(model_and_prompt, tmp_path):
    model, prompt = model_and_prompt
    with nbtrace.trace(model, tmp_path / "run", backward=True, measure_rounding=False) as rec:
        model(prompt).logits.float().pow(2).mean().backward()
        model.generate(prompt, max_new_tokens=1, do_sample=False)
    model.zero_grad()
    view = nbtrace.TraceView(rec)
    assert view.step_count == 2 and view.step == 0 and view.gradients  # the training step: its plot
    view.step = 1
    assert view.gradients == ""  # generate's forward: none
    view.step = 0
    assert view.gradients
    page = nbtrace.save_html(view, tmp_path / "run.html").read_text()
    assert 'id="nbt-gradients-0"' in page and 'id="nbt-gradients-1"' not in page
