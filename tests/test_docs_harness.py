"""The docs harness itself: it fails a page that drifts, and refuses markup that would hide a block."""

from __future__ import annotations

import textwrap

import pytest

from tests.docs_harness.check import page_failures, run_page
from tests.docs_harness.expect import matches
from tests.docs_harness.pages import parse_page, shell_commands

FENCE = "```"


def page(tmp_path, text: str):
    path = tmp_path / "page.md"
    path.write_text(textwrap.dedent(text).replace("'''", FENCE))
    return parse_page(path)


def test_drift_fails_and_a_failing_block_stops_the_page(tmp_path):
    drifting = page(tmp_path, """
        # A page

        <!-- docs-test: preamble
        x = 41
        -->

        '''python
        print(x + 1)
        '''

        '''text
        42
        '''

        '''python
        print("the code says this")
        '''

        '''text
        the page says that
        '''

        '''python
        x  # -> 40
        '''

        <!-- docs-test: file note.txt -->
        '''
        written by the page
        '''

        '''bash
        cat note.txt
        false
        '''

        '''python
        print("never runs")
        '''
        """)
    assert not drifting.problems
    folder = tmp_path / "work"
    folder.mkdir()
    results = run_page(drifting, folder)
    assert len(results) == 6  # preamble, three blocks, the file, the shell block that failed; not the last
    assert results[5]["output"] == "written by the page\n" and results[5]["statuses"] == [0, 1]
    failures = page_failures(drifting, results)
    assert len(failures) == 3, failures
    assert failures[0].startswith("page.md:16: the output differs") and "+the code says this" in failures[0]
    assert failures[1].startswith("page.md:24: line 1 of the block is 41, the page says 40")
    assert failures[2].startswith("page.md:33: the shell block failed")
    assert "`false` exited 1 (expected 0)" in failures[2]


@pytest.mark.parametrize(
    "text, problem",
    [
        ("<!-- docs-test: skip -->\n'''python\npass\n'''\n", "a skip without a reason"),
        ("<!-- docs-test: skip needs a GPU -->\n'''json\n{}\n'''\n", "would not run anyway"),
        ("'''python\nprint(1)\n'''\n\n'''\n1\n'''\n", "unlabelled block right after"),
        ("<!-- docs-test: status 1 -->\n'''bash\ntrue\ntrue\n'''\n", "1 statuses for 2 commands"),
        ("<!-- docs-test: status 1 -->\n'''python\npass\n'''\n", "goes before a shell block"),
        ("<!-- docs-test: skipp typo -->\n'''python\npass\n'''\n", "unknown docs-test comment 'skipp'"),
        ("text\n<!-- docs-test: skip nothing follows -->\n", "with no code block after it"),
    ],
)
def test_markup_that_would_hide_a_block_is_refused(tmp_path, text, problem):
    problems = page(tmp_path, text).problems
    assert len(problems) == 1 and problem in problems[0], problems


def test_what_runs_and_what_is_skipped(tmp_path):
    parsed = page(tmp_path, """
        <!-- docs-test: skip installs packages -->
        '''bash
        pip install nbtrace
        '''

        '''python
        print(1)
        '''

        Prose between, so this text block is no output:

        '''text
        anything
        '''

        ''''markdown
        '''python
        inside another fence: not run
        '''
        ''''
        """)
    assert not parsed.problems
    assert parsed.skipped == [(3, "installs packages")]
    assert [(step.kind, step.code, step.expected) for step in parsed.steps] == [("python", "print(1)\n", None)]


def test_shell_commands_join_continuations_and_drop_comments():
    assert shell_commands("# a comment\nnbtrace diff a \\\n  b   # trailing\n\nnbtrace show a\n") == [
        "nbtrace diff a b   # trailing", "nbtrace show a"]


def test_expected_output_wildcards():
    assert matches("a\n...\nd", "a\nb\nc\nd\n")
    assert matches("a\n...\nb", "a\nb")  # no lines at all
    assert matches("files written to .../demo:", "files written to /tmp/x/demo:  \n\n")
    assert not matches("a\nb", "a\nb\nc")  # more output than the page shows
    assert not matches("mean=0.31", "mean=0.32")
