"""The ``nbtrace`` command line: demo, show, diff, plot.

Bad input (a missing or broken trace file) exits with status 2 and one line
naming the file, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .errors import TraceFormatError


def _demo(args: argparse.Namespace) -> int:
    import torch

    from .capture import trace
    from .demo import build_demo
    from .text import format_tree

    model, inputs = build_demo(num_layers=args.layers)
    with trace(model, debug_path=args.out, do_prune_layers=not args.no_prune, use_repr=not args.safetensors) as rec:
        with torch.no_grad():
            model(**inputs)
    result = rec.trace
    assert result is not None
    print(format_tree(result, max_depth=args.depth))
    print()
    print(f"{len(result)} module calls traced; files written to {Path(args.out).resolve()}:")
    for name in (result.source.name, result.source.name.replace("_FULL_TENSORS", "_SUMMARY")):
        print(f"  {name}")
    return 0


def _show(args: argparse.Namespace) -> int:
    from .files import load_trace
    from .text import format_tree

    print(format_tree(load_trace(args.path), max_depth=args.depth, contains=args.filter))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nbtrace", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="trace the built-in demo model and print its tree")
    demo.add_argument("-o", "--out", default="nbtrace_demo", help="folder for the trace files (default: nbtrace_demo)")
    demo.add_argument("--layers", type=int, default=4, help="number of decoder layers (default: 4)")
    demo.add_argument("--depth", type=int, default=None, help="print the tree this deep only")
    demo.add_argument("--no-prune", action="store_true", help="keep every layer block in the files")
    demo.add_argument("--safetensors", action="store_true", help="store full tensors as safetensors files")
    demo.set_defaults(run=_demo)

    show = commands.add_parser("show", help="print a trace file or folder as a tree")
    show.add_argument("path", help="a *_debug_tree_*.json file or the folder holding one")
    show.add_argument("--depth", type=int, default=None, help="print the tree this deep only")
    show.add_argument("--filter", default=None, help="only calls whose path contains this text")
    show.set_defaults(run=_show)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except TraceFormatError as exc:
        print(f"nbtrace: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `nbtrace show x | head`
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
