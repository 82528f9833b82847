"""The gradient plot of a backward trace in a real JupyterLab 4 and Notebook 7: a click on a point selects its layer
in the kernel's TraceView (read back by a cell), and a selection made in Python rings that layer's points."""

from __future__ import annotations

import re

import nbformat
import pytest
from playwright.sync_api import expect

from tests.browser.test_jupyter_e2e import APP, NotebookPage

CELLS = [
    # 0: a training step whose layer 1 cuts its residual path with detach(), traced with its backward
    "import torch, nbtrace\nfrom tests.models.backward_models import build, train_step\n"
    "model = build(seed=0, bug='detach_residual')\n"
    "with nbtrace.trace(model, 'grad_step', backward=True, measure_rounding=False, do_prune_layers=False) as rec:\n"
    "    train_step(model)\nview = nbtrace.TraceView(rec.trace)\nview",
    # 1: the kernel's view of the selection
    "print('GRADSTATE', repr(view.selected), view.selected_row)",
    # 2: Python selects a layer
    "view.selected = 'TinyTrainLM.layers.2'",
]
VIEW, READBACK, SELECT = range(len(CELLS))
LAYER = "TinyTrainLM.layers.{}"


@pytest.fixture(scope="module")
def nb(jupyter, browser, artifacts):
    name = f"gradients_{jupyter.app}.ipynb"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, jupyter.root / name)
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    page = context.new_page()
    page.set_default_timeout(30_000)
    opened = NotebookPage(page, jupyter.app, artifacts)
    page.goto(jupyter.url(name))
    page.wait_for_function(f"{APP}?.shell?.currentWidget?.sessionContext", timeout=90_000)
    page.wait_for_function(f"{APP}.shell.currentWidget.sessionContext.session?.kernel?.status === 'idle'",
                           timeout=90_000)
    # run the view's cell only: the read-back and the Python selection run when the test says
    opened.run_cell(VIEW)
    expect(opened.widget(VIEW).locator(".nbt-gradients")).to_be_visible(timeout=120_000)
    yield opened
    context.close()
    assert not [e for e in opened.errors if "schema" not in e], opened.errors  # NB7's own settings error aside
    assert not opened.external, opened.external


def test_click_on_a_point_selects_its_layer_in_the_kernel(nb):
    plot = nb.widget(VIEW).locator(".nbt-gradients")
    point = plot.locator(f'.nbt-gp-pt[data-kind="sent"][data-path="{LAYER.format(1)}"]')
    point.click()
    expect(point).to_have_class(re.compile(r"\bnbt-gp-on\b"))
    expect(nb.row(VIEW, LAYER.format(1))).to_have_attribute("aria-selected", "true")
    expect(nb.widget(VIEW).locator(".nbt-detail .nbt-d-backward")).to_contain_text("in args.0: sent")  # from the kernel
    nb.kernel_sees(f"GRADSTATE '{LAYER.format(1)}'", index=READBACK, word="GRADSTATE")
    nb.shot("gradient_plot", nb.cell(VIEW))


def test_a_selection_made_in_python_rings_its_points(nb):
    nb.run_cell(SELECT)
    plot = nb.widget(VIEW).locator(".nbt-gradients")
    expect(plot.locator(f'.nbt-gp-pt.nbt-gp-on[data-path="{LAYER.format(2)}"]')).to_have_count(4)
    expect(plot.locator(f'.nbt-gp-pt.nbt-gp-on[data-path="{LAYER.format(1)}"]')).to_have_count(0)
    expect(nb.row(VIEW, LAYER.format(2))).to_have_attribute("aria-selected", "true")
