"""A bad argument to a public function gets one sentence that names the argument and what it accepts."""

from __future__ import annotations

import pytest
import torch

import nbtrace
from nbtrace.demo import build_demo


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    model, inputs = build_demo()
    with nbtrace.trace(model, debug_path=tmp_path_factory.mktemp("demo")) as rec:
        model(**inputs)
    return rec.trace


@pytest.mark.parametrize("bad, shown", [(torch.randn(3), "a Tensor of shape (3,)"), (None, "None"), (42, "a int (42)")])
def test_compare_names_the_bad_side_and_what_it_accepts(trace, bad, shown):
    with pytest.raises(TypeError) as b_side:
        nbtrace.compare(trace, bad)
    message = str(b_side.value)
    assert message.startswith(f"compare: b is {shown}; it accepts a Trace, a trace file or folder")
    assert "nn.Module" in message and "\n" not in message
    with pytest.raises(TypeError, match=rf"^compare: a is {shown.replace('(', '[(]').replace(')', '[)]')}; "):
        nbtrace.compare(bad, trace)


def test_a_good_side_still_compares(trace):
    assert nbtrace.compare(trace, [trace]).agree  # a list is a run of forwards: still accepted
