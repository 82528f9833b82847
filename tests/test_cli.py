"""The command line through real subprocesses, on real trace files: show, diff, plot, demo; exit codes 0/1/2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nbtrace.cli import main
from tests.models.ports import BUGS, RENAME, trace_original, trace_port

ENTRY = shutil.which("nbtrace")
REPO = Path(__file__).resolve().parents[1]


def run(*args: str, entry: bool = False, cwd: Path | None = None) -> subprocess.CompletedProcess:
    command = [ENTRY, *args] if entry else [sys.executable, "-m", "nbtrace", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli")
    trace_original(base / "original", use_repr=True, prune=True)
    trace_port(base / "port", use_repr=True, prune=True)
    trace_port(base / "buggy", ["rotary_k"], use_repr=True, prune=True)
    (base / "rename.json").write_text(json.dumps(RENAME))
    lines = ["# b's names -> a's", ""] + [f"{pattern} = {replacement}" for pattern, replacement in RENAME.items()]
    (base / "rename.txt").write_text("\n".join(lines) + "\n")
    broken = base / "broken"
    broken.mkdir()
    text = (base / "original" / "LlamaForCausalLM_debug_tree_FULL_TENSORS.json").read_text()
    (broken / "Broken_debug_tree_FULL_TENSORS.json").write_text(text[: len(text) // 2])
    return base


def assert_one_line_error(result: subprocess.CompletedProcess, names: str) -> None:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nbtrace: error: ") and names in lines[0], lines[0]
    assert "Traceback" not in result.stderr


def test_show_prints_the_tree_with_shapes_and_stats(files, capsys):
    result = run("show", str(files / "original"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.splitlines()[0].startswith("LlamaForCausalLM")
    assert "o_proj  [2, 7, 32] float32 mean=" in out and "std=" in out
    assert "layers 1 pruned" in out and "layers 1–1" not in out
    assert main(["show", str(files / "original"), "--depth", "1"]) == 0
    shallow = capsys.readouterr().out
    assert "o_proj" not in shallow and "calls below" in shallow
    assert main(["show", str(files / "original"), "--filter", "down_proj"]) == 0
    filtered = capsys.readouterr().out
    assert "down_proj" in filtered and "q_proj" not in filtered


def test_diff_agree_exits_0(files):
    result = run("diff", str(files / "original"), str(files / "port"), "--rename", str(files / "rename.json"),
                 entry=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "agree" in result.stdout and "(rename)" in result.stdout


def test_diff_diverge_exits_1_and_names_the_module(files):
    result = run("diff", str(files / "original"), str(files / "buggy"))
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"first divergence: {BUGS['rotary_k']}" in result.stdout
    table = result.stdout.split("\n\n", 1)[1]
    assert ">>>" in table and "self_attn" in table and "blocks.0.attn" in table
    assert "max_rel=" in result.stdout


@pytest.mark.parametrize("rename", [None, "rename.json", "rename.txt"])
def test_diff_in_process(files, rename, capsys):
    """The same command in-process (fast), for every rename-file format and the agree case."""
    extra = ["--rename", str(files / rename)] if rename else []
    assert main(["diff", str(files / "original"), str(files / "buggy"), *extra]) == 1
    assert f"first divergence: {BUGS['rotary_k']}" in capsys.readouterr().out
    assert main(["diff", str(files / "original"), str(files / "port"), *extra]) == 0
    assert "agree" in capsys.readouterr().out


def test_bad_input_exits_2_with_one_line(files, tmp_path):
    assert_one_line_error(run("show", str(tmp_path / "nowhere")), "nowhere")
    assert_one_line_error(run("diff", str(files / "original"), str(files / "broken"), entry=True),
                          "Broken_debug_tree_FULL_TENSORS.json")


def test_bad_input_in_process(files, tmp_path, capsys):
    def check(args, names):
        code = main(args)
        err = capsys.readouterr().err
        assert code == 2, err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nbtrace: error: ") and names in lines[0], err

    check(["show", str(files / "broken")], "Broken_debug_tree_FULL_TENSORS.json")
    check(["plot", str(files / "broken"), "-o", str(tmp_path / "x.png")], "Broken")
    bad_rename = tmp_path / "bad.json"
    bad_rename.write_text('{"(unclosed": "x"}')
    check(["diff", str(files / "original"), str(files / "port"), "--rename", str(bad_rename)], "bad.json")
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("no separator here\n")
    check(["diff", str(files / "original"), str(files / "port"), "--rename", str(garbage)], "garbage.txt")
    check(["diff", str(files / "original"), str(files / "port"), "--rename", str(tmp_path / "none.json")], "none.json")
    check(["plot", str(files / "original"), "-o", str(tmp_path / "no" / "dir.png")], "dir.png")
    check(["plot", str(files / "original"), "-o", str(tmp_path / "x.unknown")], "x.unknown")
    check(["plot", str(files / "original"), "-o", str(tmp_path / "x.png"), "--where", "("], "--where")
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    check(["demo", "-o", str(a_file)], "a_file")  # the output folder is a file: one line, not a traceback


@pytest.mark.parametrize("args", [["demo", "--layers", "-1"], ["demo", "--depth", "-1"], ["show", ".", "--depth", "-2"],
                                  ["diff", ".", ".", "--rows", "0"], ["plot", ".", "-o", "x.png", "--dpi", "0"]])
def test_counts_below_their_least_are_refused_by_name(args, capsys):
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    option = next(a for a in args if a.startswith("--"))
    assert f"argument {option}:" in capsys.readouterr().err


def test_plot_writes_an_image_atomically(files, tmp_path):
    out = tmp_path / "stats.png"
    result = run("plot", str(files / "original"), "-o", str(out), "--compare", str(files / "buggy"))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in tmp_path.iterdir()] == ["stats.png"]  # no temporary file left behind
    svg = tmp_path / "down.svg"
    result = run("plot", str(files / "original"), "-o", str(svg), "--where", r"down_proj$", "--stat", "std",
                 entry=True)
    assert result.returncode == 0, result.stderr
    assert svg.read_text().lstrip().startswith("<?xml")


def test_demo_still_works(tmp_path):
    result = run("demo", "-o", str(tmp_path / "demo"), "--layers", "2", entry=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("DemoLM")
    assert (tmp_path / "demo" / "DemoLM_debug_tree_FULL_TENSORS.json").is_file()
    # every file it wrote is named, and nothing it did not write
    listed = [line.strip() for line in result.stdout.split("files written to", 1)[1].splitlines()[1:] if line.strip()]
    assert listed == sorted(p.name for p in (tmp_path / "demo").iterdir())
    assert "DemoLM_debug_tree_NBTRACE.json" in listed


@pytest.mark.parametrize("command", ["diff", "show"])
def test_a_closed_pipe_keeps_the_exit_status(files, command):
    """`nbtrace diff A B | head` under `set -o pipefail`: the reader stops early, the verdict still comes out."""
    args = ["diff", str(files / "original"), str(files / "buggy")]
    if command == "show":
        args = ["show", str(files / "original")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    reader, writer = os.pipe()
    os.close(reader)  # the reader has gone before nbtrace writes a byte: every write is a broken pipe
    try:
        done = subprocess.run([sys.executable, "-m", "nbtrace", *args], stdout=writer, stderr=subprocess.PIPE,
                              text=True, timeout=300, env=env)
    finally:
        os.close(writer)
    assert done.returncode == (1 if command == "diff" else 0), done.stderr
    assert "Traceback" not in done.stderr and "Broken pipe" not in done.stderr, done.stderr


def test_pipefail_sees_the_divergence_through_head(files):
    # head -n 0 exits before nbtrace has started writing: the pipe is closed under it, as `| head` does to long output
    diff = f'"{sys.executable}" -m nbtrace diff "{files / "original"}" "{files / "buggy"}"'
    script = f"set -o pipefail; {diff} | head -n 0"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
