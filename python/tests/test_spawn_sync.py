"""``hutch.spawn`` / ``Command.spawn`` / ``Session.spawn``: the sync
process handle, its output read as it comes."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import alive

import hutch

LINES = "for i in 1 2 3; do echo line$i; echo err$i >&2; done"


def test_lines_stream_and_stderr_is_captured(work: Path) -> None:
    with hutch.spawn(["sh", "-c", LINES], workspace=work) as proc:
        assert proc.sandbox_pid is not None
        assert list(proc.stdout) == [b"line1\n", b"line2\n", b"line3\n"]
        report = proc.wait()
    assert report.reason == "exited" and report.exit_code == 0
    assert proc.result().stderr == b"err1\nerr2\nerr3\n"


def test_a_line_arrives_while_the_command_runs_and_kill_ends_it(work: Path) -> None:
    proc = hutch.Command(["sh", "-c", "echo first; exec sleep 60"], workspace=work).spawn()
    assert proc.stdout.readline() == b"first\n"
    # Read before the end: the command still runs.
    assert proc.returncode is None
    # The start event may come after the first line: started() waits for it.
    start = proc.started()
    assert start is not None and proc.sandbox_pid == start.pid
    sandbox = start.pid
    assert alive(sandbox)
    proc.kill()
    report = proc.wait()
    assert report.reason == "signaled" and report.signal == 9, report
    assert not alive(sandbox)


def test_callbacks_get_every_line_without_a_deadlock(work: Path) -> None:
    out: list[bytes] = []
    err: list[bytes] = []
    # 4+ MiB on each pipe, more than any pipe or the pause mark holds.
    script = "seq 1 600000; seq 1 600000 >&2"
    proc = hutch.spawn(
        ["sh", "-c", script],
        workspace=work,
        stderr="stream",
        on_stdout=out.append,
        on_stderr=err.append,
        output_limit=None,
    )
    report = proc.wait()
    assert report.exit_code == 0, report
    assert len(out) == 600000 and out[0] == b"1\n" and out[-1] == b"600000\n"
    assert err == out
    with pytest.raises(hutch.UsageError):
        proc.stdout.readline()  # the callback had it


def test_setup_failure_raises_on_entry(work: Path, tmp_path: Path) -> None:
    with (
        pytest.raises(hutch.SetupError),
        hutch.spawn(["true"], workspace=work, binds=[(tmp_path / "missing", "/x")]),
    ):
        pytest.fail("the block of a command that never started ran")


def test_an_exception_in_the_block_kills_the_sandbox(work: Path) -> None:
    with pytest.raises(RuntimeError), hutch.spawn(["sleep", "60"], workspace=work) as proc:
        sandbox = proc.sandbox_pid
        raise RuntimeError("leave early")
    assert proc.returncode is not None
    assert sandbox is not None and not alive(sandbox)


def test_unread_streamed_stdout_is_not_silently_dropped(work: Path) -> None:
    proc = hutch.spawn(["echo", "lost"], workspace=work)
    with pytest.raises(hutch.UsageError, match="never read"):
        proc.result()
    assert hutch.spawn(["echo", "kept"], workspace=work, stdout="capture").result().stdout == (
        b"kept\n"
    )


def test_session_spawn(tmp_path: Path, state_dir: Path, work: Path) -> None:
    with hutch.Session.create(from_dir=work, state_dir=state_dir) as s:
        lines: list[bytes] = []
        with s.spawn(["sh", "-c", "cat hello.txt; echo more"], on_stdout=lines.append) as proc:
            pass
        res = proc.result()
        assert isinstance(res, hutch.SessionResult) and res.command_seq == 1
        assert lines == [b"hello\n", b"more\n"]
