"""A plot says what it shows: a line labelled with a module draws that module's tensor (or says where it was
read), and a comparison's companion line draws only what the comparison measured."""

from __future__ import annotations

import matplotlib
import pytest
import torch

import nbtrace

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A 2-layer GPT-2 trace and each attention's own output (``attn(...)[0]``, taken by a torch hook)."""
    from tests.models.zoo_transformers import _gpt2

    torch.manual_seed(0)
    model, inputs = _gpt2()
    model.eval()
    args, kwargs = inputs()
    outputs: dict[int, torch.Tensor] = {}
    hooks = [
        block.attn.register_forward_hook(lambda m, a, out, i=i: outputs.__setitem__(i, out[0].detach()))
        for i, block in enumerate(model.transformer.h)
    ]
    with nbtrace.trace(model, debug_path=tmp_path_factory.mktemp("gpt2"), do_prune_layers=False) as rec:
        with torch.no_grad():
            model(*args, **kwargs)
    for hook in hooks:
        hook.remove()
    return rec.trace, [outputs[i] for i in sorted(outputs)]


def test_a_line_labelled_attn_draws_the_attentions_own_output(gpt2):
    import matplotlib.pyplot as plt

    trace, outputs = gpt2
    fig, ax = plt.subplots()
    nbtrace.plot_stats(trace, ax=ax, where=r"\.attn$")
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [0.0, 1.0]
    assert line.get_ydata() == pytest.approx([float(o.mean()) for o in outputs], rel=1e-3)
    (band,) = ax.collections  # mean ± std: the band's top edge is mean + std
    top = band.get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx(max(float(o.mean() + o.std()) for o in outputs), rel=1e-2)
    # the residual stream (ln_2's input, what the plot showed before) is far from it: the test can fail
    residual = [trace[f"GPT2LMHeadModel.transformer.h.{i}.ln_2"].input_tensors()[0].std for i in range(2)]
    assert all(r > 3 * float(o.std()) for r, o in zip(residual, outputs))
    # and it says where the output was read: the format keeps no outputs for calls with children
    assert "read at its last call, resid_dropout" in ax.get_title()
    plt.close(fig)


def test_a_layer_block_is_still_read_at_the_next_blocks_input(gpt2):
    from nbtrace.render.plot_data import stats_table

    trace, _ = gpt2
    table = stats_table(trace, where=r"h\.\d+$")
    assert table["recorded_at"].tolist()[:1] == ["GPT2LMHeadModel.transformer.h.1"]
