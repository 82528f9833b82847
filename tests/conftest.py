"""Suite-wide checks: the suite leaves no file in the checkout, and a failing run names upstream versions."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.checkout_guard import leftovers, snapshot, upstream_versions

CHECKOUT = Path(__file__).resolve().parent.parent


def pytest_report_header(config: pytest.Config) -> str:
    return f"upstream: {upstream_versions()}"


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if exitstatus != 0:
        terminalreporter.section("upstream versions (is a new release what broke it?)")
        terminalreporter.write_line(upstream_versions())


@pytest.fixture(scope="session", autouse=True)
def checkout_stays_clean():
    """Fails the session's last test at teardown when the tests left a file in the checkout."""
    before = snapshot(CHECKOUT)
    yield
    after = snapshot(CHECKOUT)
    if before is None or after is None:
        return
    left = leftovers(before, after)
    if left:
        pytest.fail(
            f"the tests left {len(left)} file(s) in the checkout {CHECKOUT} (tests write only into tmp_path; or files made there while the suite ran): "
            + ", ".join(left[:10]), pytrace=False,
        )
