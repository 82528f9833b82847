"""The ``nbtrace`` command line: demo, show, diff, plot, html.

Bad input (a missing or broken trace file, rename file or output path) exits with
status 2 and one line ``nbtrace: error: <file>: <problem>``, never a traceback.
``diff`` exits 0 when the traces agree, 1 when they diverge and 3 when the verdict is
unresolved, also when the reader of its output stops early (``nbtrace diff A B | head``
under ``set -o pipefail``); ``diff --json`` prints the verdict as JSON, same statuses.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import TraceFormatError


class InputError(Exception):
    """A bad file or argument given on the command line: ``<what>: <problem>``."""

    def __init__(self, what: object, problem: str) -> None:
        super().__init__(f"{what}: {problem}")


def say(*parts: object) -> None:
    """Print a line of a command's output. When the reader has gone (``| head`` closed the pipe), the rest
    of the output is dropped quietly and the command finishes: its exit status is its verdict, not the pipe's.
    """
    try:
        print(*parts, flush=True)
    except BrokenPipeError:
        _drop_stdout()


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so later prints and the flush at exit do not raise again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (captured output): nothing is left to flush
        pass


def _demo(args: argparse.Namespace) -> int:
    import torch

    from .capture.context import trace
    from .demo import build_demo
    from .render.text import format_tree

    from .capture.debug_folder import prepare_debug_dir

    try:
        prepare_debug_dir(args.out)  # a folder that cannot be written is the user's input, named in one line
    except ValueError as exc:
        raise InputError(f"-o {args.out}", getattr(exc, "problem", str(exc))) from None
    model, inputs = build_demo(num_layers=args.layers)
    with trace(model, debug_path=args.out, do_prune_layers=not args.no_prune, use_repr=not args.safetensors) as rec:
        with torch.no_grad():
            model(**inputs)
    result = rec.trace
    assert result is not None
    say(format_tree(result, max_depth=args.depth))
    say()
    folder = result.source.parent
    names = sorted(p.name for p in folder.iterdir())
    written = [name for name in names if name.startswith(result.model_name + "_debug_tree_")]
    tensor_files = [name for name in names if name.endswith(".safetensors")]
    say(f"{len(result)} module calls traced; files written to {folder.resolve()}:")
    for name in written:
        say(f"  {name}")
    if tensor_files:
        say(f"  and {len(tensor_files)} .safetensors files of tensor values")
    return 0


def _show(args: argparse.Namespace) -> int:
    from .core.forwards import forward_sources, holds_several_forwards
    from .core.load import load_trace
    from .diff.verdict.notes import twin_presence
    from .render.backward_words import backward_text
    from .render.text import format_tree

    if args.step is None and not holds_several_forwards(args.path, args.rank):
        trace = load_trace(args.path, rank=args.rank)
        say(format_tree(trace, max_depth=args.depth, contains=args.filter))
        if (backward := backward_text(trace)) is not None:  # the backward passes recorded with it
            say(backward)
        say(f"\n(float64 twin: {twin_presence(trace)})")
        if trace.numerics.get("framework") == "jax":  # a trace not of torch says which framework computed it
            from .render.numerics_words import numerics_words

            say("\n(" + "; ".join(numerics_words(trace)) + ")")
        return 0
    forwards = forward_sources(args.path, rank=args.rank)
    step = len(forwards) - 1 if args.step is None else args.step
    if not -len(forwards) <= step < len(forwards):
        raise InputError("--step", f"{args.path} holds {len(forwards)} forward(s): steps 0…{len(forwards) - 1}")
    step %= len(forwards)
    trace = load_trace(forwards[step])
    say(format_tree(trace, max_depth=args.depth, contains=args.filter))
    say(f"\n(float64 twin: {twin_presence(trace)})")
    if (backward := backward_text(trace)) is not None:  # the step's backward passes
        say(backward)
    if len(forwards) > 1:
        say(f"\n(step {step} of the {len(forwards)} forwards in {args.path}; --step N shows another)")
    return 0


def read_rename(path: str | os.PathLike) -> dict[str, str]:
    """A rename file: a JSON object ``{"regex": "replacement"}`` or lines ``regex = replacement``.

    In the line format, blank lines and lines starting with ``#`` are skipped and
    each line is split at its first `` = `` (space, equals sign, space).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(file, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(file, f"cannot be read: {getattr(exc, 'strerror', None) or exc}") from None
    stripped = text.strip()
    rules: dict[str, str] = {}
    if stripped.startswith("{"):
        try:
            loaded = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise InputError(file, f"is not valid JSON: {exc}") from None
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in loaded.items()):
            raise InputError(file, "must map regex strings to replacement strings")
        rules = loaded
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            if " = " not in line:
                raise InputError(file, f"line {number}: expected 'regex = replacement', got {line.strip()!r}")
            pattern, replacement = line.split(" = ", 1)
            rules[pattern.strip()] = replacement.strip()
    for pattern in rules:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise InputError(file, f"bad regular expression {pattern!r}: {exc}") from None
    return rules


