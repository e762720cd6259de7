"""Helpers of the tests (not fixtures)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo.parent),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def family(pid: int) -> set[int]:
    """``pid`` and its descendants, from /proc/*/stat (readable whoever
    owns the processes, also non-dumpable ones)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                name, rest = f.read().split("(", 1)[1].rsplit(")", 1)
                ppid = int(rest.split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if name == "hutch-spare":
            # `hutch serve`'s idle spare, replaced after every request
            # (docs/machine.md): not a process a call left.
            continue
        parents.setdefault(ppid, []).append(int(entry))
    out = {pid}
    todo = [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def family_settles(pid: int, want: set[int], within: float = 10.0) -> set[int]:
    """``family(pid)`` once it is ``want``, or as it is after ``within``
    seconds. A process can be seen for a moment after the call that made
    it answered: a request's process that sent its result and is exiting,
    or the server's next spare between its fork and its renaming. What a
    call leaks stays (a leaked process ran ``sleep`` for a long time)."""
    deadline = time.monotonic() + within
    while (now := family(pid)) != want and time.monotonic() < deadline:
        time.sleep(0.01)
    return now


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def sleeps(n: str) -> list[int]:
    """Live processes whose argv is exactly ``sleep N``."""
    want = f"sleep\0{n}\0".encode()
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read() != want:
                    continue
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    continue
        except OSError:
            continue
        out.append(int(entry))
    return out
