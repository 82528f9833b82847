"""The TraceView's gradient plot in headless Chromium (no Jupyter): a trace of tests/models/backward_models.py recorded
with backward=True, its ES module mounted with a model whose ``set`` writes the Python TraceView's traits (as the
kernel would), so a click on a point is read back from ``view.selected`` in Python. Also the saved HTML file, opened
from disk, and a comparison's plot with both sides. Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import re

import pytest
import torch
from playwright.sync_api import Page, expect

import nbtrace
from nbtrace.notebook.view import CSS, ESM, TraceView
from tests.models.backward_models import build, train_step

MOUNT = """async ([esm, css, state]) => {
  const handlers = {};
  const emit = (event, ...args) => (handlers[event] || []).slice().forEach((f) => f(...args));
  const model = {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; emit("change:" + k); },
    save_changes: () => window.pySave(state.selected_row, state.selected),
    send: (msg) => window.pyDetail(msg.row).then((reply) => emit("msg:custom", reply)),
    on: (event, f) => { (handlers[event] ||= []).push(f); },
    off: (event, f) => { handlers[event] = (handlers[event] || []).filter((g) => g !== f); },
  };
  window.__python_sets = (k, v) => { state[k] = v; emit("change:" + k); };
  const style = document.createElement("style");
  style.textContent = css;
  document.head.append(style);
  const mod = await import(URL.createObjectURL(new Blob([esm], { type: "text/javascript" })));
  const el = document.createElement("div");
  el.style.width = "1100px";
  document.body.append(el);
  await mod.default.render({ model, el });
}"""


def mount(page: Page, view: TraceView) -> None:
    """Render ``view`` into a blank page; the page's ``save_changes`` sets the Python view's selection (what the
    kernel does with the synced traits) and its detail requests are answered by ``view.detail``."""

    def save(row: int, path: str) -> None:
        with view.hold_trait_notifications():
            view.selected_row = row
            view.selected = path

    page.expose_function("pySave", save)
    page.expose_function("pyDetail", lambda row: {"type": "detail", "row": row, "detail": view.detail(row)})
    page.set_content("<!doctype html><html><body style='margin:8px'></body></html>")
    names = ("payload", "selected", "selected_row", "filter", "visible_rows", "gradients")
    state = {k: getattr(view, k) for k in names}
    page.evaluate(MOUNT, [ESM, CSS, state])


def traced(folder, bug: str | None = None, seed: int = 0, **kwargs):
    torch.manual_seed(seed)
    model = build(seed=seed, bug=bug)
    kwargs.setdefault("measure_rounding", False)
    with nbtrace.trace(model, folder, backward=True, **kwargs) as rec:
        train_step(model, seed=seed, bug=bug)
    return rec.trace


@pytest.fixture(scope="module")
def detached(tmp_path_factory):
    return traced(tmp_path_factory.mktemp("detach"), "detach_residual", do_prune_layers=False)


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    new_page = context.new_page()
    errors: list[str] = []
    new_page.on("pageerror", lambda e: errors.append(str(e)))
    yield new_page
    context.close()
    assert not errors, errors


def test_click_on_a_point_selects_its_layer_in_python(page, detached, artifacts):
    view = TraceView(detached)
    mount(page, view)
    plot = page.locator(".nbt-gradients")
    expect(plot).to_be_visible()
    expect(plot.locator(".nbt-gp-summary")).to_contain_text("gradient norms across layers")
    sent = plot.locator('.nbt-gp-pt[data-kind="sent"]')
    expect(sent).to_have_count(3)
    point = plot.locator('.nbt-gp-pt[data-kind="sent"][data-path="TinyTrainLM.layers.1"]')
    point.hover()
    expect(plot.locator(".nbt-gp-readout")).to_contain_text("layers.1 · sent to its input")
    point.click()
    expect(point).to_have_class(re.compile(r"\bnbt-gp-on\b"))
    row = page.locator('.nbt-row[data-path="TinyTrainLM.layers.1"]')
    expect(row).to_have_attribute("aria-selected", "true")
    expect(page.locator(".nbt-detail .nbt-d-path")).to_contain_text("layers.1")
    assert view.selected == "TinyTrainLM.layers.1"
    # its forward and backward side by side, and the gradients of every parameter under it
    side = page.locator(".nbt-detail .nbt-d-backward")
    expect(side.locator(".nbt-fb-row").first).to_contain_text("out: reached")
    expect(side.locator(".nbt-fb-row").nth(1)).to_contain_text("in args.0: sent")
    expect(side.locator(".nbt-fb-params summary")).to_contain_text("parameter gradients under this module: 9")
    side.locator(".nbt-fb-params summary").click()
    expect(side.locator(".nbt-fb-param").first).to_contain_text("input_layernorm.weight")  # in the order called
    expect(side.locator(".nbt-fb-param").nth(1)).to_contain_text("self_attn.q_proj.weight")
    assert view.selected_node is detached["TinyTrainLM.layers.1"]
    # the vanishing drop is drawn where it is: layer 1's "sent" point lies well below its "arrived" point
    ys = {kind: float(plot.locator(f'.nbt-gp-pt[data-kind="{kind}"][data-path="TinyTrainLM.layers.1"]')
                      .get_attribute("cy")) for kind in ("arrived", "sent")}
    assert ys["sent"] > ys["arrived"] + 20  # SVG y grows downwards
    page.screenshot(path=str(artifacts / "esm_gradient_plot.png"), full_page=True)
    # Python selects another layer: the plot rings its point
    view.selected = "TinyTrainLM.layers.2"
    page.evaluate("([k, v]) => window.__python_sets(k, v)", ["selected_row", view.selected_row])
    expect(plot.locator('.nbt-gp-pt.nbt-gp-on[data-path="TinyTrainLM.layers.2"]')).to_have_count(4)
    expect(point).not_to_have_class(re.compile(r"\bnbt-gp-on\b"))


def test_no_plot_without_a_backward(page, tmp_path):
    model = build(seed=0)
    with nbtrace.trace(model, tmp_path, measure_rounding=False) as rec:
        model(torch.zeros(1, 4, dtype=torch.long))
    view = TraceView(rec.trace)
    assert view.gradients == ""
    mount(page, view)
    expect(page.locator(".nbt-row").first).to_be_visible()
    expect(page.locator(".nbt-gradients")).to_be_hidden()


def test_comparison_shows_both_sides_and_the_backward_verdict(page, tmp_path, artifacts):
    # with their float64 twins (the default), which decide where the backward parts ways
    reference = traced(tmp_path / "a", do_prune_layers=False, measure_rounding=True)
    port = traced(tmp_path / "b", "detach_residual", do_prune_layers=False, measure_rounding=True)
    view = TraceView(nbtrace.compare(reference, port))
    mount(page, view)
    plot = page.locator(".nbt-gradients")
    expect(plot.locator('.nbt-gp-pt[data-side="a"][data-kind="sent"]')).to_have_count(3)
    expect(plot.locator('.nbt-gp-pt[data-side="b"][data-kind="sent"]')).to_have_count(3)
    expect(plot.locator(".nbt-gp-legend").first).to_contain_text("b: sent to its input")
    plot.locator('.nbt-gp-pt[data-side="b"][data-kind="parameters"][data-path="TinyTrainLM.layers.0"]').click()
    assert view.selected == "TinyTrainLM.layers.0"  # b's point selects the call of a it was paired with
    verdict = plot.locator(".nbt-gp-verdict")
    expect(verdict).to_contain_text("backward diverges")
    expect(verdict).to_contain_text("the backward differs first at TinyTrainLM.layers.1")
    expect(plot.locator(".nbt-gp-vmark.nbt-gp-v-diverge")).to_have_count(1)
    verdict.locator(".nbt-gp-go").click()
    expect(page.locator('.nbt-row[data-path="TinyTrainLM.layers.1"]')).to_have_attribute("aria-selected", "true")
    assert view.selected == "TinyTrainLM.layers.1"
    # the pane puts b's gradient norms beside a's: the cut layer sends on a quarter of what the reference's does
    side = page.locator(".nbt-detail .nbt-d-backward")
    expect(side.locator("th").nth(3)).to_have_text("‖grad‖ b")
    sent = side.locator(".nbt-fb-row").nth(1).locator("td")
    expect(sent.nth(0)).to_have_text("in args.0: sent")
    a_sent, b_sent = float(sent.nth(2).inner_text()), float(sent.nth(3).inner_text())
    assert 0.2 < b_sent / a_sent < 0.35, (a_sent, b_sent)
    page.screenshot(path=str(artifacts / "esm_gradient_plot_compare.png"), full_page=True)


def test_saved_page_draws_and_selects(page, detached, tmp_path, artifacts):
    target = nbtrace.save_html(detached, tmp_path / "grads.html")
    page.goto(target.resolve().as_uri())
    plot = page.locator(".nbt-gradients")
    expect(plot.locator('.nbt-gp-pt[data-kind="arrived"]')).to_have_count(3)
    plot.locator('.nbt-gp-pt[data-kind="parameters"][data-path="TinyTrainLM.layers.2"]').click()
    expect(page.locator('.nbt-row[data-path="TinyTrainLM.layers.2"]')).to_have_attribute("aria-selected", "true")
    page.screenshot(path=str(artifacts / "html_gradient_plot.png"), full_page=True)


def test_saved_page_of_several_forwards_swaps_the_plot_with_the_step(page, tmp_path):
    model = build(seed=0)
    with nbtrace.trace(model, tmp_path / "run", backward=True, measure_rounding=False) as rec:
        train_step(model)  # forward 0: a training step
        with torch.no_grad():
            model(torch.zeros(1, 4, dtype=torch.long))  # forward 1: no backward
    target = nbtrace.save_html(TraceView(rec), tmp_path / "steps.html")
    page.goto(target.resolve().as_uri())
    plot = page.locator(".nbt-gradients")
    expect(plot.locator(".nbt-gp-pt").first).to_be_visible()
    page.locator(".nbt-step").nth(1).click()
    expect(plot).to_be_hidden()
    page.locator(".nbt-step").nth(0).click()
    expect(plot.locator(".nbt-gp-pt").first).to_be_visible()


def test_layers_pruned_from_the_files_are_drawn_and_not_picked(page, tmp_path):
    view = TraceView(traced(tmp_path, "detach_residual"))  # the default prunes layer 1 of 3
    mount(page, view)
    hidden = page.locator('.nbt-gp-pt[data-kind="sent"][data-path="TinyTrainLM.layers.1"]')
    expect(hidden).to_have_class(re.compile(r"\bnbt-gp-nopick\b"))
    expect(page.locator(".nbt-gp-pt.nbt-gp-on")).to_have_count(0)  # nothing selected: no point ringed
    hidden.hover()
    expect(page.locator(".nbt-gp-readout")).to_contain_text("pruned from the files")
    hidden.click()
    assert view.selected == ""


def test_a_gradient_that_overflows_is_marked_and_selects_its_layer(page, tmp_path, artifacts):
    from tests.test_gradient_layers import _Stack

    torch.manual_seed(0)
    model = _Stack()
    with nbtrace.trace(model, tmp_path, backward=True, measure_rounding=False, do_prune_layers=False) as rec:
        model(torch.randn(2, 8, requires_grad=True)).pow(2).sum().backward()
    view = TraceView(rec.trace)
    mount(page, view)
    marks = page.locator(".nbt-gp-nan")
    expect(marks).to_have_count(3)
    mark = page.locator('.nbt-gp-nan[data-kind="sent"][data-path="_Stack.layers.1"]')
    mark.hover()
    expect(page.locator(".nbt-gp-readout")).to_contain_text("layers.1 · sent to its input: NaN or inf")
    mark.click()
    assert view.selected == "_Stack.layers.1"
    expect(mark).to_have_class(re.compile(r"\bnbt-gp-on\b"))
    sent = page.locator(".nbt-detail .nbt-d-backward .nbt-fb-row").nth(1)
    expect(sent).to_contain_text("NaN/inf")  # what layer 1 sent on, in the pane too
    page.screenshot(path=str(artifacts / "esm_gradient_plot_nonfinite.png"), full_page=True)
