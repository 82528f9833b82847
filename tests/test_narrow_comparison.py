"""narrow(comparison): the call a comparison blames, run again on the reference's recorded inputs, narrowed to
its first diverging operation; the summary, str(first_divergence) and the HTML show it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import nbtrace
from tests.models.ports import P, TinyLlamaPort, build_original, make_inputs
from tests.models.precision import one_thread  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_thread")


class Block(nn.Module):  # the README's original: x + down(gelu(up(norm(x))))
    def __init__(self, size=16):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(size), nn.Linear(size, 4 * size), nn.Linear(4 * size, size)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class PortedBlock(Block):  # the README's port: tanh-approximated gelu
    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(self.norm(x)), approximate="tanh"))


def _readme(tmp_path, port_class=PortedBlock, measure_rounding=False):
    torch.manual_seed(0)
    original = nn.Sequential(*[Block() for _ in range(4)]).eval()
    port = nn.Sequential(*[port_class() for _ in range(4)]).eval()
    port.load_state_dict(original.state_dict())
    with nbtrace.trace(original, debug_path=tmp_path / "original", use_repr=False, do_prune_layers=False,
                       measure_rounding=measure_rounding):
        original(torch.randn(2, 8, 16))
    return original, port, nbtrace.compare(tmp_path / "original", port)


def test_the_readme_gelu_example_names_the_gelu_line(tmp_path):
    original, _, c = _readme(tmp_path)
    assert c.first_divergence.operation is None  # not narrowed yet
    diff = nbtrace.narrow(c, reference=original)
    first = diff.first
    assert first.port.name == "gelu" and 'approximate="tanh"' in first.port.source.text
    assert first.reference.name == "gelu" and first.reference.source.file == __file__
    assert c.first_divergence.operation is diff and diff.module_path == "Sequential.0"
    line = next(x for x in c.summary().splitlines() if "operation in Sequential.0" in x)
    assert "gelu at test_narrow_comparison.py:" in line and "differs by" in line
    assert "gelu at test_narrow_comparison.py:" in str(c.first_divergence)
    assert "gelu at test_narrow_comparison.py:" in c._repr_html_()


def test_only_the_port_live_says_how_far_it_narrows(tmp_path):
    _, _, c = _readme(tmp_path)
    diff = nbtrace.narrow(c)
    assert diff.first is None and diff.reference is None and len(diff.port) == 5
    assert "only the port is live" in str(diff) and "differs from the reference's recorded output" in str(diff)
    assert set(diff.to_dataframe().side) == {"port"}


def test_both_modules_live_narrow_with_the_reference_without_being_told(tmp_path):
    """compare(original, port, inputs=x) holds both modules: narrow(c) runs both, as narrow(c, reference=...)
    does."""
    torch.manual_seed(0)
    original = nn.Sequential(*[Block() for _ in range(2)]).eval()
    port = nn.Sequential(*[PortedBlock() for _ in range(2)]).eval()
    port.load_state_dict(original.state_dict())
    c = nbtrace.compare(original, port, inputs=torch.randn(2, 8, 16))
    first = nbtrace.narrow(c).first
    assert first.port.name == "gelu" and first.reference.name == "gelu" and first.reference.source.file == __file__


def test_a_comparison_without_a_live_port_asks_for_one(tmp_path):
    # both folders measure their rounding: from unmeasured files the verdict stops at "unresolved" and names no
    # call to narrow
    original, port, _ = _readme(tmp_path, measure_rounding=True)
    with nbtrace.trace(port, debug_path=tmp_path / "port", use_repr=False, do_prune_layers=False,
                       measure_rounding=True):
        port(torch.randn(2, 8, 16))
    c = nbtrace.compare(tmp_path / "original", tmp_path / "port")
    assert c.first_divergence is not None and c.decided_by == "float64 twins"
    with pytest.raises(ValueError, match="the port is not live: pass port="):
        nbtrace.narrow(c, reference=original)


def test_llama_rotary_bug_from_the_comparison_to_the_line(tmp_path):
    original = build_original()
    ids, mask = make_inputs()
    with nbtrace.trace(original, debug_path=tmp_path / "a", use_repr=False, do_prune_layers=False):
        original(input_ids=ids, attention_mask=mask, use_cache=False)
    c = nbtrace.compare(tmp_path / "a", TinyLlamaPort.from_original(original, {"rotary_k"}))
    assert c.first_divergence.module_path == f"{P}.layers.0.self_attn"
    first = nbtrace.narrow(c, reference=original).first
    assert "k_embed = (k * cos)" in first.reference.source.text
    assert "k = k.repeat_interleave" in first.port.source.text


def test_only_the_port_live_names_where_it_rounds_to_a_coarser_dtype(tmp_path):
    class HalfGelu(Block):  # the tanh gelu computed in float16 inside a float32 block
        def forward(self, x):  # back to x's dtype: replay runs the block in float64, float64 through the .half()
            return x + self.down(nn.functional.gelu(self.up(self.norm(x)).half(), approximate="tanh").to(x.dtype))

    # replayed against a folder without its twin, the port's own float16 rounding hides the tanh (unresolved); the
    # twins, float64 through the .half(), see it
    _, _, c = _readme(tmp_path, HalfGelu, measure_rounding="auto")
    assert c.decided_by == "float64 twins" and c.first_divergence.module_path == "Sequential.0"
    note = str(nbtrace.narrow(c))
    assert "rounds to a coarser dtype than the call's: Tensor.half to float16 at test_narrow_comparison.py:" in note
    _, _, faithful = _readme(tmp_path / "faithful")
    assert "coarser" not in str(nbtrace.narrow(faithful))
