"""A file from nbtrace.save_html, opened in Chromium from disk (file://) with every network request blocked.

Each page is opened by ``offline``: a request for anything but the file itself is aborted and recorded,
and the test fails on any (and on a script error or a dialog, which a hostile name could raise).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import torch
from playwright.sync_api import Page, expect

import nbtrace
from nbtrace.notebook import html_file
from tests.models.generation import ROOT, Bug, build_reference, make_port, make_prompt, trace_generate
from tests.models.widget_models import demo_trace, record, synthetic_trace
from tests.test_html_file import HOSTILE, Hostile, blocks

LUMINANCE = """(el) => {
  const [r, g, b] = getComputedStyle(el).backgroundColor.match(/[\\d.]+/g).map(Number);
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}"""


@pytest.fixture
def offline(browser):
    """``open(file, dark=False)`` -> a Page showing the file; nothing else may be requested."""
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    other: list[str] = []
    errors: list[str] = []

    def open_file(file: Path, dark: bool = False) -> Page:
        page = context.new_page()
        url = file.resolve().as_uri()

        def route(request_route):
            if request_route.request.url == url:
                request_route.continue_()
            else:
                other.append(request_route.request.url)
                request_route.abort()

        page.route("**/*", route)
        page.on("request", lambda request: request.url == url or other.append(request.url))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.on("dialog", lambda dialog: (errors.append(f"dialog: {dialog.message}"), dialog.dismiss()))
        page.emulate_media(color_scheme="dark" if dark else "light")
        page.goto(url)
        return page

    yield open_file
    context.close()
    assert not other, f"the page asked for {other}"
    assert not errors, errors


def row(page: Page, path: str):
    return page.locator(f'.nbt-row[data-path="{path}"]')


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_trace(tmp_path_factory.mktemp("demo"))


def test_a_saved_trace_is_explored_as_in_the_notebook(offline, demo, tmp_path, monkeypatch):
    monkeypatch.setattr(html_file, "DETAIL_CHUNK", 8)  # details in four chunks: each read when first needed
    page = offline(nbtrace.save_html(demo, tmp_path / "demo.html", values=True))
    expect(page.locator(".nbt-title")).to_contain_text(f"DemoLM · {len(demo)} calls · FULL")
    mlp = row(page, "DemoLM.layers.0.mlp")
    mlp.click()
    expect(mlp).to_have_attribute("aria-selected", "true")
    detail = page.locator(".nbt-detail")
    expect(detail.locator(".nbt-d-path")).to_have_text("DemoLM.layers.0.mlp")
    expect(detail.locator(".nbt-d-meta")).to_contain_text("call 1 of 1 · depth 2")
    expect(detail.locator(".nbt-d-shape").first).to_contain_text("[1, 16, 64] float32")
    # a leaf's printed values came with the file
    row(page, "DemoLM.embed_tokens").click()
    expect(detail.locator(".nbt-d-values summary").first).to_be_visible()
    expect(detail.locator(".nbt-d-values pre").first).to_contain_text("[")
    # keys move the selection, the filter narrows the tree
    page.keyboard.press("ArrowDown")
    expect(detail.locator(".nbt-d-path")).not_to_have_text("DemoLM.embed_tokens")
    page.locator(".nbt-filter").fill("down_proj")
    matches = sum(node.module_path.endswith("down_proj") for node in demo.nodes())
    expect(page.locator(".nbt-count")).to_have_text(f"{matches} matches")
    expect(page.locator(".nbt-label.nbt-match")).to_have_count(matches)
    page.locator(".nbt-rows .nbt-row", has=page.locator(".nbt-match")).first.click()
    expect(detail.locator(".nbt-d-path")).to_contain_text("down_proj")
    page.screenshot(path=tmp_path / "demo-light.png")


def test_light_and_dark_system_themes(offline, demo, tmp_path):
    file = nbtrace.save_html(demo, tmp_path / "demo.html")
    light = offline(file)
    expect(light.locator(".nbt-root")).not_to_have_class(re.compile("nbt-dark"))
    assert light.locator("body").evaluate(LUMINANCE) > 200
    dark = offline(file, dark=True)
    expect(dark.locator(".nbt-root")).to_have_class(re.compile("nbt-dark"))
    assert dark.locator("body").evaluate(LUMINANCE) < 60 and dark.locator(".nbt-root").evaluate(LUMINANCE) < 60
    dark.screenshot(path=tmp_path / "demo-dark.png")
    light.emulate_media(color_scheme="dark")  # the system theme changes while the page is open
    expect(light.locator(".nbt-root")).to_have_class(re.compile("nbt-dark"))


def test_a_hostile_module_name_renders_as_text(offline, tmp_path):
    trace = record(Hostile(), torch.ones(1, 4), note=HOSTILE, folder=tmp_path / "hostile")
    page = offline(nbtrace.save_html(trace, tmp_path / "hostile.html", values=True))
    row(page, "Hostile").click()
    expect(page.locator(".nbt-detail .nbt-d-others")).to_contain_text(f"in kwargs.note = {HOSTILE!r}")
    label = page.locator(".nbt-label", has_text=HOSTILE)
    expect(label).to_have_text(HOSTILE)
    label.click()
    expect(page.locator(".nbt-detail .nbt-d-path")).to_have_text(f"Hostile.{HOSTILE}")
    assert page.locator("img").count() == 0 and page.title() == "nbtrace · Hostile"


def test_twenty_thousand_calls_open_quickly(offline, tmp_path):
    trace = synthetic_trace(nan_layer=321)
    file = nbtrace.save_html(trace, tmp_path / "big.html")
    started = time.perf_counter()
    page = offline(file)
    page.locator(".nbt-rows .nbt-row").first.wait_for()
    seconds = time.perf_counter() - started
    print(f"\n{len(trace)} calls: {file.stat().st_size / 1e6:.2f} MB file, first rows in {seconds:.2f} s")
    assert seconds < 10  # about 1 s here; generous for a loaded CI machine
    page.locator(".nbt-chip-nan").click()  # the first NaN, deep in the tree, with its details
    expect(page.locator(".nbt-detail .nbt-d-path")).to_have_text("BigMoE.layers.321.mlp.experts.3.down_proj")
    expect(page.locator(".nbt-detail .nbt-badge-nan")).to_be_visible()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    reference, prompt = build_reference(), make_prompt()
    root = tmp_path_factory.mktemp("generate")
    rec = trace_generate(reference, prompt, 3, root / "a")
    trace_generate(make_port(reference, Bug.KV_STALE), prompt, 3, root / "b")
    return rec, root / "a", root / "b"


def test_the_steps_of_a_traced_generate(offline, runs, tmp_path):
    rec, _, _ = runs
    page = offline(nbtrace.save_html(rec, tmp_path / "run.html"))
    bar = page.locator(".nbt-stepbar")
    expect(bar.locator(".nbt-step")).to_have_count(3)
    expect(bar.locator(".nbt-step-label")).to_contain_text("step 0 of 3 · 8 positions fed")
    embed = row(page, f"{ROOT}.model.embed_tokens")
    embed.click()
    expect(page.locator(".nbt-detail .nbt-d-shape").first).to_contain_text("[1, 8]")
    bar.locator('.nbt-step[data-step="2"]').click()
    expect(bar.locator(".nbt-step-label")).to_contain_text("step 2 of 3 · 1 position fed")
    expect(embed.locator(".nbt-out")).to_have_text("1×1×64 float32")  # step 2's own tree
    expect(embed).to_have_attribute("aria-selected", "true")  # the same call, in step 2
    expect(page.locator(".nbt-detail .nbt-d-shape").first).to_contain_text("[1, 1]")  # and its details
    bar.focus()
    page.keyboard.press("ArrowLeft")
    expect(bar.locator(".nbt-step-label")).to_contain_text("step 1 of 3")


def test_a_comparison_shows_its_verdict_banner_and_evidence(offline, runs, tmp_path):
    _, a, b = runs
    file = nbtrace.save_html(nbtrace.compare(a, b), tmp_path / "compare.html")
    data = blocks(file.read_text(encoding="utf-8"))
    view = json.loads(data["nbt-view"])
    verdict = json.loads(data[f"nbt-payload-{view['step']}"])["compare"]["verdict"]
    page = offline(file)
    banner = page.locator(".nbt-verdict")
    expect(banner.locator(".nbt-verdict-badge")).to_have_text(f"{verdict['mark']} {verdict['word']}")
    facts = json.loads(view["steps"])
    cells = page.locator(".nbt-stepbar .nbt-step")
    for k, status in enumerate(facts["status"]):
        expect(cells.nth(k)).to_have_class(re.compile(f"nbt-step-{status}"))
    if verdict["divergence"] is None:
        return
    expect(banner).to_contain_text(verdict["divergence"]["module_path"])
    banner.locator(".nbt-chip-first").click()
    detail = page.locator(".nbt-detail")
    expect(detail.locator(".nbt-d-path")).to_have_text(verdict["divergence"]["module_path"])
    expect(detail.locator(".nbt-d-compare .nbt-d-reason")).to_have_text(verdict["divergence"]["reason"])
    page.screenshot(path=tmp_path / "compare-light.png")
