"""TraceView of a comparison with a tensor-parallel run, in headless Chromium: the detail pane of the
first divergence says how its tensors were reassembled and which rank's shard differs."""

from __future__ import annotations

from playwright.sync_api import expect

import nbtrace
from nbtrace.notebook.view import TraceView
from tests.browser.test_trace_view_esm import expect_selected, mount, page, row  # noqa: F401 (page: a fixture)
from tests.tp_runs import single_traces, tp_run


def test_the_detail_pane_names_the_rank_whose_shard_differs(page, tmp_path_factory):  # noqa: F811
    run, single = tp_run(2, tmp_path_factory), single_traces(tmp_path_factory)
    mount(page, TraceView(nbtrace.compare(single["decoder"], run["dtensor_shard"])))
    first = row(page, "TinyDecoder.layers.0.mlp.up_proj")
    expect_selected(first)
    ranks = page.locator(".nbt-d-compare .nbt-d-ranks")
    expect(ranks).to_contain_text("input args.0: Replicate() (DTensor)")
    expect(ranks).to_contain_text("output out: Shard(2) (DTensor); only rank 1's shard differs")
