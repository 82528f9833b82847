"""A documentation page as the steps the docs test runs: its code blocks, hidden preambles, skips, expected output.

A page talks to the harness in HTML comments, invisible where Markdown is rendered:

- ``<!-- docs-test: preamble`` ... ``-->``: hidden Python that runs where it stands (at the top: the page's set-up);
- ``<!-- docs-test: skip REASON -->``: the next code block does not run; the reason is required;
- ``<!-- docs-test: status N [N ...] -->``: the exit status of each command of the next shell block (default 0);
- ``<!-- docs-test: file PATH -->``: the next block's text is written to PATH (relative to the page's working folder).

Every ```python and ```bash block runs, in page order, unless skipped. A ```text block right after a block that
runs (only blank lines between) is that block's expected output; an unlabelled block there is an error, so no
output sample goes unchecked. See docs/architecture.md, "Tests".
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

PYTHON = {"python", "py"}
SHELL = {"bash", "sh", "shell"}
DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(?P<name>[\w-]+)(?P<rest>.*?)-->", re.DOTALL)
FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")


@dataclass
class Block:
    """A fenced block: where it starts (1-based line of the opening fence), its language and text."""

    line: int
    lang: str
    text: str
    end: int  # line of the closing fence


@dataclass
class Step:
    """One thing the runner does, in page order."""

    kind: str  # "python", "shell" or "file"
    line: int
    code: str
    statuses: list[int] | None = None  # shell: expected exit status per command
    path: str | None = None  # file: where the text goes
    expected: str | None = None  # the text block after it: its expected output
    expected_line: int | None = None

    def to_json(self) -> dict:
        return {"kind": self.kind, "line": self.line, "code": self.code, "statuses": self.statuses, "path": self.path}


@dataclass
class Page:
    path: Path
    steps: list[Step] = field(default_factory=list)
    skipped: list[tuple[int, str]] = field(default_factory=list)  # (line, reason)
    problems: list[str] = field(default_factory=list)  # mistakes in the page's markup, each "line N: ..."

    @property
    def runs(self) -> bool:
        return any(step.kind != "file" for step in self.steps)


def blocks_and_directives(text: str) -> list[tuple[int, object]]:
    """The page's fenced blocks and docs-test comments, in order, as ``(line, Block | (name, rest))``."""
    lines = text.splitlines()
    found: list[tuple[int, object]] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening:
            fence, info = opening["fence"], opening["info"].strip()
            end = i + 1
            while end < len(lines) and not (
                lines[end].strip().startswith(fence[0] * len(fence)) and not lines[end].strip().strip(fence[0])
            ):
                end += 1
            lang = info.split()[0].lower() if info else ""
            found.append((i + 1, Block(i + 1, lang, "\n".join(lines[i + 1 : end]) + "\n", end + 1)))
            i = end + 1
            continue
        if "<!--" in lines[i] and "docs-test:" in lines[i]:
            end = i
            while end < len(lines) and "-->" not in lines[end]:
                end += 1
            comment = "\n".join(lines[i : end + 1])
            match = DIRECTIVE.search(comment)
            found.append((i + 1, (match["name"], match["rest"]) if match else ("", comment)))
            i = end + 1
            continue
        i += 1
    return found


def parse_page(path: Path) -> Page:
    text = path.read_text(encoding="utf-8")
    page = Page(path)
    items = blocks_and_directives(text)
    lines = text.splitlines()
    pending: dict[str, tuple[int, str]] = {}  # directive name -> (line, argument) for the next block
    previous_ran: Step | None = None  # the last block that runs, while only blank lines follow it
    previous_end = 0
    for line, item in items:
        between_blank = all(not lines[k].strip() for k in range(previous_end, line - 1))
        if isinstance(item, tuple):
            name, rest = item
            previous_ran = None
            if name == "preamble":
                code = textwrap.dedent(rest.strip("\n"))
                if not code.strip():
                    page.problems.append(f"line {line}: an empty preamble")
                page.steps.append(Step("python", line, code))
            elif name in ("skip", "status", "file"):
                if name in pending:
                    page.problems.append(f"line {line}: two '{name}' comments before one block")
                pending[name] = (line, " ".join(rest.split()))
            else:
                page.problems.append(f"line {line}: unknown docs-test comment {name!r} (preamble, skip, status, file)")
            previous_end = line
            continue
        block: Block = item
        if previous_ran is not None and between_blank and not pending and block.lang in ("text", ""):
            if block.lang == "":
                page.problems.append(
                    f"line {line}: an unlabelled block right after the block of line {previous_ran.line}: "
                    "label it ```text (its output, checked) or name its language"
                )
            else:
                previous_ran.expected, previous_ran.expected_line = block.text, line
            previous_ran = None
            previous_end = block.end
            continue
        previous_ran = None
        previous_end = block.end
        _take(page, block, pending)
        if page.steps and page.steps[-1].line == block.line and page.steps[-1].kind != "file":
            previous_ran = page.steps[-1]
        pending = {}
    for name, (line, _) in pending.items():
        page.problems.append(f"line {line}: '{name}' comment with no code block after it")
    return page


def _take(page: Page, block: Block, pending: dict[str, tuple[int, str]]) -> None:
    runnable = block.lang in PYTHON | SHELL
    if "file" in pending:
        line, target = pending["file"]
        if not target:
            page.problems.append(f"line {line}: 'file' needs a path")
        page.steps.append(Step("file", block.line, block.text, path=target))
        runnable = False
    if "skip" in pending:
        line, reason = pending["skip"]
        if not reason:
            page.problems.append(f"line {line}: a skip without a reason (say why the block cannot run here)")
        if not runnable:
            page.problems.append(f"line {line}: 'skip' before a block that would not run anyway (line {block.line})")
        page.skipped.append((block.line, reason))
        return
    if not runnable:
        if "status" in pending:
            page.problems.append(f"line {pending['status'][0]}: 'status' before a block that is not shell")
        return
    statuses = None
    if "status" in pending:
        line, rest = pending["status"]
        try:
            statuses = [int(word) for word in rest.split()]
        except ValueError:
            statuses = []
        if block.lang not in SHELL or not statuses:
            page.problems.append(f"line {line}: 'status' takes exit statuses and goes before a shell block")
        elif len(statuses) != len(shell_commands(block.text)):
            page.problems.append(
                f"line {line}: {len(statuses)} statuses for {len(shell_commands(block.text))} commands"
            )
    kind = "python" if block.lang in PYTHON else "shell"
    page.steps.append(Step(kind, block.line, block.text, statuses=statuses))


def shell_commands(text: str) -> list[str]:
    """A shell block's commands: its lines, with backslash continuations joined, without blank and comment lines."""
    commands: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1].rstrip() + " "
            continue
        commands.append(current + stripped)
        current = ""
    if current.strip():
        commands.append(current.strip())
    return commands
