"""``%%modeltrace``: run a cell, trace the model's forward, show it as a TraceView, keep the Trace.

Which model: the one named on the magic line, else the first ``nn.Module`` the cell
calls. For the latter, ``torch.nn.Module.__call__`` is replaced for the duration of the
cell; the first module call (necessarily the outermost one) starts ``nbtrace.trace``
on that module before torch looks up its ``forward``, so its own forward is recorded
too. The cell runs exactly once and ``Module.__call__`` is put back afterwards, whatever
happens. No torch hooks are registered.
"""

from __future__ import annotations

import ast
import sys
import types
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from IPython.display import display

DEFAULT_FOLDER = "nbtrace_traces"
# Frames of these files sit between the user's cell and the user's modules while tracing.
_CAPTURE = Path(__file__).resolve().parent.parent / "capture"
_PLUMBING = {str(Path(__file__).resolve()), str(_CAPTURE / "context.py"), str(_CAPTURE / "recorder.py")}


def default_folder(model: Any) -> Path:
    """Where traces go without ``-o``: ``nbtrace_traces/<ModelClass>/`` under the working folder."""
    return Path.cwd() / DEFAULT_FOLDER / type(model).__name__


class _Capture:
    """What one cell recorded: the recorder of the traced model, once there is one."""

    def __init__(self, folder: str | None, prune: bool, use_repr: bool, backward: bool = False) -> None:
        self.folder = folder
        self.backward = backward
        self.prune = prune
        self.use_repr = use_repr
        self.recorder: Any = None
        self.model: Any = None
        self._stack = ExitStack()

    def start(self, model: Any) -> None:
        from ..capture.context import trace
        from ..capture.debug_folder import prepare_debug_dir

        folder = self.folder if self.folder is not None else default_folder(model)
        self.model = model
        try:  # one line for a folder that cannot hold the traces, not a traceback through the capture
            prepare_debug_dir(folder)
        except ValueError as exc:
            option = "-o" if self.folder is not None else "the default folder"
            problem = getattr(exc, "problem", str(exc))
            raise UsageError(f"%%modeltrace: {option} {str(folder)!r} {problem}") from None
        self.recorder = self._stack.enter_context(trace(model, folder, self.prune, self.use_repr,
                                                                  backward=self.backward))

    def close(self) -> None:
        self._stack.close()


