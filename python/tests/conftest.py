"""Fixtures: every test runs against the installed wheel's hutch binary, as
whoever runs pytest (CI runs the suite as root and again as uid 65534)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import git

import hutch


def pytest_report_header() -> str:
    return f"hutch {hutch.__version__} at {hutch.binary()}, uid {os.geteuid()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    # HUTCH_REQUIRE=all (CI): a test that would skip fails instead.
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and os.environ.get("HUTCH_REQUIRE") == "all":
        report.outcome = "failed"
        report.longrepr = f"skipped under HUTCH_REQUIRE=all: {report.longrepr}"


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    d = tmp_path / "state"
    d.mkdir(mode=0o700)
    return d


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """A directory to use as a run's workspace (the host copy is never
    modified)."""
    d = tmp_path / "work"
    d.mkdir()
    (d / "hello.txt").write_text("hello\n")
    return d


RUN_TESTS = """\
import sys
import traceback

sys.path[:0] = ["src", "tests"]
import test_app

failures = 0
for name in [n for n in dir(test_app) if n.startswith("test_")]:
    try:
        getattr(test_app, name)()
    except AssertionError:
        failures += 1
        traceback.print_exc()
with open("test-results.xml", "w") as f:
    f.write(f'<testsuite name="app" tests="1" failures="{failures}"/>\\n')
sys.exit(1 if failures else 0)
"""


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str]:
    """A git repository with one commit: (path, commit id)."""
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q", "-b", "main")
    (r / "src").mkdir()
    (r / "src" / "app.py").write_text(
        "def main():\n    return add(1, 2)\n\n\ndef add(a, b):\n    return a - b\n"
    )
    (r / "src" / "util.py").write_text("def helper():\n    pass\n")
    (r / "tests").mkdir()
    (r / "tests" / "test_app.py").write_text(
        "from app import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    # The project's test runner (stdlib only: the sandbox sees the host's
    # python3): runs the tests and writes a JUnit report.
    (r / "run_tests.py").write_text(RUN_TESTS)
    (r / "README.md").write_text("# demo\n")
    (r / "old.txt").write_text("to be deleted\n")
    (r / "logo.bin").write_bytes(bytes(range(256)) * 4)
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "initial")
    return r, git(r, "rev-parse", "HEAD")
