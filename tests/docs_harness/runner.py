"""Runs one page's steps in this process, in order, in the working folder; writes what happened as JSON.

    python -m tests.docs_harness.runner STEPS.json RESULTS.json

Python blocks (and preambles) run in one IPython shell, so they share one namespace and ``%load_ext`` /
``%%modeltrace`` run for real; a line ``expression  # -> text`` also checks ``repr(expression)`` against
``text`` (``...`` matches anything). Shell blocks run each command with bash, in a user's environment
except that ``nbtrace`` means ``python -m nbtrace`` with this Python (the console script on PATH may belong
to another checkout). The first step that fails stops the page: later blocks build on earlier ones.
"""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import tokenize
import traceback
from pathlib import Path

from tests.docs_harness.expect import matches

SHELL_PRELUDE = 'nbtrace() { "$NBTRACE_DOCS_PYTHON" -m nbtrace "$@"; }\n'


def main(steps_file: str, results_file: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.colors = "nocolor"
    shell.ast_node_interactivity = "none"  # a script's view: only what a block prints is its output
    checks: list[dict] = []
    shell.user_ns["__docs_expect__"] = lambda value, expected, line: checks.append(
        {"line": line, "expected": expected, "actual": repr(value), "ok": matches(expected, repr(value))}
    )
    results = []
    for step in json.loads(Path(steps_file).read_text()):
        start = time.perf_counter()
        if step["kind"] == "python":
            checks.clear()
            result = run_python(shell, step["code"])
            result["checks"] = list(checks)
        elif step["kind"] == "shell":
            result = run_shell(step["code"], step["statuses"])
        else:
            target = Path(step["path"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(step["code"], encoding="utf-8")
            result = {"output": "", "error": None}
        result["seconds"] = time.perf_counter() - start
        results.append(result)
        Path(results_file).write_text(json.dumps(results))
        if result["error"]:
            break


def run_python(shell, code: str) -> dict:
    from IPython.utils.capture import capture_output

    source, problem = with_value_checks(shell, code)
    if problem:
        return {"output": "", "error": problem}
    with capture_output() as captured:  # rich displays (a TraceView) are not printed output
        outcome = shell.run_cell(source, store_history=False)
    error = outcome.error_before_exec or outcome.error_in_exec
    text = None
    if error is not None:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return {"output": captured.stdout, "stderr": captured.stderr, "error": text}


def with_value_checks(shell, code: str) -> tuple[str, str | None]:
    """``code`` with each one-line expression statement ending in ``# -> text`` wrapped in a check."""
    wanted = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(shell.transform_cell(code)).readline):
            if token.type == tokenize.COMMENT and token.string.startswith("# ->"):
                wanted[token.start[0]] = token.string[4:].strip()
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return code, None  # the shell reports the syntax error as the user would see it
    if not wanted:
        return code, None
    python = shell.transform_cell(code)
    try:
        tree = ast.parse(python)
    except SyntaxError:
        return code, None
    lines = python.splitlines()
    done = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and node.lineno == node.end_lineno and node.lineno in wanted:
            number = node.lineno
            line = lines[number - 1]
            expression = line[node.col_offset : node.end_col_offset]
            lines[number - 1] = (
                f"{line[:node.col_offset]}__docs_expect__(({expression}), {wanted[number]!r}, {number})"
            )
            done.add(number)
    missed = sorted(set(wanted) - done)
    if missed:
        return code, f"'# ->' on line {missed[0]} of the block: only a one-line expression can be checked"
    return "\n".join(lines) + "\n", None


def run_shell(code: str, statuses: list[int] | None) -> dict:
    """The block's commands in one bash, as typed into a terminal (``cd``, variables, ``set`` carry over)."""
    from tests.docs_harness.pages import shell_commands

    commands = shell_commands(code)
    expected = statuses or [0] * len(commands)
    env = {**os.environ, "NBTRACE_DOCS_PYTHON": sys.executable}
    env.pop("COLUMNS", None)  # piped, nbtrace's output is 100 columns wide, as the pages show it
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    with tempfile.TemporaryDirectory() as scratch:
        record = Path(scratch) / "statuses"
        env["NBTRACE_DOCS_STATUS"] = str(record)
        script = SHELL_PRELUDE + "".join(f'{command}\necho "$?" >> "$NBTRACE_DOCS_STATUS"\n' for command in commands)
        done = subprocess.run(
            ["bash", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=300
        )
        got = [int(line) for line in record.read_text().split()] if record.exists() else []
    error = None
    if got != expected:
        wrong = [f"`{c}` exited {g} (expected {e})" for c, g, e in zip(commands, got, expected) if g != e]
        if len(got) < len(commands):
            wrong.append(f"bash stopped after {len(got)} of {len(commands)} commands (exit {done.returncode})")
        error = "; ".join(wrong) + "\n" + done.stdout
    return {"output": done.stdout, "error": error, "statuses": got}


if __name__ == "__main__":
    main(*sys.argv[1:])