def terminal_width() -> int:
    """The terminal's columns (``COLUMNS`` first), 100 when stdout is not a terminal; at least 40."""
    return max(40, shutil.get_terminal_size((100, 24)).columns)


def _diff(args: argparse.Namespace) -> int:
    from .core.forwards import forward_sources
    from .diff.ranks.ranked import BothRanked
    from .diff.compare import compare
    from .diff.steps.steps import StepsComparison
    from .render.steps_text import format_steps_table
    from .diff.verdict.as_dict import EXIT_STATUS
    from .render.backward_words import backward_lines, diff_status
    from .render.text import cut_lines, format_comparison_table, wrap_lines

    rename = read_rename(args.rename) if args.rename else None
    for path in (args.a, args.b):
        forward_sources(path)  # a missing or broken folder is bad input, before anything runs
    if args.ignore is not None:
        try:
            re.compile(args.ignore)
        except re.error as exc:
            raise InputError("--ignore", f"bad regular expression {args.ignore!r}: {exc}") from None
    a, b = args.a, args.b
    if args.rank is not None:
        from .core.load import load_trace

        try:
            a, b = (load_trace(path, rank=args.rank) for path in (args.a, args.b))
        except ValueError as exc:
            raise InputError("--rank", str(exc)) from None
    try:
        comparison = compare(a, b, rename=rename, rtol=args.rtol, atol=args.atol, ignore=args.ignore)
    except ValueError as exc:  # traces that cannot be compared as given (two tensor-parallel runs, for one)
        hint = " (nbtrace diff A B --rank R compares one rank of each)" if isinstance(exc, BothRanked) else ""
        raise InputError("diff", f"{exc}{hint}") from None
    status = diff_status(comparison, EXIT_STATUS[comparison.verdict])  # where the forward agrees, the backward's
    if args.json:
        say(json.dumps(comparison.to_dict(), indent=2, ensure_ascii=False))
        return status
    width = terminal_width()
    say(wrap_lines(comparison.summary(), width))
    for line in backward_lines(comparison):
        say(wrap_lines(line, width))
    say()
    if isinstance(comparison, StepsComparison):  # folders of several forwards (generate): every step
        say(cut_lines(format_steps_table(comparison, rows=args.rows), width))
        step = comparison.first_step
        if step is not None and comparison.steps[step].kind != "cache":
            say()
            say(f"step {step}:")
            say(format_comparison_table(comparison.comparison(step), rows=args.rows, width=width))
    else:
        say(format_comparison_table(comparison, rows=args.rows, width=width))
    return status


