"""The detail pane of a narrowed call in headless Chromium (the ES module with a mock model whose kernel is the
real Python TraceView): the operations of both sides listed, the first diverging one marked with its source
line. Screenshot: operations_esm.png in the test's temporary folder."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

import nbtrace
from nbtrace.notebook.view import TraceView
from tests.browser.test_trace_view_esm import (
    expect_selected,
    mount,
    page,  # noqa: F401 (a fixture)
    row,
)
from tests.models.precision import one_thread  # noqa: F401
from tests.test_narrow_comparison import _readme

pytestmark = pytest.mark.usefixtures("one_thread")


def _view(comparison) -> TraceView:
    view = TraceView(comparison, expand_depth=3)
    view.visible_rows = 30
    return view


def test_the_blamed_call_lists_its_operations_with_the_diverging_one_marked(page, tmp_path):  # noqa: F811
    original, _, c = _readme(tmp_path)
    nbtrace.narrow(c, reference=original)
    mount(page, _view(c))
    expect_selected(row(page, "Sequential.0"))
    pane = page.locator(".nbt-detail .nbt-d-compare")
    expect(pane.locator(".nbt-d-operation")).to_contain_text("gelu at test_narrow_comparison.py:")
    table = pane.locator(".nbt-op-table")
    expect(table.locator("tr.nbt-op")).to_have_count(10)  # 5 operations on each side
    marked = table.locator("tr.nbt-op-differs")
    expect(marked).to_have_count(2)
    expect(marked.first.locator(".nbt-op-name")).to_have_text("gelu")
    expect(marked.nth(1)).to_contain_text('approximate="tanh"')
    expect(marked.first.locator(".nbt-op-status")).to_have_text("differs here")
    background = marked.first.evaluate("r => getComputedStyle(r).backgroundColor")
    plain = table.locator("tr.nbt-op-agrees").first.evaluate("r => getComputedStyle(r).backgroundColor")
    assert background != plain  # the diverging operation stands out
    page.locator(".nbt-detail").screenshot(path=tmp_path / "operations_esm.png")


def test_a_call_not_narrowed_shows_no_operations(page, tmp_path):  # noqa: F811
    _, _, c = _readme(tmp_path)
    mount(page, _view(c))
    expect_selected(row(page, "Sequential.0"))
    expect(page.locator(".nbt-detail .nbt-d-reason")).to_be_visible()
    expect(page.locator(".nbt-detail .nbt-op-table")).to_have_count(0)
