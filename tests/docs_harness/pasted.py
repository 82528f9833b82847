"""Names a page's shown Python blocks read that no shown block above them defines (a hidden preamble's).

A reader pastes the blocks a page shows, in order; a name only a ``docs-test: preamble`` defines does not
exist for them. ``unbound_names(page)`` lists each such use as ``"line N: name"``.
"""

from __future__ import annotations

import ast
import builtins

from .pages import Page

#: names every IPython cell has, and ``_trace``, which a %%modeltrace cell above stores
_KNOWN = set(dir(builtins)) | {"display", "get_ipython", "__file__", "_trace"}


def _defined(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
    return names


def unbound_names(page: Page) -> list[str]:
    """``"line N: name"`` for each name a shown block reads that only a hidden preamble (or nothing) defines."""
    lines = page.path.read_text(encoding="utf-8").splitlines()
    defined: set[str] = set()
    found = []
    for step in page.steps:
        if step.kind != "python" or lines[step.line - 1].lstrip().startswith("<!--"):
            continue  # a shell block, a file, or a hidden preamble
        code = "\n".join(line for line in step.code.splitlines() if not line.lstrip().startswith("%"))
        try:
            tree = ast.parse(code)
        except SyntaxError:  # IPython syntax the ast cannot read: the docs test runs it
            continue
        mine = _defined(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id not in defined and node.id not in mine and node.id not in _KNOWN:
                    found.append(f"line {step.line + node.lineno}: {node.id}")
        defined |= mine
    return sorted(set(found), key=lambda s: int(s.split(":")[0].split()[1]))
