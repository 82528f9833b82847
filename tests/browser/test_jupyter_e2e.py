"""TraceView and %%modeltrace in a real JupyterLab 4 and Notebook 7, driven by Playwright.

One server and one notebook page per app; the tests below are steps on that page, in order:
run the notebook, see the trees, click to expand and select (and read the selection back
in the kernel), use the keyboard, filter, open a 20,000-call trace, look at a comparison,
switch to the dark theme. Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import re
import time

import nbformat
import pytest
from playwright.sync_api import Page, expect

from tests.browser.test_compare_view_esm import CONTRAST

APP = "window.jupyterapp"
CELLS = [
    # 0: set-up
    "%load_ext nbtrace\nimport torch, nbtrace\nfrom nbtrace.demo import build_demo\n"
    "from tests.models.widget_models import synthetic_trace\nmodel, inputs = build_demo()\n"
    "from tests.models.generation import build_reference, make_prompt\ngen_model, prompt = build_reference(), make_prompt()",
    # 1: the magic shows a TraceView under the cell
    "%%modeltrace\nout = model(**inputs)",
    # 2: the view the tests click in
    "view = nbtrace.TraceView(_trace)\nview",
    # 3: the kernel's view of the selection and the filter
    "print('PYSTATE', repr(view.selected), view.selected_node.call_index if view.selected_node else None, repr(view.filter))",
    # 4: a 20,000-call trace (built, not shown)
    "big_trace = synthetic_trace(nan_layer=321)\nlen(big_trace)",
    # 5: ... shown
    "nbtrace.TraceView(big_trace)",
    # 6: the porter of issue 9: transformers' Llama against a port whose layer 2 scales attention by 0.35, fp32
    "from pathlib import Path\nfrom tests.models.contract import porter_comparison\n"
    "porter = porter_comparison(Path('porter'))\ncompare_view = nbtrace.TraceView(porter)\ncompare_view",
    # 7: %%modeltrace on a cell that calls generate: every step kept, a step picker
    "%%modeltrace gen_model --safetensors -o gen_trace\nout = gen_model.generate(prompt, max_new_tokens=4)",
    # 8: a view of the same folder, whose step the kernel reads back (9)
    "gen_view = nbtrace.TraceView('gen_trace')\ngen_view",
    "print('GENSTATE', gen_view.step, repr(gen_view.selected))",
    # 10: the kernel's view of the comparison's selection
    "print('CMPSTATE', repr(compare_view.selected))",
    # 11: the comparison's static HTML (what nbconvert and GitHub show)
    "porter",
]
(SETUP, MAGIC, VIEW, READBACK, BIG_BUILD, BIG, COMPARE, GENERATE, GEN_VIEW, GEN_READBACK, CMP_READBACK,
 STATIC) = range(len(CELLS))
P = "LlamaForCausalLM.model"


class NotebookPage:
    """The open notebook: cells, running them, and the errors and requests seen so far."""

    def __init__(self, page: Page, app: str, artifacts) -> None:
        self.page, self.app, self.artifacts = page, app, artifacts
        self.errors: list[str] = []
        self.external: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(f"{e}"))
        page.on("request", self._request)

    def _request(self, request) -> None:
        if not request.url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "blob:", "data:")):
            self.external.append(request.url)

    def cell(self, index: int):
        return self.page.locator(".jp-Notebook .jp-Cell").nth(index)

    def widget(self, index: int):
        return self.cell(index).locator(".nbt-root")

    def row(self, index: int, path: str):
        return self.widget(index).locator(f'.nbt-row[data-path="{path}"]')

    def run_cell(self, index: int) -> None:
        self.page.evaluate(
            f"""(() => {{ const nb = {APP}.shell.currentWidget.content; nb.activeCellIndex = {index};
                return {APP}.commands.execute('notebook:run-cell'); }})()"""
        )

    def readback(self, index: int = READBACK, word: str = "PYSTATE") -> str:
        """Re-run a read-back cell; returns its printed line once it is fresh."""
        marker = self.cell(index).locator(".jp-OutputArea-output")
        self.page.evaluate(f"{APP}.shell.currentWidget.content.widgets[{index}].model.outputs.clear()")
        expect(marker).to_have_count(0)
        self.run_cell(index)
        expect(marker).to_contain_text(word)
        return marker.inner_text()

    def kernel_sees(self, expected: str, timeout: float = 15, index: int = READBACK, word: str = "PYSTATE") -> None:
        """Read the kernel's state until it shows ``expected``: the widget front end holds back an
        update while an earlier one awaits the kernel, so fast clicks reach Python a moment later."""
        deadline = time.time() + timeout
        seen = self.readback(index, word)
        while expected not in seen and time.time() < deadline:
            self.page.wait_for_timeout(200)
            seen = self.readback(index, word)
        assert expected in seen, seen

    def shot(self, name: str, locator=None) -> None:
        path = self.artifacts / f"{self.app}_{name}.png"
        (locator or self.page).screenshot(path=path)
        assert path.stat().st_size > 5_000


@pytest.fixture(scope="module")
def nb(jupyter, browser, artifacts):
    name = f"e2e_{jupyter.app}.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, jupyter.root / name)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(30_000)
    opened = NotebookPage(page, jupyter.app, artifacts)
    started = time.time()
    page.goto(jupyter.url(name))
    page.wait_for_function(f"{APP}?.shell?.currentWidget?.sessionContext", timeout=90_000)
    page.wait_for_function(
        f"{APP}.shell.currentWidget.sessionContext.session?.kernel?.status === 'idle'", timeout=90_000
    )
    if jupyter.app == "lab":  # more room for the notebook
        page.evaluate(f"{APP}.commands.execute('application:toggle-left-area')")
    page.evaluate(f"{APP}.commands.execute('notebook:run-all-cells')")
    expect(opened.widget(COMPARE)).to_be_visible(timeout=120_000)
    expect(opened.widget(GEN_VIEW)).to_be_visible(timeout=120_000)
    print(f"\n[{jupyter.app}] notebook open and every cell run in {time.time() - started:.1f}s")
    yield opened
    context.close()


def test_magic_and_view_render_the_tree(nb):
    for index in (MAGIC, VIEW):
        expect(nb.row(index, "DemoLM")).to_be_visible()
        expect(nb.row(index, "DemoLM.layers.0.mlp")).to_be_visible()  # two levels open
        expect(nb.row(index, "DemoLM.layers.0.mlp.up_proj")).to_have_count(0)
    expect(nb.widget(MAGIC).locator(".nbt-source")).to_contain_text("DemoLM_debug_tree_FULL_TENSORS.json")
    expect(nb.widget(MAGIC).locator(".nbt-gap")).to_have_text("… layers 1–2 pruned")
    nb.shot("magic_light", nb.cell(MAGIC))


def test_click_expands_and_selects_and_python_reads_it(nb):
    nb.row(VIEW, "DemoLM.layers.0.self_attn").locator(".nbt-twisty").click()
    expect(nb.row(VIEW, "DemoLM.layers.0.self_attn.k_proj")).to_be_visible()
    nb.row(VIEW, "DemoLM.layers.0.self_attn.k_proj").click()
    expect(nb.row(VIEW, "DemoLM.layers.0.self_attn.k_proj")).to_have_attribute("aria-selected", "true")
    pane = nb.widget(VIEW).locator(".nbt-detail")
    expect(pane.locator(".nbt-d-path")).to_have_text("DemoLM.layers.0.self_attn.k_proj")  # came from the kernel
    expect(pane.locator(".nbt-d-tensor")).to_have_count(2)
    pane.locator(".nbt-d-values summary").last.click()
    expect(pane.locator(".nbt-d-values pre").last).to_contain_text("tensor(")
    nb.kernel_sees("PYSTATE 'DemoLM.layers.0.self_attn.k_proj' 0 ''")
    nb.shot("view_light", nb.cell(VIEW))


def test_keyboard_moves_and_python_follows(nb):
    nb.row(VIEW, "DemoLM.layers.0.self_attn.k_proj").click()
    nb.page.keyboard.press("ArrowDown")
    nb.page.keyboard.press("ArrowDown")  # o_proj
    nb.page.keyboard.press("ArrowLeft")  # to self_attn
    nb.page.keyboard.press("ArrowLeft")  # collapse it
    expect(nb.row(VIEW, "DemoLM.layers.0.self_attn.k_proj")).to_have_count(0)
    expect(nb.row(VIEW, "DemoLM.layers.0.self_attn")).to_have_attribute("aria-selected", "true")
    # the notebook did not take the keys (no new cell, still the same active cell content)
    assert nb.page.locator(".jp-Notebook .jp-Cell").count() == len(CELLS)
    nb.kernel_sees("PYSTATE 'DemoLM.layers.0.self_attn' 0 ''")


def test_filter_narrows_the_tree(nb):
    box = nb.widget(VIEW).locator(".nbt-filter")
    box.click()
    box.press_sequentially("down_proj", delay=20)
    expect(nb.widget(VIEW).locator(".nbt-count")).to_have_text("2 matches")
    expect(nb.widget(VIEW).locator(".nbt-rows .nbt-row")).to_have_count(7)
    expect(nb.row(VIEW, "DemoLM.layers.3.mlp.down_proj")).to_be_visible()
    expect(nb.row(VIEW, "DemoLM.embed_tokens")).to_have_count(0)
    nb.kernel_sees("'down_proj'")
    nb.shot("filter_light", nb.cell(VIEW))
    box.fill("")
    expect(nb.row(VIEW, "DemoLM.embed_tokens")).to_be_visible()


def test_twenty_thousand_calls_show_first_rows_quickly(nb):
    expect(nb.widget(BIG).locator(".nbt-rows .nbt-row").first).to_be_visible()
    # time it again from a clean output: run the cell, wait for its first painted rows
    elapsed = nb.page.evaluate(
        f"""async (index) => {{
        const nb = {APP}.shell.currentWidget.content;
        const cell = nb.widgets[index];
        cell.model.outputs.clear();
        nb.activeCellIndex = index;
        const t0 = performance.now();
        {APP}.commands.execute('notebook:run-cell');
        return await new Promise((resolve) => {{
            const poll = () => cell.node.querySelector('.nbt-rows .nbt-row[data-path]')
                ? resolve(performance.now() - t0) : requestAnimationFrame(poll);
            poll();
        }});
    }}""",
        BIG,
    )
    rendered = nb.widget(BIG).locator(".nbt-rows .nbt-row").count()
    print(f"\n[{nb.app}] 20,004-call trace: first rows {elapsed:.0f} ms after running the cell; {rendered} rows in the DOM")
    # the goal is 2 s (printed above, measured); the bound only catches a hang: timings are noisy on a shared CI
    assert elapsed < 10000
    assert rendered < 80
    nb.widget(BIG).locator(".nbt-chip-nan").click()  # deep in layer 321, inside collapsed experts
    target = nb.row(BIG, "BigMoE.layers.321.mlp.experts.3.down_proj")
    expect(target).to_have_attribute("aria-selected", "true")
    expect(nb.widget(BIG).locator(".nbt-detail .nbt-badge-nan")).to_be_visible()
    nb.shot("big_light", nb.cell(BIG))


def test_the_porter_reads_the_verdict_and_its_evidence(nb):
    widget = nb.widget(COMPARE)
    first = nb.row(COMPARE, f"{P}.layers.2.self_attn")
    expect(first).to_be_visible()
    expect(first).to_have_attribute("aria-selected", "true")
    expect(first).to_have_class(re.compile(r"\bnbt-st-first\b"))
    expect(widget.locator(".nbt-verdict-badge")).to_have_text("✗ diverge")
    expect(widget.locator(".nbt-title")).to_contain_text("b: TinyLlamaPort")
    pane = widget.locator(".nbt-d-compare")
    expect(pane).to_contain_text("in b: TinyLlamaPort.blocks.2.attn")
    expect(pane.locator(".nbt-d-evidence")).to_contain_text("float64 twins differ")  # both folders hold their twin
    expect(pane.locator(".nbt-d-reason")).to_contain_text("run in float64 from the same inputs, everything before agrees")
    first.locator(".nbt-twisty").click()
    o_proj = nb.row(COMPARE, f"{P}.layers.2.self_attn.o_proj")
    o_proj.click()
    expect(pane.locator(".nbt-d-situation")).to_have_text("its tensors differ from b's")
    expect(widget.locator('.nbt-d-tensor[data-arg="output out"] .nbt-d-side-b')).to_have_text("b")
    expect(o_proj.locator(".nbt-diff-text")).to_have_text("0 u")  # it adds nothing of its own ...
    expect(o_proj.locator(".nbt-diff-inherited")).to_have_count(1)  # ... but is handed the bug's difference
    expect(pane.locator(".nbt-d-difference")).to_contain_text(re.compile(r"inherited \d+ u"))
    nb.kernel_sees(f"CMPSTATE '{P}.layers.2.self_attn.o_proj'", index=CMP_READBACK, word="CMPSTATE")
    expect(nb.cell(STATIC).locator(".nbtrace-comparison")).to_contain_text("✗ diverge")
    expect(nb.cell(STATIC).locator(".nbtrace-comparison")).to_contain_text("float64 twins")
    nb.shot("compare_light", nb.cell(COMPARE))
    nb.shot("static_light", nb.cell(STATIC))


def test_generate_keeps_every_step_behind_a_step_picker(nb):
    bar = nb.widget(GENERATE).locator(".nbt-stepbar")
    expect(bar.locator(".nbt-step")).to_have_count(4)
    expect(bar.locator(".nbt-step-label")).to_contain_text("step 0 of 4 · 8 positions fed · picked")
    embed = nb.row(GENERATE, "LlamaForCausalLM.model.embed_tokens")
    expect(embed.locator(".nbt-out")).to_have_text("1×8×64 float32")
    bar.locator('.nbt-step[data-step="2"]').click()
    expect(bar.locator(".nbt-step-label")).to_contain_text("step 2 of 4 · 1 position fed")
    expect(embed.locator(".nbt-out")).to_have_text("1×1×64 float32")  # the kernel sent step 2's tree
    nb.shot("generate_light", nb.cell(GENERATE))


def test_the_step_is_synced_both_ways(nb):
    bar = nb.widget(GEN_VIEW).locator(".nbt-stepbar")
    nb.row(GEN_VIEW, "LlamaForCausalLM.model.norm").click()
    bar.locator('.nbt-step[data-step="3"]').click()
    expect(bar.locator(".nbt-step-label")).to_contain_text("step 3 of 4")
    nb.kernel_sees("GENSTATE 3 'LlamaForCausalLM.model.norm'", index=GEN_READBACK, word="GENSTATE")
    expect(nb.row(GEN_VIEW, "LlamaForCausalLM.model.norm")).to_have_attribute("aria-selected", "true")
    nb.page.evaluate(  # Python moves it: the kernel runs `gen_view.step = 1`
        f"""(() => {{ const nb = {APP}.shell.currentWidget.content;
            nb.widgets[{GEN_READBACK}].model.sharedModel.setSource('gen_view.step = 1\\nprint("GENSTATE", gen_view.step)');
        }})()"""
    )
    nb.kernel_sees("GENSTATE 1", index=GEN_READBACK, word="GENSTATE")
    expect(bar.locator(".nbt-step-label")).to_contain_text("step 1 of 4")
    expect(bar.locator('.nbt-step[data-step="1"]')).to_have_class(re.compile(r"\bnbt-step-on\b"))


def test_dark_theme_and_nothing_went_wrong(nb):
    nb.page.evaluate(f"{APP}.commands.execute('apputils:change-theme', {{theme: 'JupyterLab Dark'}})")
    nb.page.wait_for_function("document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
    background = nb.widget(VIEW).evaluate("el => getComputedStyle(el).backgroundColor")
    assert background not in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)"), background
    nb.row(VIEW, "DemoLM.layers.0.mlp").locator(".nbt-twisty").click()
    nb.row(VIEW, "DemoLM.layers.0.mlp.down_proj").click()
    expect(nb.widget(VIEW).locator(".nbt-d-path")).to_have_text("DemoLM.layers.0.mlp.down_proj")
    nb.shot("view_dark", nb.cell(VIEW))
    compare = nb.widget(COMPARE)
    expect(compare).to_have_class(re.compile(r"\bnbt-dark\b"))
    readable = {
        "verdict badge": compare.locator(".nbt-verdict-badge"),
        "status badge": compare.locator(".nbt-d-compare .nbt-badge-st"),
        "difference": nb.row(COMPARE, f"{P}.layers.2.self_attn.o_proj").locator(".nbt-diff-text"),
        "static badge": nb.cell(STATIC).locator(".nbtrace-comparison span[style*='background:#c62828']").first,
        "static text": nb.cell(STATIC).locator(".nbtrace-comparison > div").first,
    }
    ratios = {name: locator.evaluate(CONTRAST) for name, locator in readable.items()}
    assert all(ratio >= 4.5 for ratio in ratios.values()), ratios
    nb.shot("compare_dark", nb.cell(COMPARE))
    nb.shot("static_dark", nb.cell(STATIC))
    nb.shot("big_dark", nb.cell(BIG))
    nb.shot("generate_dark", nb.cell(GEN_VIEW))
    nb.shot("page_dark")
    benign = ("reading 'schema'",)  # Notebook 7 logs this one while loading settings, widgets or not
    assert not [e for e in nb.errors if not any(b in e for b in benign)], nb.errors
    assert not nb.external, nb.external  # everything, the widget's ES module included, came from loopback
