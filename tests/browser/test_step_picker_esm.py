"""TraceView's step picker (several forwards: the steps of generate) in headless Chromium, with a mock
anywidget model whose kernel side is the real Python TraceView: a step picked in the page goes to
``view.step``, and the new step's tree comes back as the payload, as in Jupyter."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

import nbtrace
from nbtrace.notebook.view import CSS, ESM, TraceView
from tests.models.generation import ROOT, Bug, build_reference, make_port, make_prompt, trace_generate

TRAITS = ("payload", "selected", "selected_row", "filter", "visible_rows", "step", "steps")
ATTN = f"{ROOT}.model.layers.1.self_attn"

MOUNT = """async ([esm, css, state]) => {
  const handlers = {};
  const log = (window.__log = []);
  const emit = (event, ...args) => (handlers[event] || []).slice().forEach((f) => f(...args));
  window.__python_sets = (changes) => {
    for (const [k, v] of Object.entries(changes)) state[k] = v;
    for (const k of Object.keys(changes)) emit("change:" + k);
  };
  let dirty = {};
  const model = {
    get: (k) => state[k],
    set: (k, v) => { state[k] = v; dirty[k] = v; log.push(["set", k, v]); emit("change:" + k); },
    save_changes: () => {
      log.push(["save_changes"]);
      const sent = dirty;
      dirty = {};
      window.pyTraits(sent).then(window.__python_sets);
    },
    send: (msg) => window.pyDetail(msg.row).then((reply) => emit("msg:custom", reply)),
    on: (event, f) => { (handlers[event] ||= []).push(f); },
    off: (event, f) => { handlers[event] = (handlers[event] || []).filter((g) => g !== f); },
  };
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
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t0;
}"""


class Kernel:
    """The Python side of the mock: applies what the page saved to the view, returns the traits that changed."""

    def __init__(self, page: Page) -> None:
        self.view: TraceView | None = None
        page.expose_function("pyTraits", self.traits)
        page.expose_function("pyDetail", self.detail)

    def traits(self, saved: dict) -> dict:
        """As ipywidgets applies a front end's update: every trait set, then the observers run."""
        assert self.view is not None
        with self.view.hold_trait_notifications():
            for name, value in saved.items():
                setattr(self.view, name, value)
        now = {name: getattr(self.view, name) for name in TRAITS}
        return {name: value for name, value in now.items() if name not in saved or saved[name] != value}

    def detail(self, row: int) -> dict:
        assert self.view is not None
        return {"type": "detail", "row": row, "detail": self.view.detail(row)}


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    new_page = context.new_page()
    errors: list[str] = []
    new_page.on("pageerror", lambda e: errors.append(str(e)))
    new_page.kernel = Kernel(new_page)
    yield new_page
    context.close()
    assert not errors, errors


def mount(page: Page, view: TraceView) -> float:
    page.kernel.view = view
    page.set_content("<!doctype html><html><body style='margin:8px'></body></html>")
    return page.evaluate(MOUNT, [ESM, CSS, {name: getattr(view, name) for name in TRAITS}])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    reference, prompt = build_reference(), make_prompt()
    root = tmp_path_factory.mktemp("picker")
    rec = trace_generate(reference, prompt, 4, root / "a")
    trace_generate(make_port(reference, Bug.KV_STALE), prompt, 4, root / "b")
    return rec, root / "a", root / "b"


def row(page: Page, path: str):
    return page.locator(f'.nbt-row[data-path="{path}"]')


