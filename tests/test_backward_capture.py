"""nbtrace.trace(..., backward=True): the backward passes run in the block, recorded beside the forward (issue 38)."""

from __future__ import annotations

import filecmp

import pytest
import torch

import nbtrace
from tests.models import backward_models as bm

FILES = ("TinyTrainLM_debug_tree_FULL_TENSORS.json", "TinyTrainLM_debug_tree_SUMMARY.json")


def _step(model, folder, **options):
    with nbtrace.trace(model, folder, measure_rounding=False, backward=True, **options) as rec:
        bm.train_step(model)
    return rec


def test_forward_files_are_the_same_bytes_with_backward(tmp_path):
    for use_repr in (True, False):
        model = bm.build(0)
        with nbtrace.trace(model, tmp_path / f"plain{use_repr}", use_repr=use_repr, measure_rounding=False):
            out = model(bm.inputs(0)[0])
        assert not out.requires_grad  # without the option the calls run under no_grad, as transformers' do
        _step(bm.build(0), tmp_path / f"grad{use_repr}", use_repr=use_repr)
        for name in FILES:
            assert filecmp.cmp(tmp_path / f"plain{use_repr}" / name, tmp_path / f"grad{use_repr}" / name, shallow=False)


def test_gradients_are_the_ones_autograd_computed(tmp_path):
    model = bm.build(1)
    with nbtrace.trace(model, tmp_path, measure_rounding=False, backward=True, use_repr=False):
        bm.train_step(model, seed=1)
    backward = nbtrace.load_trace(tmp_path).backward
    assert backward is not None and len(backward) == 1
    # the tied embedding / lm_head weight: one gradient, summed from its two uses
    tied = backward.parameters["TinyTrainLM.embed_tokens.weight"].load()
    assert "TinyTrainLM.lm_head.weight" not in backward.parameters
    torch.testing.assert_close(tied, model.embed_tokens.weight.grad, rtol=0, atol=0)
    # the gradient reaching the logits is the loss's, and what down_proj sends on is its input gradient
    ids, targets = bm.inputs(1)
    reference = bm.build(1)
    logits = reference(ids).detach().requires_grad_()
    (seed,) = torch.autograd.grad(bm.loss_of(logits, targets), logits)
    torch.testing.assert_close(backward.trace.root.outputs.load(), seed)
    down = backward.trace["TinyTrainLM.layers.0.mlp.down_proj"]
    weight = model.layers[0].mlp.down_proj.weight
    torch.testing.assert_close(down.inputs["args"][0].load(), down.outputs.load() @ weight.detach())
    # every recorded call got its output gradient, and the forward's pruning holds for the backward
    paths = [n.module_path for n in backward.trace.nodes()]
    assert paths == [n.module_path for n in nbtrace.load_trace(tmp_path).nodes()]
    assert all(n.outputs is not None for n in backward.trace.nodes())


def test_a_residual_input_gets_the_module_s_own_contribution(tmp_path):
    model = bm.build(0)
    _step(model, tmp_path, use_repr=False)
    grads = nbtrace.load_trace(tmp_path).backward.trace
    layer = grads["TinyTrainLM.layers.0"]
    norm = grads["TinyTrainLM.layers.0.input_layernorm"]
    # the layer's input gradient sums its residual path and its norm's; the norm's is the norm's alone
    residual = layer.inputs["args"][0].load() - norm.inputs["args"][0].load()
    attention_out = grads["TinyTrainLM.layers.0.self_attn"].outputs.load()
    torch.testing.assert_close(attention_out, residual)
    assert not torch.allclose(layer.inputs["args"][0].load(), norm.inputs["args"][0].load())


@pytest.mark.parametrize("use_repr", [True, False])
def test_checkpointing_records_the_same_gradients(tmp_path, use_repr):
    stats = []
    for checkpoint in (False, True):
        model = bm.build(2, checkpoint=checkpoint, dropout=0.1).train()
        _step(model, tmp_path / str(checkpoint), use_repr=use_repr)
        backward = nbtrace.load_trace(tmp_path / str(checkpoint)).backward
        stats.append([(n.module_path, repr(n.outputs), repr(n.inputs)) for n in backward.trace.nodes()])
    assert stats[0] == stats[1]


def test_a_reentrant_checkpoint_records_its_recomputation(tmp_path):
    grads = []
    for checkpoint in (False, True):
        model = bm.build(3, checkpoint=checkpoint, reentrant=True, dropout=0.1).train()
        _step(model, tmp_path / str(checkpoint), use_repr=False)
        grads.append(nbtrace.load_trace(tmp_path / str(checkpoint)).backward.trace)
    compared = 0
    for plain, rerun in zip(grads[0].nodes(), grads[1].nodes()):
        for io in ("outputs", "inputs"):
            x, y = getattr(plain, io), getattr(rerun, io)
            if isinstance(x, dict):  # the call's first argument
                x, y = x["args"][0], y["args"][0] if isinstance(y, dict) else y
            if isinstance(x, nbtrace.TensorValue):
                assert isinstance(y, nbtrace.TensorValue), (plain.module_path, io)
                torch.testing.assert_close(x.load(), y.load(), rtol=1e-5, atol=1e-8)
                compared += 1
    assert compared > 40  # the layers' calls too, which ran under no_grad inside the checkpoint


def test_several_passes_and_forwards(tmp_path):
    model = bm.build(0).train()
    with nbtrace.trace(model, tmp_path, measure_rounding=False, backward=True) as rec:
        bm.train_step(model)
        ids, targets = bm.inputs(1)
        logits = model(ids)
        loss = bm.loss_of(logits, targets)
        loss.backward(retain_graph=True)
        torch.autograd.grad(loss, [model.norm.weight])
    assert len(rec.traces) == 2
    first = nbtrace.load_trace(tmp_path / "forward_0").backward
    assert first is not None and len(first) == 1
    second = rec.trace.backward
    assert len(second) == 2 and set(second.passes[1].parameters) == {"TinyTrainLM.norm.weight"}
    assert second.passes[1].trace["TinyTrainLM.norm"].outputs is not None


def test_autocast_records_the_gradients_in_their_dtypes(tmp_path):
    model = bm.build(0)
    with nbtrace.trace(model, tmp_path, measure_rounding=False, backward=True):
        ids, targets = bm.inputs(0)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(ids)
        bm.loss_of(logits, targets).backward()
    grads = nbtrace.load_trace(tmp_path).backward.trace
    assert grads["TinyTrainLM.layers.0.mlp.down_proj"].outputs.dtype == "torch.bfloat16"
    assert grads["TinyTrainLM.layers.0.input_layernorm"].outputs.dtype == "torch.float32"


def test_hooks_are_removed_even_when_the_block_raises(tmp_path):
    model = bm.build(0)
    with pytest.raises(ValueError):
        with nbtrace.trace(model, tmp_path, measure_rounding=False, backward=True):
            out = model(bm.inputs(0)[0])
            raise ValueError("the user's code failed")
    out.sum().backward()  # after the block: nothing recorded, nothing left hooked
    assert not (tmp_path / "TinyTrainLM_debug_tree_BACKWARD.json").exists()
    assert not model.embed_tokens.weight._backward_hooks


def test_a_stale_backward_file_is_not_read(tmp_path):
    _step(bm.build(0), tmp_path)
    model = bm.build(1)
    with nbtrace.trace(model, tmp_path, measure_rounding=False):  # a later run without backward, in the same folder
        model(bm.inputs(0)[0])
    assert nbtrace.load_trace(tmp_path).backward is None
