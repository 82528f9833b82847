"""The TraceView ES module alone, in headless Chromium, with a mock anywidget model (no Jupyter).

The mock answers ``model.send({type: "detail"})`` through the real Python ``TraceView.detail``,
so the message protocol is exercised end to end, only without a kernel.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
from tests.models.core_models import CalledTwice, seeded
from playwright.sync_api import Page, expect
from tests.models.widget_models import FakeComparison, NanNet, demo_trace, record, synthetic_trace

from nbtrace.notebook.view import CSS, ESM, TraceView

MOUNT = """async ([esm, css, state]) => {
  const handlers = {};
  const log = (window.__log = []);
  const emit = (event, ...args) => (handlers[event] || []).slice().forEach((f) => f(...args));
  const model = {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; log.push(["set", k, v]); emit("change:" + k); },
    save_changes: () => log.push(["save_changes"]),
    send: (msg) => {
      log.push(["send", msg]);
      window.pyDetail(msg.row).then((reply) => emit("msg:custom", reply));
    },
    on: (event, f) => { (handlers[event] ||= []).push(f); },
    off: (event, f) => { handlers[event] = (handlers[event] || []).filter((g) => g !== f); },
  };
  // what the kernel does when Python changes a trait
  window.__python_sets = (k, v) => { state[k] = v; emit("change:" + k); };
  const style = document.createElement("style");
  style.textContent = css;
  document.head.append(style);
  const url = URL.createObjectURL(new Blob([esm], { type: "text/javascript" }));
  const mod = await import(url);
  const el = document.createElement("div");
  el.style.width = "1100px";
  document.body.append(el);
  const t0 = performance.now();
  window.__cleanup = await mod.default.render({ model, el });
  const built = performance.now() - t0;
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return { built, painted: performance.now() - t0 };
}"""


_MOUNTED: dict[int, TraceView] = {}  # page -> the view its mock model answers for


def mount(page: Page, view: TraceView, keep_page: bool = False) -> dict:
    """Render ``view``'s ES module into a blank page (the page as it is, with ``keep_page``) with a mock
    model; returns its timings (ms)."""
    if id(page) not in _MOUNTED:

        def detail(row: int, key: int = id(page)) -> dict:
            try:
                return {"type": "detail", "row": row, "detail": _MOUNTED[key].detail(row)}
            except IndexError as exc:
                return {"type": "detail", "row": row, "error": str(exc)}

        page.expose_function("pyDetail", detail)
    _MOUNTED[id(page)] = view
    if not keep_page:
        page.set_content("<!doctype html><html><body style='margin:8px'></body></html>")
    state = {name: getattr(view, name) for name in ("payload", "selected", "selected_row", "filter", "visible_rows")}
    return page.evaluate(MOUNT, [ESM, CSS, state])


def row(page: Page, path: str):
    return page.locator(f'.nbt-row[data-path="{path}"]')


def has_class(name: str) -> re.Pattern:
    return re.compile(rf"(^|\s){re.escape(name)}(\s|$)")


def expect_selected(locator) -> None:
    expect(locator).to_have_attribute("aria-selected", "true")


def log(page: Page) -> list:
    return page.evaluate("window.__log")


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    new_page = context.new_page()
    errors: list[str] = []
    new_page.on("pageerror", lambda e: errors.append(str(e)))
    yield new_page
    _MOUNTED.pop(id(new_page), None)
    context.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_trace(tmp_path_factory.mktemp("demo"))


def test_opens_two_levels_deep_and_expands_on_click(page, demo):
    mount(page, TraceView(demo))
    expect(row(page, "DemoLM")).to_be_visible()
    expect(row(page, "DemoLM.layers.0.mlp")).to_be_visible()  # depth 2: shown
    expect(row(page, "DemoLM.layers.0.mlp.up_proj")).to_have_count(0)  # depth 3: collapsed
    expect(page.locator(".nbt-gap")).to_have_text("… layers 1–2 pruned")
    row(page, "DemoLM.layers.0.mlp").locator(".nbt-twisty").click()
    expect(row(page, "DemoLM.layers.0.mlp.up_proj")).to_be_visible()
    expect(row(page, "DemoLM.layers.0.mlp")).to_have_attribute("aria-expanded", "true")
    row(page, "DemoLM.layers.0.mlp").locator(".nbt-twisty").click()
    expect(row(page, "DemoLM.layers.0.mlp.up_proj")).to_have_count(0)


def test_row_shows_name_output_stats_and_hover_path(page, demo):
    mount(page, TraceView(demo))
    q = row(page, "DemoLM.norm")
    expect(q.locator(".nbt-label")).to_have_text("norm")
    expect(q.locator(".nbt-out")).to_have_text("1×16×64 float32")
    expect(q.locator(".nbt-num").first).to_have_text("-0.049")
    expect(q.locator(".nbt-num").nth(1)).to_have_text("0.999")
    expect(q.locator(".nbt-name")).to_have_attribute("title", "DemoLM.norm")
    expect(q.locator(".nbt-bar")).to_have_count(1)


def test_click_selects_syncs_and_fetches_details(page, demo):
    mount(page, TraceView(demo))
    row(page, "DemoLM.layers.0.input_layernorm").click()
    expect_selected(row(page, "DemoLM.layers.0.input_layernorm"))
    entries = log(page)
    assert ["set", "selected", "DemoLM.layers.0.input_layernorm"] in entries and ["save_changes"] in entries
    assert any(e[0] == "set" and e[1] == "selected_row" for e in entries)
    assert ["send", {"type": "detail", "row": 4}] in entries
    pane = page.locator(".nbt-detail")
    expect(pane.locator(".nbt-d-path")).to_have_text("DemoLM.layers.0.input_layernorm")
    expect(pane.locator(".nbt-d-tensor")).to_have_count(2)
    expect(pane.locator(".nbt-d-stats").first).to_contain_text("min")
    pane.locator(".nbt-d-values summary").last.click()
    expect(pane.locator(".nbt-d-values pre").last).to_contain_text("tensor([[[")
    # a second click on the same row does not ask the kernel again
    sends = sum(1 for e in log(page) if e[0] == "send")
    row(page, "DemoLM.embed_tokens").click()
    row(page, "DemoLM.layers.0.input_layernorm").click()
    expect(pane.locator(".nbt-d-path")).to_have_text("DemoLM.layers.0.input_layernorm")
    assert sum(1 for e in log(page) if e[0] == "send") == sends + 1


def test_keyboard_moves_expands_and_collapses(page, demo):
    mount(page, TraceView(demo))
    row(page, "DemoLM.layers.0.self_attn").click()
    page.keyboard.press("ArrowRight")  # expand
    expect(row(page, "DemoLM.layers.0.self_attn.q_proj")).to_be_visible()
    page.keyboard.press("ArrowRight")  # into the first child
    expect_selected(row(page, "DemoLM.layers.0.self_attn.q_proj"))
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    expect_selected(row(page, "DemoLM.layers.0.self_attn.v_proj"))
    page.keyboard.press("ArrowUp")
    expect_selected(row(page, "DemoLM.layers.0.self_attn.k_proj"))
    page.keyboard.press("ArrowLeft")  # a leaf: to its parent
    expect_selected(row(page, "DemoLM.layers.0.self_attn"))
    page.keyboard.press("ArrowLeft")  # collapse
    expect(row(page, "DemoLM.layers.0.self_attn.q_proj")).to_have_count(0)
    page.keyboard.press("Enter")  # Enter toggles open again
    expect(row(page, "DemoLM.layers.0.self_attn.q_proj")).to_be_visible()
    assert ["set", "selected", "DemoLM.layers.0.self_attn.k_proj"] in log(page)


def test_filter_narrows_to_matches_and_ancestors(page, demo):
    mount(page, TraceView(demo))
    page.locator(".nbt-filter").fill("K_PROJ")
    expect(page.locator(".nbt-count")).to_have_text("2 matches")
    paths = lambda: page.locator(".nbt-rows .nbt-row").evaluate_all("rs => rs.map(r => r.dataset.path)")
    expect(page.locator(".nbt-rows .nbt-row")).to_have_count(7)
    assert paths() == ["DemoLM", "DemoLM.layers.0", "DemoLM.layers.0.self_attn", "DemoLM.layers.0.self_attn.k_proj",
                       "DemoLM.layers.3", "DemoLM.layers.3.self_attn", "DemoLM.layers.3.self_attn.k_proj"]
    expect(page.locator(".nbt-match")).to_have_count(2)
    assert ["set", "filter", "K_PROJ"] in log(page)
    page.evaluate("window.__python_sets('filter', 'lm_head')")  # Python sets view.filter
    expect(page.locator(".nbt-filter")).to_have_value("lm_head")
    expect(page.locator(".nbt-rows .nbt-row")).to_have_count(2)
    page.locator(".nbt-filter").fill("")
    expect(page.locator(".nbt-count")).to_have_text("16 of 32 rows")  # back to the opening state


def test_python_selection_reveals_and_scrolls(page, demo):
    view = TraceView(demo)
    mount(page, view)
    view.selected = "DemoLM.layers.3.mlp.down_proj"  # collapsed two levels down
    page.evaluate(f"window.__python_sets('selected_row', {view.selected_row})")
    target = row(page, "DemoLM.layers.3.mlp.down_proj")
    expect_selected(target)
    expect(target).to_be_in_viewport()
    expect(page.locator(".nbt-d-path")).to_have_text("DemoLM.layers.3.mlp.down_proj")
    assert not [e for e in log(page) if e[0] == "set"]  # a change from Python is not echoed back


def test_nan_error_and_repeated_calls_are_marked(page, tmp_path):
    nan = record(seeded(NanNet), -torch.ones(2, 6) * 5, folder=tmp_path / "nan")
    mount(page, TraceView(nan))
    expect(row(page, "NanNet.encoder.log").locator(".nbt-badge-nan")).to_have_text("first NaN/inf")
    expect(row(page, "NanNet.head").locator(".nbt-badge-nan")).to_have_text("NaN/inf")
    expect(row(page, "NanNet.encoder.log")).to_have_class(has_class("nbt-bad"))
    row(page, "NanNet.encoder").locator(".nbt-twisty").click()  # collapse: the parent still warns
    expect(row(page, "NanNet.encoder").locator(".nbt-badge-nan-below")).to_have_text("NaN/inf inside")
    page.locator(".nbt-chip-nan").click()
    expect_selected(row(page, "NanNet.encoder.log"))

    twice = record(seeded(CalledTwice), torch.ones(2, 4), folder=tmp_path / "twice")
    mount(page, TraceView(twice))
    expect(page.locator('.nbt-row[data-path="CalledTwice.act"] .nbt-times')).to_have_text(["×2", "×2"])


def test_twenty_thousand_rows_render_only_the_window(page):
    view = TraceView(synthetic_trace(nan_layer=321))
    timing = mount(page, view)
    print(f"\nES module, {len(view.trace)} calls: first rows painted {timing['painted']:.0f} ms after render()")
    assert timing["painted"] < 1000
    expect(page.locator(".nbt-count")).to_have_text(f"2,004 of {len(view.trace):,} rows")  # root and layers open
    rendered = page.locator(".nbt-rows .nbt-row").count()
    assert 0 < rendered < 80  # a window of rows, not the tree
    page.locator(".nbt-chip-nan").click()  # deep inside layer 321, collapsed
    target = row(page, "BigMoE.layers.321.mlp.experts.3.down_proj")
    expect(target).to_be_in_viewport()
    expect(page.locator(".nbt-detail .nbt-badge-nan")).to_be_visible()
    expect(page.locator(".nbt-detail")).to_contain_text("A SUMMARY trace holds no values")
    page.locator(".nbt-tree").evaluate("t => { t.scrollTop = t.scrollHeight; }")
    expect(row(page, "BigMoE.lm_head")).to_be_visible()
    assert page.locator(".nbt-rows .nbt-row").count() < 80


def test_comparison_starts_at_the_first_divergence(page, demo):
    view = TraceView(FakeComparison(demo, demo, "DemoLM.layers.3.self_attn.o_proj"))
    mount(page, view)
    first = row(page, "DemoLM.layers.3.self_attn.o_proj")
    expect_selected(first)
    expect(first).to_have_class(has_class("nbt-st-first"))
    expect(first).to_be_in_viewport()
    expect(first.locator(".nbt-badge-first")).to_have_text("first divergence")
    expect(page.locator(".nbt-d-compare")).to_contain_text("in b: DemoLM.layers.3.self_attn.o_proj")
    expect(page.locator(".nbt-d-compare")).to_contain_text("the difference is born here")
    expect(row(page, "DemoLM.layers.0.self_attn.q_proj")).to_have_count(0)  # collapsed, untouched
    expect(page.locator(".nbt-st-match").first).to_be_visible()


def test_cleanup_detaches_from_the_model(page, demo):
    mount(page, TraceView(demo))
    page.evaluate("window.__cleanup()")
    page.evaluate("window.__python_sets('filter', 'q_proj')")  # no view left to react: must not throw
    assert json.dumps(log(page))


def test_numbers_keep_three_significant_digits(page, demo):
    mount(page, TraceView(demo))
    shown = page.evaluate(
        """async (esm) => {
            const url = URL.createObjectURL(new Blob([esm], { type: "text/javascript" }));
            const { formatNumber } = await import(url);
            return [1, 0.99995, 12, 99.99, 1234.5, 0.0123, -1.5, 6.9e-4, 0, "nan", null].map(formatNumber);
        }""",
        ESM,
    )
    assert shown == ["1.00", "1.000", "12.0", "100", "1235", "0.012", "-1.50", "6.90e-4", "0", "nan", ""]
