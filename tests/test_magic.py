"""%%modeltrace: which model it traces, where the files go, what it stores and shows, and errors as a user sees them."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
from nbclient import NotebookClient
from torch import nn

import nbtrace

WIDGET = "application/vnd.jupyter.widget-view+json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ip = InteractiveShell.instance()
    colors = ip.colors
    ip.colors = "nocolor"  # the shell's own trait: one spelling IPython 8 and 9 both accept (case-insensitive in 8)
    ip.run_cell("%load_ext nbtrace", store_history=False)
    ip.run_cell(
        "import torch\nfrom torch import nn\nfrom nbtrace.demo import build_demo\nmodel, inputs = build_demo()",
        store_history=False,
    )
    yield ip
    for name in ("_trace", "t1", "model", "inputs", "m", "out", "Boom", "b"):
        ip.user_ns.pop(name, None)
    ip.colors = colors


def run(ip: InteractiveShell, cell: str):
    with capture_output() as io:
        result = ip.run_cell(cell, store_history=True)
    return result, io


def assert_nothing_left_behind(*models: nn.Module) -> None:
    from torch.nn.modules import module as torch_module

    assert nn.Module.__call__ is torch_module.Module.__dict__["__call__"]
    assert nn.Module.__dict__["__call__"].__name__ == "_wrapped_call_impl"
    for model in models:
        assert not [name for name, m in model.named_modules() if "forward" in m.__dict__]
    assert not torch_module._global_forward_pre_hooks and not torch_module._global_forward_hooks


def test_traces_the_model_the_cell_calls(shell, tmp_path):
    result, io = run(shell, "%%modeltrace\nout = model(**inputs)\nout['logits'].shape")
    assert result.success, io.stdout
    trace = shell.user_ns["_trace"]
    assert isinstance(trace, nbtrace.Trace) and trace.model_name == "DemoLM" and len(trace) == 31
    assert trace.source == tmp_path / "nbtrace_traces" / "DemoLM" / "DemoLM_debug_tree_FULL_TENSORS.json"
    assert trace.source.is_file() and (trace.source.parent / "DemoLM_debug_tree_SUMMARY.json").is_file()
    assert [WIDGET in o.data for o in io.outputs] == [True]
    assert result.result == torch.Size([1, 16, 256])  # the last expression still comes out, as in a plain cell
    assert_nothing_left_behind(shell.user_ns["model"])


def test_a_model_built_inside_the_cell_is_found(shell):
    cell = (
        "%%modeltrace\n"
        "class Tiny(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.a = nn.Linear(3, 3); self.b = nn.ReLU()\n"
        "    def forward(self, x):\n"
        "        return self.b(self.a(x))\n"
        "def run(x):\n"
        "    return m(x)\n"
        "m = Tiny()\n"
        "run(torch.ones(1, 3));"
    )
    result, io = run(shell, cell)
    assert result.success and result.result is None
    trace = shell.user_ns["_trace"]
    assert [n.module_path for n in trace.nodes()] == ["Tiny", "Tiny.a", "Tiny.b"]
    assert_nothing_left_behind(shell.user_ns["m"])


def test_named_model_with_every_option(shell, tmp_path):
    cell = "%%modeltrace model -o runs/one --no-prune --safetensors --name t1\nmodel.forward(**inputs)\n"
    result, io = run(shell, cell)  # a direct .forward call is seen when the model is named
    assert result.success, io.stderr
    trace = shell.user_ns["t1"]
    assert trace.source.parent == (tmp_path / "runs" / "one").resolve()
    assert trace.get("DemoLM.layers.1") is not None  # --no-prune kept every layer
    assert list((tmp_path / "runs" / "one").glob("*.safetensors"))  # --safetensors
    assert "_trace" not in shell.user_ns
    assert_nothing_left_behind(shell.user_ns["model"])


def test_the_outermost_call_is_traced(shell):
    cell = "%%modeltrace\nclass Outer(nn.Module):\n    def __init__(self, inner):\n        super().__init__(); self.inner = inner\n    def forward(self, **kw):\n        return self.inner(**kw)\nOuter(model)(**inputs);"
    result, _ = run(shell, cell)
    assert result.success
    trace = shell.user_ns["_trace"]
    assert trace.model_name == "Outer" and trace.root.children[0].module_path == "Outer.inner"


def test_error_keeps_partial_trace_and_raises_like_a_plain_cell(shell):
    shell.run_cell(
        "class Boom(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.inner = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        y = self.inner(x)\n"
        "        raise RuntimeError(f'boom at {tuple(y.shape)}')\n"
        "b = Boom()",
        store_history=False,
    )
    plain, plain_io = run(shell, "x = torch.ones(2, 4)\nb(x)")
    traced, traced_io = run(shell, "%%modeltrace\nx = torch.ones(2, 4)\nb(x)")
    assert isinstance(traced.error_in_exec, RuntimeError) and str(traced.error_in_exec) == "boom at (2, 4)"
    partial = shell.user_ns["_trace"]
    assert partial.model_name == "Boom" and partial.root.error["message"] == "boom at (2, 4)"
    assert [WIDGET in o.data for o in traced_io.outputs] == [True]

    def normalized(text: str) -> str:
        return re.sub(r"Cell In\[\d+\]", "Cell In[N]", ANSI.sub("", text)).strip()

    shown = normalized(traced_io.stdout)
    assert shown == normalized(plain_io.stdout)
    # the user's own frames, none of ours (IPython 8 colours inside "Cell In[": compare without colour codes)
    assert "Cell In[N], line 2" in shown and "in Boom.forward" in shown
    package = Path(nbtrace.__file__).resolve().parent
    frames = [Path(m).expanduser().resolve() for m in re.findall(r"^File (\S+?):\d+", shown, re.MULTILINE)]
    assert frames and not [f for f in frames if f.is_relative_to(package)], frames
    assert_nothing_left_behind(shell.user_ns["b"])


def test_nothing_traced_says_so(shell):
    shell.user_ns["_trace"] = "stale"
    result, io = run(shell, "%%modeltrace\n1 + 1")
    assert result.success and result.result == 2
    assert shell.user_ns["_trace"] is None
    assert "nothing traced" in io.stderr and "called no torch.nn.Module" in io.stderr


def test_two_forwards_keep_the_last_and_say_so(shell):
    result, io = run(shell, "%%modeltrace\nmodel(**inputs)\nmodel(**inputs);")
    assert result.success
    assert "2 forwards of DemoLM ran" in io.stderr
    assert shell.user_ns["_trace"].source.parent.name == "DemoLM"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("%%modeltrace nosuch", "MODEL 'nosuch' cannot be evaluated: NameError"),
        ("%%modeltrace inputs", "MODEL 'inputs' is a dict, not a torch.nn.Module"),
        ("%%modeltrace --name 1x", "--name '1x' is not a valid variable name"),
        ("%modeltrace model", "%%modeltrace is a cell magic"),
    ],
)
def test_usage_errors_name_the_problem(shell, line, message):
    result, io = run(shell, line + "\nmodel(**inputs)")
    assert not result.success
    assert message in io.stderr + io.stdout
    assert_nothing_left_behind(shell.user_ns["model"])


def test_help_documents_the_magic(shell):
    _, io = run(shell, "%modeltrace?")
    text = ANSI.sub("", io.stdout)
    for option in ("MODEL", "-o OUT", "--no-prune", "--safetensors", "--name NAME", "nbtrace_traces/<ModelClass>/"):
        assert option in text


def test_in_a_real_kernel_the_error_output_matches_a_plain_cell(tmp_path):
    cells = [
        "%load_ext nbtrace\nimport torch\nfrom torch import nn\n"
        "class Boom(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.inner = nn.Linear(4, 4)\n"
        "    def forward(self, x):\n"
        "        return self.inner(x) / torch.tensor([])\n"
        "b = Boom()",
        "b(torch.ones(2, 4))",
        "%%modeltrace\nb(torch.ones(2, 4))",
        "print('PARTIAL', _trace.model_name, [n.module_path for n in _trace.errors()])",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True, resources={"metadata": {"path": str(tmp_path)}}).execute()
    plain = [o for o in nb.cells[1].outputs if o.output_type == "error"][0]
    traced_outputs = nb.cells[2].outputs
    kinds = [o.output_type for o in traced_outputs]
    assert kinds == ["display_data", "error"]  # the partial trace first, then the error
    assert WIDGET in traced_outputs[0].data
    traced = traced_outputs[1]
    assert (traced.ename, traced.evalue) == (plain.ename, plain.evalue) == ("RuntimeError", traced.evalue)

    def frames(tb: list[str]) -> list[str]:
        return [re.sub(r"Cell In\[\d+\]", "Cell In[N]", ANSI.sub("", line)) for line in tb]

    assert frames(traced.traceback) == frames(plain.traceback)
    assert "PARTIAL Boom ['Boom']" in nb.cells[3].outputs[0].text


@pytest.mark.parametrize("explicit", [True, False], ids=["named-model", "first-call"])
def test_a_folder_that_cannot_hold_the_traces_is_one_line_not_a_traceback(shell, tmp_path, explicit):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    folder = blocker / "traces"  # mkdir fails on every system (root included): its parent is a file
    result, io = run(shell, f"%%modeltrace {'model ' if explicit else ''}-o {folder}\nmodel(**inputs)")
    assert not result.success and shell.user_ns["_trace"] is None
    shown = ANSI.sub("", io.stdout + io.stderr).strip()
    assert shown.splitlines() == [f"UsageError: %%modeltrace: -o '{folder}' cannot be used as a folder: Not a directory"]
    assert_nothing_left_behind(shell.user_ns["model"])
