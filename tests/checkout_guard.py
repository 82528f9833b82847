"""What the suite may leave in the checkout (nothing), and the versions of the packages it runs against.

``tests/conftest.py`` uses both: the checkout is listed before and after the session (``snapshot``), and
a file that appeared (``leftovers``) fails the run; a failing run's summary names the versions of the
upstream packages (``upstream_versions``), so a failure caused by a new release says which one.
"""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

#: what the tests may create: caches, an editable install, and the browser tests' screenshots (kept on purpose)
ALLOWED = ("__pycache__/", ".pytest_cache/", ".egg-info/", "tests/artifacts/")

#: the packages whose new releases have broken the suite before, or could: named in a failing run's summary
UPSTREAM = (
    "torch", "transformers", "safetensors", "numpy", "pandas", "matplotlib",
    "ipython", "ipywidgets", "jupyterlab", "nbclient", "playwright", "pytest",
)


def snapshot(root: Path) -> set[str] | None:
    """Every untracked or ignored file under ``root``'s git checkout (``git status``), or None without git."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--ignored", "--untracked-files=all", "-z"],
            cwd=root, capture_output=True, text=True, timeout=60, check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    entries = (entry for entry in done.stdout.split("\0") if entry[:2] in ("??", "!!"))
    return {entry[3:] for entry in entries}


def leftovers(before: set[str], after: set[str]) -> list[str]:
    """The files in ``after`` but not ``before`` that are not in ``ALLOWED``, sorted."""
    return sorted(path for path in after - before if not any(part in f"/{path}" for part in ALLOWED))


def upstream_versions() -> str:
    """``name==version`` of each installed package of ``UPSTREAM``, one line."""
    found = []
    for name in UPSTREAM:
        try:
            found.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(found)
