"""The house rules of docs/architecture.md, checked on the source: layers import downwards only, no cycles,
small files, public names only at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import nbtrace

PACKAGE = Path(nbtrace.__file__).parent
LAYERS = ["core", "capture", "diff", "render", "notebook", "testing", "jax"]
# what each layer may import at module level (besides itself and errors.py)
ALLOWED = {
    "core": set(),
    "capture": {"core"},
    "diff": {"core", "capture"},  # capture: comparing with a live port traces it (diff/live.py)
    "render": {"core", "diff"},
    "notebook": {"core", "capture", "diff", "render"},
    "testing": {"core", "capture", "diff", "render"},  # a port's test suite: the verdict, failed in words
    "jax": {"core", "capture"},  # a Flax model's capture: capture's torch-free modules (numpy_print, write, prune)
}
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    return {
        ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts): path
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def _module_level_imports(name: str, path: Path) -> set[str]:
    """nbtrace modules imported at module level (not inside functions, not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
                continue
            if isinstance(stmt, (ast.If, ast.Try)):
                visit(stmt.body)
                visit(getattr(stmt, "orelse", []))
                for handler in getattr(stmt, "handlers", []):
                    visit(handler.body)
            elif isinstance(stmt, ast.ImportFrom):
                if stmt.level:
                    base = package.split(".")
                    base = base[: len(base) - (stmt.level - 1)]
                    target = ".".join(base + ([stmt.module] if stmt.module else []))
                else:
                    target = stmt.module or ""
                if target.startswith("nbtrace"):
                    found.add(target)
                    found.update(f"{target}.{alias.name}" for alias in stmt.names)
            elif isinstance(stmt, ast.Import):
                found.update(alias.name for alias in stmt.names if alias.name.startswith("nbtrace"))

    visit(tree.body)
    modules = _modules()
    return {target for target in found if target in modules}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in LAYERS else None


def test_layers_import_only_the_layers_below_them():
    wrong = []
    for name, path in _modules().items():
        layer = _layer(name)
        if layer is None:
            continue
        for target in _module_level_imports(name, path):
            other = _layer(target)
            if target == "nbtrace.errors" or other == layer:
                continue
            if other not in ALLOWED[layer]:
                wrong.append(f"{name} imports {target}")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles_at_module_level():
    graph = {name: _module_level_imports(name, path) for name, path in _modules().items()}
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for target in graph.get(node, ()):
            if target.endswith("__init__") or target == "nbtrace":
                continue
            if state.get(target) == 1:
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target, stack + [target])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(cycles)


def test_python_files_stay_small():
    files = [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "tests").rglob("*.py"), *(PACKAGE.parent / "benchmarks").rglob("*.py")]
    long = {
        str(path.relative_to(PACKAGE.parent)): n for path in files if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"files over {MAX_LINES} lines: {long}"


def test_the_public_names_are_exactly_the_contract():
    assert sorted(nbtrace.__all__) == sorted(
        name for name in nbtrace.__all__ if hasattr(nbtrace, name)
    ), "a name in __all__ does not resolve"
    for name in nbtrace.__all__:
        assert getattr(nbtrace, name) is not None


def test_the_widget_spells_no_status_of_its_own():
    """Status names and words reach the ES module with the payload (render/vocabulary.py)."""
    js = (PACKAGE / "notebook" / "trace_view.js").read_text()
    for words in ("first divergence\", only_a", "only in a", "no data\""):
        assert words not in js
