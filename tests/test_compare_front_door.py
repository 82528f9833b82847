"""``nbtrace.compare``'s front door (nbtrace/diff/compare.py): each path takes its own keywords, and a keyword that
does not apply to the path taken is refused with a sentence naming it, never ignored."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import nbtrace


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj, self.drop = nn.Linear(8, 8), nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(x))


@pytest.fixture
def sides(tmp_path):
    torch.manual_seed(0)
    model, x = Tiny().eval(), torch.randn(2, 8)
    with torch.no_grad(), nbtrace.trace(model, debug_path=tmp_path / "a", use_repr=False):
        model(x)
    return model, x, tmp_path / "a"


@pytest.mark.parametrize("keyword, value, path", [
    ("replay", False, "two traces"),
    ("port_inputs", torch.ones(2, 8), "two traces"),
    ("check_cache", False, "two traces"),
    ("call", lambda port, x: port(x), "two traces"),
])
def test_two_traces_refuse_what_only_a_live_port_or_a_run_takes(sides, keyword, value, path):
    _, _, folder = sides
    with pytest.raises(ValueError, match=rf"^{keyword}= \(.*\) does not apply to a comparison of {path}; it applies"):
        nbtrace.compare(folder, folder, **{keyword: value})


def test_each_path_refuses_the_keywords_of_the_others(sides):
    model, x, folder = sides
    with pytest.raises(ValueError, match=r"^replay= .* does not apply to a comparison of two runs of several forwards"):
        nbtrace.compare([folder, folder], [folder, folder], replay=False)
    with pytest.raises(ValueError, match=r"^check_cache= .* does not apply to a comparison of a trace and the live port"):
        nbtrace.compare(folder, model, check_cache=True)
    with pytest.raises(ValueError, match=r"^port_inputs= .* does not apply to a comparison of a trace and the live port"):
        nbtrace.compare(folder, model, port_inputs=x)
    with pytest.raises(ValueError, match=r"^check_cache= .* does not apply to a comparison of two live modules"):
        nbtrace.compare(model, model, inputs=x, check_cache=False)
    with pytest.raises(ValueError, match="give one of inputs_map, call or port_inputs, not call and port_inputs"):
        nbtrace.compare(model, model, inputs=x, port_inputs=x, call=lambda port, x: port(x))
    with pytest.raises(TypeError, match="unexpected keyword argument 'inputmap'"):
        nbtrace.compare(folder, model, inputmap={})


def test_every_path_still_answers(sides):
    """The keywords each path takes reach it: the same module agrees with itself on every path."""
    model, x, folder = sides
    assert nbtrace.compare(folder, folder).verdict == "agree"
    assert nbtrace.compare([folder, folder], [folder, folder], check_cache=False).verdict == "agree"
    assert nbtrace.compare(folder, model, replay=False).verdict == "agree"
    both = nbtrace.compare(model, model, inputs=x, port_inputs={"x": x})
    assert both.verdict == "agree" and both.replay.both_live
