"""Fixtures of the browser tests: Debian's Chromium through Playwright, and JupyterLab / Notebook 7 on loopback.

These tests skip only when no Chromium is found AND ``NBTRACE_REQUIRE_BROWSER`` is unset;
CI sets it, so there a missing browser is a failure. Only one ``sync_playwright()`` may
live in a process, so the browser is one session-scoped fixture here.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
ARTIFACTS = TESTS / "artifacts"
CHROME_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync", "--disable-background-networking",
               "--disable-component-update"]


def find_chromium() -> str | None:
    """The Chromium to drive: $NBTRACE_CHROMIUM, else ``chromium`` on PATH or in /usr/bin."""
    for candidate in (os.environ.get("NBTRACE_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = find_chromium()
    if path is None:
        if os.environ.get("NBTRACE_REQUIRE_BROWSER"):
            pytest.fail("NBTRACE_REQUIRE_BROWSER is set but no Chromium was found (apt-get install -y chromium)")
        pytest.skip("no Chromium found (apt-get install -y chromium, or set NBTRACE_CHROMIUM); browser tests skipped")
    return path


@pytest.fixture(scope="session")
def browser(chromium_path: str):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path, args=CHROME_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


class JupyterServer:
    """One JupyterLab or Notebook 7 server on a free loopback port, with its own config, data and kernel dirs."""

    def __init__(self, app: str, root: Path, home: Path) -> None:
        self.app = app
        self.root = root
        self.token = secrets.token_hex(16)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        dirs = {k: home / k.lower() for k in ("CONFIG", "DATA", "RUNTIME")}
        settings = dirs["CONFIG"] / "lab" / "user-settings" / "@jupyterlab"
        # No news toast; every cell in the DOM (no windowing), so the tests can reach any output.
        (settings / "apputils-extension").mkdir(parents=True)
        (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False})
        )
        (settings / "notebook-extension").mkdir(parents=True)
        (settings / "notebook-extension" / "tracker.jupyterlab-settings").write_text(json.dumps({"windowingMode": "none"}))
        env = dict(os.environ, JUPYTER_PLATFORM_DIRS="1", IPYTHONDIR=str(home / "ipython"), PYTHONPATH=str(TESTS.parent),
                   **{f"JUPYTER_{k}_DIR": str(v) for k, v in dirs.items()})
        cls = "LabApp" if app == "lab" else "JupyterNotebookApp"
        cmd = [sys.executable, "-m", "jupyter", app, "--no-browser", "--allow-root", f"--port={self.port}",
               "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={root}",
               f"--{cls}.expose_app_in_browser=True"]
        if app == "lab":
            cmd += ["--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                    "--LabApp.extension_manager=readonly"]
        self.log_path = home / "server.log"
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"jupyter {self.app} exited:\n{self.log_path.read_text()}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/status?token={self.token}", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"jupyter {self.app} did not answer within {timeout}s:\n{self.log_path.read_text()}")

    def url(self, notebook: str) -> str:
        path = f"lab/tree/{notebook}" if self.app == "lab" else f"notebooks/{notebook}"
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._log.close()


@pytest.fixture(scope="session")
def jupyter_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("jupyter-root")


@pytest.fixture(scope="module", params=["lab", "notebook"])
def jupyter(request, jupyter_root: Path, tmp_path_factory, chromium_path: str) -> Iterator[JupyterServer]:
    """One server per app for the whole module, serving ``jupyter_root``."""
    server = JupyterServer(request.param, jupyter_root, tmp_path_factory.mktemp(f"home-{request.param}"))
    try:
        yield server
    finally:
        server.stop()