class _FirstModuleCall:
    """While active, the first ``nn.Module`` called anywhere starts the capture of that module."""

    def __init__(self, capture: _Capture) -> None:
        self.capture = capture
        self._original: Any = None

    def __enter__(self) -> _FirstModuleCall:
        from torch import nn

        capture = self.capture
        original = self._original = nn.Module.__dict__["__call__"]

        def first_call_starts_trace(module: Any, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            if capture.recorder is None and capture.model is None:
                capture.model = module  # set first: a module called while starting must not start another
                capture.start(module)
            return original(module, *args, **kwargs)

        nn.Module.__call__ = first_call_starts_trace
        return self

    def __exit__(self, *exc: Any) -> None:
        from torch import nn

        nn.Module.__call__ = self._original


def _compile_cell(shell: Any, cell: str) -> tuple[Any, Any, str]:
    """The cell as code objects (body, last expression or None) and the file name tracebacks show as the cell."""
    source = shell.transform_cell(cell)
    filename = shell.compile.cache(source, shell.execution_count, raw_code=cell)
    tree = shell.compile.ast_parse(source, filename=filename)
    tree = shell.transform_ast(tree)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    body = shell.compile(tree, filename, "exec")
    return body, (shell.compile(last, filename, "eval") if last is not None else None), filename


def user_traceback(tb: types.TracebackType | None, cell_filename: str) -> types.TracebackType | None:
    """The traceback a plain cell would have: from the cell's own frame on, without the
    frames of the magic and of the capture wrappers between the user's calls.

    Plumbing frames at the very end stay: if the error started in nbtrace, it shows.
    """
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    start = next((i for i, e in enumerate(entries) if e.tb_frame.f_code.co_filename == cell_filename), None)
    if start is None:
        return None
    entries = entries[start:]
    last_user = max(i for i, e in enumerate(entries) if e.tb_frame.f_code.co_filename not in _PLUMBING)
    kept = [e for i, e in enumerate(entries) if i > last_user or e.tb_frame.f_code.co_filename not in _PLUMBING]
    rebuilt = None
    for entry in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return rebuilt


def _render_as_plain_cell(shell: Any, exc: BaseException, cell_filename: str) -> None:
    """Make IPython show ``exc`` with the traceback a plain cell would show (see ``user_traceback``)."""
    if hasattr(exc, "_render_traceback_"):
        return
    tb = user_traceback(exc.__traceback__, cell_filename)
    if tb is None:
        return

    def _render_traceback_() -> list[str]:
        return shell.InteractiveTB.structured_traceback(type(exc), exc, tb, tb_offset=0)

    try:
        exc._render_traceback_ = _render_traceback_  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # an exception type that takes no attributes
        pass


def _resolve_model(shell: Any, expression: str) -> Any:
    from torch import nn

    try:
        model = eval(expression, shell.user_global_ns, shell.user_ns)  # noqa: S307 - the user's own expression
    except Exception as exc:
        raise UsageError(f"%%modeltrace: MODEL {expression!r} cannot be evaluated: {type(exc).__name__}: {exc}") from None
    if not isinstance(model, nn.Module):
        raise UsageError(f"%%modeltrace: MODEL {expression!r} is a {type(model).__name__}, not a torch.nn.Module")
    return model


def _show(recorded: Any) -> None:
    """Display a TraceView of a Trace, or of a Recorder's every forward (with the step picker)."""
    try:
        from .view import TraceView

        view: Any = TraceView(recorded)
    except ImportError:  # no ipywidgets/anywidget: the static HTML tree still shows
        view = recorded.trace if hasattr(recorded, "traces") else recorded
    display(view)


@magics_class
class ModelTraceMagics(Magics):
    """The ``%%modeltrace`` cell magic."""

    @magic_arguments()
    @argument(
        "model",
        nargs="?",
        default=None,
        help="the nn.Module to trace (a name or attribute, e.g. model or pipe.model); "
        "default: the first nn.Module the cell calls",
    )
    @argument("-o", "--out", default=None, help="folder for the trace files (default: nbtrace_traces/<ModelClass>/)")
    @argument("--no-prune", action="store_true", help="keep every layer block (do_prune_layers=False)")
    @argument("--safetensors", action="store_true", help="store full tensors as safetensors files (use_repr=False)")
    @argument("--backward", action="store_true",
              help="let the forward build its graph and record the backward passes the cell runs (backward=True)")
    @argument("--name", default="_trace", help="variable that receives the Trace (default: _trace)")
    @line_cell_magic
    def modeltrace(self, line: str, cell: str | None = None) -> Any:
        """Run the cell once, trace a model's forward, show a TraceView and keep the Trace.

        Without MODEL, the first torch.nn.Module the cell calls is traced (the
        outermost one: whatever it calls is recorded inside it). The trace files
        (the same as transformers' model_addition_debugger_context writes) go to
        -o DIR, else to nbtrace_traces/<ModelClass>/ under the working folder.
        The Trace of the last forward is stored in the variable --name (default
        _trace; None when nothing was traced). If the cell raises, the partial
        trace (the failing call marked "error") is stored and shown, then the
        error is raised as it would be without the magic.

        Examples::

            %%modeltrace
            out = model(**inputs)

            %%modeltrace model -o traces/run1 --no-prune --name t1
            model(**inputs)

            %%modeltrace model --backward
            loss_fn(model(**inputs), labels).backward()
        """
        __tracebackhide__ = True  # IPython leaves this frame out of tracebacks
        if cell is None:
            raise UsageError(
                "%%modeltrace is a cell magic: put `%%modeltrace [MODEL] [-o DIR] ...` on the first line "
                "of the cell that runs the model (%modeltrace? shows the options)"
            )
        args = parse_argstring(self.modeltrace, line)
        if not args.name.isidentifier():
            raise UsageError(f"%%modeltrace: --name {args.name!r} is not a valid variable name")
        shell = self.shell
        body, last, cell_filename = _compile_cell(shell, cell)
        capture = _Capture(args.out, prune=not args.no_prune, use_repr=not args.safetensors, backward=args.backward)
        explicit = args.model is not None
        model = _resolve_model(shell, args.model) if explicit else None
        namespace = (shell.user_global_ns, shell.user_ns)
        value = None
        try:
            try:
                if explicit:
                    capture.start(model)
                    exec(body, *namespace)  # noqa: S102 - running the user's cell is the point
                    value = eval(last, *namespace) if last is not None else None  # noqa: S307
                else:
                    with _FirstModuleCall(capture):
                        exec(body, *namespace)  # noqa: S102
                        value = eval(last, *namespace) if last is not None else None  # noqa: S307
            finally:
                capture.close()
        except BaseException as exc:
            self._keep(capture, args, explicit, failed=True)
            _render_as_plain_cell(shell, exc, cell_filename)
            raise
        self._keep(capture, args, explicit, failed=False)
        return value

    def _keep(self, capture: _Capture, args: Any, explicit: bool, failed: bool) -> None:
        recorder = capture.recorder
        trace = recorder.trace if recorder is not None else None
        self.shell.user_ns[args.name] = trace
        if trace is None:
            if not failed:
                what = (
                    f"{args.model}'s forward never ran"
                    if explicit
                    else "the cell called no torch.nn.Module (a direct model.forward(...) call is only "
                    "seen when the model is named: %%modeltrace model)"
                )
                print(f"%%modeltrace: nothing traced: {what}; {args.name} = None", file=sys.stderr)
            return
        if len(recorder) > 1:
            print(
                f"%%modeltrace: {len(recorder)} forwards of {recorder.class_name} ran (e.g. the steps of generate); "
                f"every one is kept: the view's step picker shows each, {args.name} holds the last, "
                f"nbtrace.load_traces({str(recorder.folder)!r}) reads them all",
                file=sys.stderr,
            )
            _show(recorder)
            return
        _show(trace)


def register(ipython: Any) -> None:
    """Register ``%%modeltrace`` with an IPython shell (what ``%load_ext nbtrace`` calls)."""
    ipython.register_magics(ModelTraceMagics)