def test_a_run_gets_a_picker_and_each_step_its_own_tree(page, runs, artifacts):
    rec, _, _ = runs
    view = TraceView(rec)
    mount(page, view)
    bar = page.locator(".nbt-stepbar")
    expect(bar).to_be_visible()
    expect(bar.locator(".nbt-step")).to_have_count(4)
    token = rec.traces[0].sidecar["generation"]["tokens"][0]
    expect(bar.locator(".nbt-step-label")).to_have_text(f"step 0 of 4 · 8 positions fed · picked {token}")
    expect(bar.locator('.nbt-step[data-step="0"]')).to_have_class("nbt-step nbt-step-long nbt-step-on")
    embed = row(page, f"{ROOT}.model.embed_tokens")
    expect(embed.locator(".nbt-out")).to_have_text("1×8×64 float32")
    row(page, f"{ROOT}.model.layers.1").locator(".nbt-twisty").click()
    row(page, ATTN).click()
    bar.locator('.nbt-step[data-step="2"]').click()
    expect(bar.locator(".nbt-step-label")).to_contain_text("step 2 of 4 · 1 position fed")
    expect(embed.locator(".nbt-out")).to_have_text("1×1×64 float32")  # step 2's tree came back
    assert view.step == 2 and view.selected == ATTN
    expect(row(page, ATTN)).to_have_attribute("aria-selected", "true")  # the same module, in step 2
    expect(page.locator(".nbt-detail .nbt-d-shape").first).to_contain_text("[1, 1, 64]")
    bar.focus()
    page.keyboard.press("ArrowRight")
    expect(bar.locator(".nbt-step-label")).to_contain_text("step 3 of 4")
    expect(bar.locator(".nbt-step-go").last).to_be_disabled()
    assert view.step == 3
    page.locator(".nbt-root").screenshot(path=artifacts / "esm_step_picker_run.png")


def test_a_step_comparison_colours_each_step_by_its_verdict(page, runs, artifacts):
    _, a, b = runs
    view = TraceView(nbtrace.compare(a, b))
    mount(page, view)
    cells = page.locator(".nbt-step")
    expect(cells).to_have_count(4)
    classes = cells.evaluate_all("cs => cs.map(c => c.className)")
    assert [c.split()[1] for c in classes] == ["nbt-step-match", "nbt-step-first", "nbt-step-diverged",
                                               "nbt-step-diverged"]
    label = page.locator(".nbt-step-label")
    expect(label).to_contain_text("step 1 of 4 · 1 position fed · both picked")
    expect(label).to_contain_text("first divergence: model.layers.1.self_attn")
    expect(row(page, ATTN)).to_have_attribute("aria-selected", "true")
    expect(page.locator(".nbt-chip-first")).to_contain_text("self_attn")
    page.locator(".nbt-root").screenshot(path=artifacts / "esm_step_picker_compare.png")
    page.locator(".nbt-step-go").first.click()  # ◀: the prefill
    expect(label).to_contain_text("step 0 of 4 · 8 positions fed")
    expect(page.locator(".nbt-rows .nbt-st-first")).to_have_count(0)
    expect(page.locator(".nbt-rows .nbt-st-match").first).to_be_visible()
    cells.nth(2).click()  # where the stale cache is read
    expect(page.locator(".nbt-chip-first")).to_contain_text("self_attn")
    assert view.step == 2


def test_python_sets_the_step_and_a_single_trace_has_no_picker(page, runs):
    rec, _, _ = runs
    view = TraceView(rec)
    mount(page, view)
    before = {name: getattr(view, name) for name in TRAITS}
    view.step = 3
    changed = {name: getattr(view, name) for name in TRAITS if getattr(view, name) != before[name]}
    page.evaluate("(c) => window.__python_sets(c)", changed)
    expect(page.locator(".nbt-step-label")).to_contain_text("step 3 of 4")
    expect(page.locator('.nbt-step[data-step="3"]')).to_have_class("nbt-step nbt-step-on")
    assert not [e for e in page.evaluate("window.__log") if e[0] == "set"]  # not echoed back
    mount(page, TraceView(rec.trace))
    expect(page.locator(".nbt-stepbar")).to_be_hidden()
    expect(row(page, ROOT)).to_be_visible()


def test_a_thousand_steps_open_at_once(page, runs):
    facts = {"n": 1000, "first": -1, "input": [16] + [1] * 999, "token": [str(i % 256) for i in range(1000)],
             "b_token": None, "status": None, "where": None, "words": {}}
    view = TraceView(runs[0].trace)  # the tree of one step; the picker gets a thousand
    page.kernel.view = view
    page.set_content("<!doctype html><html><body style='margin:8px'></body></html>")
    state = {name: getattr(view, name) for name in TRAITS}
    state["steps"] = json.dumps(facts)
    took = page.evaluate(MOUNT, [ESM, CSS, state])
    expect(page.locator(".nbt-step")).to_have_count(1000)
    print(f"\npicker of 1,000 steps: first paint {took:.0f} ms after render()")
    assert took < 1000
