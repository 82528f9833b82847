"""TraceView of a comparison in headless Chromium (the ES module with a mock model whose kernel is the real
Python TraceView): the porter of issue 9, clicked through as a porter would, in a light and a dark theme.
Screenshots: tests/artifacts/compare_esm_{light,dark}.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect
from tests.models.contract import porter_comparison
from tests.models.ports import P

from nbtrace.notebook.view import CSS, ESM, TraceView
from nbtrace.render.vocabulary import format_units
from tests.browser.test_trace_view_esm import MOUNT, expect_selected, mount, row  # noqa: F401
from tests.browser.test_trace_view_esm import page  # noqa: F401 (a fixture)

# JupyterLab 4's dark theme, as far as the widget reads it
DARK = """() => {
  document.body.dataset.jpThemeLight = "false";
  const vars = {"--jp-layout-color0": "#111", "--jp-layout-color1": "#212121", "--jp-layout-color2": "#424242",
    "--jp-ui-font-color1": "rgba(255,255,255,.87)", "--jp-ui-font-color2": "rgba(255,255,255,.54)",
    "--jp-ui-font-color3": "rgba(255,255,255,.38)", "--jp-border-color2": "#424242", "--jp-brand-color1": "#2196f3"};
  for (const [k, v] of Object.entries(vars)) document.documentElement.style.setProperty(k, v);
  document.body.style.background = "#111";
}"""

# the contrast ratio (WCAG 2) of an element's text against what is painted behind it
CONTRAST = """(el) => {
  const parse = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map((c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; })
    .reduce((s, c, k) => s + c * [0.2126, 0.7152, 0.0722][k], 0);
  let back = null;
  for (let n = el; n; n = n.parentElement) {
    const bg = parse(getComputedStyle(n).backgroundColor);
    if (bg.length === 3 || (bg.length === 4 && bg[3] > 0.9)) { back = bg.slice(0, 3); break; }
  }
  back = back || [255, 255, 255];
  const fg = parse(getComputedStyle(el).color);
  const alpha = fg.length === 4 ? fg[3] : 1;
  const text = fg.slice(0, 3).map((c, k) => alpha * c + (1 - alpha) * back[k]);
  const [hi, lo] = [lum(text), lum(back)].sort((a, b) => b - a);
  return (hi + 0.05) / (lo + 0.05);
}"""


@pytest.fixture(scope="module")
def porter(tmp_path_factory):
    return porter_comparison(tmp_path_factory.mktemp("porter"))


@pytest.fixture(scope="module")
def tolerance(tmp_path_factory):
    """The porter judged by a per-element tolerance (``rtol`` given): relative differences, no own vs inherited."""
    return porter_comparison(tmp_path_factory.mktemp("tolerance"), rtol=1e-5)


def open_view(comparison) -> TraceView:
    """The whole tree open, every row in the window."""
    view = TraceView(comparison, expand_depth=6)
    view.visible_rows = 50
    return view


def mount_dark(page: Page, view: TraceView) -> None:
    page.set_content("<!doctype html><html><body style='margin:8px'></body></html>")
    page.evaluate(DARK)
    mount(page, view, keep_page=True)


def test_the_porter_reads_the_verdict_and_its_evidence(page, porter, artifacts):
    view = open_view(porter)
    mount(page, view)
    banner = page.locator(".nbt-verdict")
    expect(banner.locator(".nbt-verdict-badge")).to_have_text("✗ diverge")
    expect(banner).to_contain_text(f"first divergence: {P}.layers.2.self_attn")
    expect(banner).to_contain_text("TinyLlamaPort.blocks.2.attn")
    expect(page.locator(".nbt-title")).to_contain_text("b: TinyLlamaPort")  # the header names b
    first = row(page, f"{P}.layers.2.self_attn")
    expect_selected(first)
    pane = page.locator(".nbt-detail .nbt-d-compare")
    expect(pane).to_contain_text("the difference is born here")
    expect(pane.locator(".nbt-d-reason")).to_have_text(porter.first_divergence.reason)
    expect(pane.locator(".nbt-d-evidence")).to_have_count(1)  # the blamed call's evidence is the verdict's: once
    expect(pane.locator(".nbt-d-evidence")).to_contain_text("float64 twins differ")  # both folders hold their twin
    born = porter.match_of(porter.first_divergence.node).difference  # all of it its own: nothing inherited
    expect(pane.locator(".nbt-d-difference")).to_contain_text(f"own {format_units(born.own)} · inherited 0 u")
    expect(pane.locator(".nbt-d-observed .nbt-ok-false")).to_have_text(["differs", "differs"])
    # judged against rounding, not by a per-element tolerance: none is shown as if it had decided
    expect(pane.locator(".nbt-d-observed")).not_to_contain_text("tolerance")
    page.locator(".nbt-legend summary").click()
    expect(page.locator(".nbt-legend")).to_contain_text("first divergence: where the difference is born")
    page.screenshot(path=artifacts / "compare_esm_light.png", full_page=True)


def test_the_difference_column_tells_the_o_proj_rows_apart(page, tolerance):
    porter = tolerance
    view = open_view(porter)
    mount(page, view)
    layer1 = row(page, f"{P}.layers.1.self_attn.o_proj")
    layer2 = row(page, f"{P}.layers.2.self_attn.o_proj")
    for target in (layer1, layer2):
        target.scroll_into_view_if_needed()
    texts = {k: r.locator(".nbt-diff-text").inner_text() for k, r in ((1, layer1), (2, layer2))}
    scores = {k: next(m for m in porter.matches if m.a.module_path == f"{P}.layers.{k}.self_attn.o_proj").score
              for k in (1, 2)}
    from nbtrace.render.vocabulary import format_number

    assert texts == {k: format_number(v) for k, v in scores.items()}
    widths = [r.locator(".nbt-diff-bar").evaluate("b => b.getBoundingClientRect().width") for r in (layer1, layer2)]
    assert widths[1] > 1.5 * widths[0]
    expect(page.locator(".nbt-columns .nbt-diff")).to_have_text("max rel diff")


def test_clicking_the_root_says_the_difference_is_inside(page, porter):
    view = open_view(porter)
    mount(page, view)
    page.locator(".nbt-tree").focus()
    page.keyboard.press("Home")
    expect_selected(row(page, "LlamaForCausalLM"))
    pane = page.locator(".nbt-detail .nbt-d-compare")
    expect(pane.locator(".nbt-d-situation")).to_have_text("its own tensors agree; a call inside it differs")
    expect(page.locator(".nbt-detail")).not_to_contain_text("largest relative difference: 0")
    page.locator(".nbt-verdict .nbt-chip-first").click()  # back to where it is born
    expect_selected(row(page, f"{P}.layers.2.self_attn"))


def test_b_s_tensors_are_shown_beside_a_s(page, porter):
    view = open_view(porter)
    mount(page, view)
    row(page, f"{P}.layers.2.self_attn.o_proj").click()
    box = page.locator('.nbt-d-tensor[data-arg="output out"]')
    expect(box.locator(".nbt-d-side-a")).to_have_text("a")
    expect(box.locator(".nbt-d-side-b")).to_have_text("b")
    expect(box.locator(".nbt-d-diffline")).to_contain_text("max_rel=")
    expect(box.locator(".nbt-d-file")).to_have_count(2)  # a's file and b's
    expect(box.locator(".nbt-d-file").last).to_contain_text("TinyLlamaPort.blocks.2.attn.out.linear_outputs")


def test_long_paths_wrap_at_dots_and_are_never_clipped(page, porter):
    view = open_view(porter)
    mount(page, view)
    page.set_viewport_size({"width": 900, "height": 800})
    for selector in (".nbt-detail .nbt-d-path", ".nbt-d-bpath", ".nbt-d-seen"):
        element = page.locator(selector).first
        expect(element).to_be_visible()
        assert element.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), selector
    detail = page.locator(".nbt-detail")
    assert detail.evaluate("e => e.scrollWidth <= e.clientWidth + 1")  # nothing sticks out sideways
    # a name is never cut inside: every line break of the path falls before a dot
    lines = page.locator(".nbt-detail .nbt-d-path").evaluate(
        """e => { const r = document.createRange(); const out = []; let top = null, text = "";
        for (const node of e.childNodes) { if (node.nodeType !== 3) continue;
          r.selectNodeContents(node); const t = r.getClientRects()[0].top;
          if (top !== null && t > top + 2) { out.push(text); text = ""; } top = t; text += node.textContent; }
        out.push(text); return out; }"""
    )
    assert all(line.startswith(".") for line in lines[1:]) and "".join(lines) == f"{P}.layers.2.self_attn"


def test_no_jump_marks_on_healthy_rows_and_no_nan_on_the_mask(page, porter):
    view = open_view(porter)
    mount(page, view)
    page.locator(".nbt-tree").focus()
    page.keyboard.press("Home")
    for path in (f"{P}.rotary_emb", f"{P}.layers.0.input_layernorm", f"{P}.layers.0.self_attn"):
        target = row(page, path)
        expect(target).to_be_visible()
        expect(target.locator(".nbt-arrow")).to_have_count(0)
        expect(target.locator(".nbt-badge-nan")).to_have_count(0)
    assert page.locator(".nbt-chip-nan").count() == 0


def test_own_and_inherited_bars_where_the_verdict_measured_them(page, porter):
    view = open_view(porter)
    mount(page, view)
    expect(page.locator(".nbt-columns .nbt-diff")).to_have_text("own (u)")
    layer1 = row(page, f"{P}.layers.1.self_attn.o_proj")
    layer2 = row(page, f"{P}.layers.2.self_attn.o_proj")
    expect(layer2.locator(".nbt-diff-inherited")).to_have_count(1)
    widths = [r.locator(".nbt-diff-inherited").evaluate("b => b.getBoundingClientRect().width") for r in (layer1, layer2)]
    assert widths[1] > widths[0] + 10  # layer 2's o_proj adds nothing, but is handed the bug's difference
    layer2.click()
    expect(page.locator(".nbt-d-difference")).to_contain_text("own ")
    expect(page.locator(".nbt-d-difference")).to_contain_text(" u · inherited ")


def test_without_a_kernel_the_verdict_and_the_first_divergence_still_show(page, porter):
    view = open_view(porter)
    page.clock.install()
    page.set_content("<!doctype html><html><body></body></html>")
    state = {name: getattr(view, name) for name in ("payload", "selected", "selected_row", "filter", "visible_rows")}
    page.evaluate(MOUNT.replace("window.pyDetail(msg.row).then((reply) => emit(\"msg:custom\", reply));", ""),
                  [ESM, CSS, state])
    expect(page.locator(".nbt-verdict")).to_contain_text("first divergence")
    expect(page.locator(".nbt-d-evidence")).to_contain_text("twin: ")  # shipped with the payload
    row(page, f"{P}.layers.2.self_attn.o_proj").click()
    expect(page.locator(".nbt-detail")).to_contain_text("loading details")
    page.clock.run_for(6000)
    expect(page.locator(".nbt-detail")).to_contain_text("no kernel answers")


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_colours_keep_their_contrast(page, porter, artifacts, theme):
    view = open_view(porter)
    if theme == "dark":
        mount_dark(page, view)
        expect(page.locator(".nbt-root")).to_have_class(__import__("re").compile(r"\bnbt-dark\b"))
    else:
        mount(page, view)
    row(page, f"{P}.layers.2.self_attn.o_proj").click()
    checked = {
        "verdict badge": page.locator(".nbt-verdict-badge"),
        "status badge": page.locator(".nbt-d-compare .nbt-badge-st"),
        "differs": page.locator(".nbt-d-verdict.nbt-ok-false").first,
        "row badge": page.locator(".nbt-badge-first").first,
        "jump legend": page.locator(".nbt-legend-jump"),
        "diff text": row(page, f"{P}.layers.2.self_attn.o_proj").locator(".nbt-diff-text"),
    }
    ratios = {name: locator.evaluate(CONTRAST) for name, locator in checked.items()}
    assert all(ratio >= 4.5 for ratio in ratios.values()), ratios
    colours = page.locator(".nbt-root").evaluate("r => getComputedStyle(r).getPropertyValue('--nbt-c-first').trim()")
    from nbtrace.render.vocabulary import PALETTE

    assert colours == PALETTE["first"][1 if theme == "dark" else 0]  # the vocabulary's colour for this theme
    page.screenshot(path=artifacts / f"compare_esm_{theme}.png", full_page=True)