def _plot(args: argparse.Namespace) -> int:
    from .core.load import load_trace

    if args.where is not None:
        try:
            re.compile(args.where)
        except re.error as exc:
            raise InputError("--where", f"bad regular expression {args.where!r}: {exc}") from None
    out = Path(args.output)
    suffix = out.suffix.lstrip(".").lower()
    if not suffix:
        raise InputError(out, "needs a file extension (.png, .svg, .pdf, ...)")
    if not out.parent.is_dir():
        raise InputError(out, f"folder {str(out.parent)!r} does not exist")
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError("plot", "needs matplotlib: pip install 'nbtrace[notebook]'") from None
    figure = Figure(figsize=(args.width, args.height), dpi=args.dpi)
    if suffix not in figure.canvas.get_supported_filetypes():
        raise InputError(out, f"matplotlib cannot write .{suffix} files")
    trace = load_trace(args.path)
    other = load_trace(args.compare) if args.compare else None
    from .render.plot import plot_stats

    try:
        plot_stats(
            trace, ax=figure.add_subplot(), compare=other, where=args.where, stat=args.stat, minmax=args.minmax,
            log={"auto": None, "log": True, "linear": False}[args.scale],
        )
    except ValueError as exc:
        raise InputError("plot", str(exc)) from None
    figure.tight_layout()
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        figure.savefig(tmp, format=suffix)
        os.replace(tmp, out)
    except OSError as exc:
        raise InputError(out, f"cannot be written: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    say(f"wrote {out}")
    return 0


def _html(args: argparse.Namespace) -> int:
    from .core.forwards import forward_sources
    from .notebook.html_file import save_html

    out = Path(args.output)
    if out.suffix.lower() not in (".html", ".htm"):
        raise InputError(out, "needs the extension .html")
    if not out.parent.is_dir():
        raise InputError(out, f"folder {str(out.parent)!r} does not exist")
    for path in [args.path] + args.other:
        forward_sources(path)  # a missing or broken trace is bad input, before anything is built
    if len(args.other) > 1:
        raise InputError("html", f"takes one trace, or two to compare; got {1 + len(args.other)}")
    source = args.path
    if args.other:
        from .diff.compare import compare

        try:
            source = compare(args.path, args.other[0])
        except ValueError as exc:  # traces that cannot be compared as given
            raise InputError("html", str(exc)) from None
    try:
        written = save_html(source, out, values=args.values, step=args.step)
    except (IndexError, ValueError) as exc:  # a step out of range, a step of a single forward
        raise InputError("--step", str(exc)) from None
    except OSError as exc:
        raise InputError(out, f"cannot be written: {exc.strerror or exc}") from None
    say(f"wrote {written} ({written.stat().st_size / 1024:,.0f} KiB)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nbtrace", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="trace the built-in demo model and print its tree")
    demo.add_argument("-o", "--out", default="nbtrace_demo", help="folder for the trace files (default: nbtrace_demo)")
    demo.add_argument("--layers", type=_at_least(1), default=4, help="number of decoder layers (default: 4)")
    demo.add_argument("--depth", type=_at_least(0), default=None, help="print the tree this deep only")
    demo.add_argument("--no-prune", action="store_true", help="keep every layer block in the files")
    demo.add_argument("--safetensors", action="store_true", help="store full tensors as safetensors files")
    demo.set_defaults(run=_demo)

    show = commands.add_parser("show", help="print a trace file or folder as a tree")
    show.add_argument("path", help="a *_debug_tree_*.json file or the folder holding one")
    show.add_argument("--depth", type=_at_least(0), default=None, help="print the tree this deep only")
    show.add_argument("--filter", default=None, help="only calls whose path contains this text")
    show.add_argument("--rank", type=int, default=None, help="in a folder of rank_<r> folders: show this rank's trace")
    show.add_argument("--step", type=int, default=None,
                      help="for a folder of several forwards (generate): the forward to show (default: the last)")
    show.set_defaults(run=_show)

    diff = commands.add_parser(
        "diff",
        help="compare trace B against the reference A; exit 0 agree, 1 diverge, 3 unresolved, 2 bad input",
        description="Compare trace B against the reference A and print the first divergence and a table "
        "(--json: the verdict as JSON, nbtrace.verdict_schema()). "
        "Folders of several forwards (a traced generate) are compared step by step, forward by forward. "
        "Exit status: 0 they agree, 1 they diverge, 3 unresolved (nothing decided either way: the summary says "
        "what would decide), 2 bad input.",
    )
    diff.add_argument("a", help="the reference trace (file or folder)")
    diff.add_argument("b", help="the trace to check (file or folder; a folder of rank_<r> folders is reassembled)")
    diff.add_argument(
        "--rename",
        metavar="FILE",
        help="rewrite B's module paths: a JSON object {regex: replacement} or lines 'regex = replacement'",
    )
    diff.add_argument("--rtol", type=float, default=None,
                      help="judge each tensor by this relative tolerance (default: full tensors are judged against "
                           "the dtype's rounding, printed values by a tolerance per dtype)")
    diff.add_argument("--atol", type=float, default=None, help="absolute tolerance (given: per-element judgement)")
    diff.add_argument("--ignore", metavar="REGEX", help="do not compare tensors whose argument name matches")
    diff.add_argument("--rows", type=_at_least(1), default=30, help="table rows to print (default: 30)")
    diff.add_argument("--json", action="store_true",
                      help="print the verdict as JSON (schema: nbtrace.verdict_schema()) instead of the table")
    diff.add_argument("--rank", type=int, default=None,
                      help="two folders of rank_<r> folders (two tensor-parallel runs): compare this rank of each")
    diff.set_defaults(run=_diff)

    plot = commands.add_parser("plot", help="plot activation stats across layers into an image file")
    plot.add_argument("path", help="a trace file or folder")
    plot.add_argument("-o", "--output", required=True, help="the image to write (.png, .svg, .pdf)")
    plot.add_argument("--compare", metavar="TRACE", help="overlay a second trace")
    plot.add_argument("--where", metavar="REGEX", help="plot the calls matching this regex instead of layer blocks")
    plot.add_argument("--stat", default="mean", choices=("mean", "std", "min", "max", "absmax"))
    plot.add_argument("--minmax", action="store_true", help="add min and max lines")
    plot.add_argument("--scale", default="auto", choices=("auto", "log", "linear"), help="y scale (default: auto)")
    plot.add_argument("--width", type=float, default=8.0, help="figure width in inches")
    plot.add_argument("--height", type=float, default=4.5, help="figure height in inches")
    plot.add_argument("--dpi", type=_at_least(1), default=120)
    plot.set_defaults(run=_plot)

    page = commands.add_parser(
        "html",
        help="save a trace (or a comparison of two) as one self-contained, interactive HTML file",
        description="Write what TraceView shows into one HTML file that opens in any browser, offline, with no "
        "kernel: the tree, filter, detail pane, a comparison's verdict and, for several forwards, the step picker.",
    )
    page.add_argument("path", help="a trace file or folder (the reference A when a second one is given)")
    page.add_argument("other", nargs="*", metavar="B", help="a second trace: save the comparison of B against A")
    page.add_argument("-o", "--output", required=True, help="the HTML file to write")
    page.add_argument("--values", action="store_true", help="keep the printed values of a FULL trace (larger file)")
    page.add_argument("--step", type=int, default=None, help="for several forwards: the step the page opens on")
    page.set_defaults(run=_html)
    return parser


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number no smaller than ``minimum`` (argparse names the option when it is not)."""
    def parse(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"{number} is less than {minimum}")
        return number
    return parse


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (TraceFormatError, InputError) as exc:
        print(f"nbtrace: error: {_one_line(exc)}", file=sys.stderr)
        return 2


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
