"""docs/distributed.md runs as written: its script, its shell lines (the real ``torchrun``, 2 gloo
processes), the outputs it shows, and its Python block."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "distributed.md"
_BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_NUMBER = re.compile(r"\d\.\d+e[+-]\d+|\d+\.\d+")
#: what a rank prints when gloo's C++ threads are torn down during interpreter exit on a loaded machine (SIGABRT
#: after ``destroy_process_group``, every file written: torch's, not the script's; tests/rank_exit.py). The run is
#: then made once more, and judged as any run.
GLOO_EXIT_ABORT = "terminate called without an active exception"


def blocks(language: str) -> list[str]:
    return [body for lang, body in _BLOCK.findall(DOC.read_text()) if lang == language]


def command(line: str) -> tuple[list[str], int | None]:
    """A shell line of the doc as argv (comments dropped), and the exit status its comment promises."""
    text, _, comment = line.partition("#")
    words = text.split()
    program = {"python": [sys.executable], "nbtrace": [sys.executable, "-m", "nbtrace"]}.get(words[0])
    if words[0] == "torchrun":
        found = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
        program = [found] if found else [sys.executable, "-m", "torch.distributed.run"]
    assert program is not None, f"unexpected command in {DOC.name}: {line}"
    status = re.search(r"exit status (\d)", comment)
    return program + words[1:], int(status.group(1)) if status else 0


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(
        [str(DOC.parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]))
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{argv} timed out:\n{out}")
    return subprocess.CompletedProcess(argv, proc.returncode, out)


def shows(documented: str, output: str) -> bool:
    """Every documented line is in the output, in order (numbers may differ in their last digits)."""
    lines = iter(output.splitlines())
    for want in documented.strip().splitlines():
        pattern = re.compile("".join(
            f"(?:{_NUMBER.pattern})" if part and _NUMBER.fullmatch(part) else re.escape(part)
            for part in re.split(f"({_NUMBER.pattern})", want.rstrip())))
        if not any(pattern.fullmatch(line.rstrip()) for line in lines):
            return False
    return True


@pytest.mark.timeout(900)
def test_the_worked_example_runs_as_written(tmp_path):
    script = next(b for b in blocks("python") if b.startswith("# tp_mlp.py"))
    (tmp_path / "tp_mlp.py").write_text(script)
    clean, damaged = blocks("bash")[-2:]
    shown = blocks("")
    outputs = []
    for line in [*clean.splitlines(), *damaged.splitlines()]:
        argv, status = command(line)
        done = run(argv, tmp_path)
        if line.startswith("torchrun") and done.returncode != 0 and GLOO_EXIT_ABORT in done.stdout:
            done = run(argv, tmp_path)  # gloo's teardown aborted a rank at exit (see GLOO_EXIT_ABORT): once more
        assert done.returncode == status, f"{line}\n{done.stdout}"
        if argv[1:3] == ["-m", "nbtrace"]:
            outputs.append(done.stdout)
    assert sorted(p.name for p in (tmp_path / "traces" / "tp").iterdir()) == ["rank_0", "rank_1"]
    assert shows(shown[0], outputs[0]), outputs[0]  # the clean run agrees, with its rules
    assert shows(shown[1], outputs[1]), outputs[1]  # the damaged one names MLP.up and rank 1
    notebook = next(b for b in blocks("python") if "nbtrace.compare(" in b)
    done = run([sys.executable, "-c", notebook], tmp_path)
    assert done.returncode == 0, done.stdout
    assert done.stdout.startswith("MLP.up Shard(1) {1: 0.79"), done.stdout
