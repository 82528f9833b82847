"""The checkout guard of tests/conftest.py: it sees a new file, and only a new file."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.checkout_guard import leftovers, snapshot, upstream_versions

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _repository(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("traces/\n")
    (tmp_path / "kept.txt").write_text("tracked")
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    return tmp_path


def test_a_file_a_test_leaves_is_named_even_when_ignored(tmp_path):
    root = _repository(tmp_path)
    before = snapshot(root)
    (root / "nbtrace_traces" / "Boom").mkdir(parents=True)
    (root / "nbtrace_traces" / "Boom" / "Boom_debug_tree_SUMMARY.json").write_text("{}")
    (root / "traces").mkdir()
    (root / "traces" / "a.json").write_text("{}")
    assert leftovers(before, snapshot(root)) == ["nbtrace_traces/Boom/Boom_debug_tree_SUMMARY.json", "traces/a.json"]


def test_caches_and_files_there_before_are_not_leftovers(tmp_path):
    root = _repository(tmp_path)
    (root / "notes.txt").write_text("mine")
    before = snapshot(root)
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "pkg" / "__pycache__" / "m.cpython-312.pyc").write_bytes(b"")
    (root / "kept.txt").write_text("changed")  # a tracked file: git diff shows it, this guard is about new files
    assert leftovers(before, snapshot(root)) == []


def test_the_versions_line_names_torch_and_transformers():
    line = upstream_versions()
    assert "torch==" in line and "transformers==" in line
