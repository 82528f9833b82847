"""Start one process per rank of a gloo run, with a deadline, and never leave one behind.

Each rank runs ``python <script> <args…>`` with the environment ``torchrun`` would give it (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) and ``OMP_NUM_THREADS=1``, in its own
session so that it and its children can be killed together, writing to ``<log_dir>/rank_<r>.log``
(a file, not a pipe: a chatty rank cannot block while another is waited for).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


class LaunchError(RuntimeError):
    """A rank failed or the run timed out; the message holds the end of every rank's log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _tails(log_dir: Path, world_size: int, lines: int = 25) -> str:
    out = []
    for rank in range(world_size):
        log = log_dir / f"rank_{rank}.log"
        text = log.read_text(errors="replace").splitlines()[-lines:] if log.exists() else ["<no log>"]
        out.append(f"--- rank {rank} ---\n" + "\n".join(text))
    return "\n".join(out)


def launch(script: Path, args: list[str], world_size: int, log_dir: Path, timeout: float = 300) -> float:
    """Run ``script`` on ``world_size`` ranks and wait for all; returns the seconds it took."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    started = time.monotonic()
    procs: list[subprocess.Popen] = []
    try:
        for rank in range(world_size):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
            with open(log_dir / f"rank_{rank}.log", "w") as log:
                procs.append(subprocess.Popen([sys.executable, str(script), *args], env=env, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True))
        for proc in procs:
            proc.wait(timeout=max(0.0, started + timeout - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise LaunchError(f"{world_size} ranks timed out after {timeout:.0f}s\n{_tails(log_dir, world_size)}") from None
    finally:
        _stop(procs)
    codes = [proc.returncode for proc in procs]
    if any(codes):
        raise LaunchError(f"ranks exited with {codes}\n{_tails(log_dir, world_size)}")
    return time.monotonic() - started
