"""Synchronous commands: ``hutch.run`` and ``hutch.Command``."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import _serve
from ._agent import agent_options
from ._core import Launch, kill_sandbox, kill_sandbox_of, parse_status, warn_unenforced
from ._options import PathLike
from ._spawn import LineCallback, Process, StreamMode
from ._types import Result, StartEvent

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ._options import Options

#: Seconds a cancelled command's hutch gets to report after its sandbox
#: was killed, before hutch itself is killed.
CANCEL_GRACE = 5.0


def run(
    args: Sequence[str],
    *,
    input: bytes | None = None,
    check: bool = False,
    **options: Unpack[Options],
) -> Result:
    """Run ``args`` in a sandbox and wait for it.

    The result holds stdout and stderr (together at most ``output_limit``,
    16 MiB unless given; the excess is discarded and
    ``report.output_truncated`` says so), the exit report, and the egress
    proxy's decisions. A command that fails, times out or is killed is a
    result, not an exception, unless ``check=True`` (then
    ``hutch.CommandFailed``, or ``hutch.Timeout`` for a timeout). hutch's
    own failures raise: ``SetupError`` (e.g. a missing bind source),
    ``SpecError``, ``PolicyError``, ``UsageError``.
    """
    return execute(args, options, input=input, check=check)


def run_agent(
    agent: str,
    *,
    prompt: str,
    repo: PathLike | None = None,
    workspace_at: str | None = None,
    allowed_egress: Sequence[str] = (),
    agents_dir: PathLike | None = None,
    cli_args: Sequence[str] = (),
    input: bytes | None = None,
    check: bool = False,
    **options: Unpack[Options],
) -> Result:
    """Run an agent CLI on one prompt and wait: ``hutch.aio.spawn_agent``'s
    keywords (the profile, ``repo``/``workspace_at``, ``allowed_egress``,
    ``agents_dir``, ``cli_args``) with ``hutch.run``'s result (output
    captured, bounded by ``output_limit``)."""
    opts = agent_options(
        agent,
        prompt=prompt,
        repo=repo,
        workspace_at=workspace_at,
        allowed_egress=allowed_egress,
        agents_dir=agents_dir,
        options=options,
    )
    return execute(cli_args, opts, input=input, check=check, command_from_profile=True)


def execute(
    args: Sequence[str],
    options: Any,
    *,
    input: bytes | None,
    check: bool,
    session: str | None = None,
    state_dir: PathLike | None = None,
    wait: bool = False,
    command_from_profile: bool = False,
) -> Result:
    if _serve.enabled():
        res = execute_on_server(
            args,
            options,
            input=input,
            check=check,
            session=session,
            state_dir=state_dir,
            wait=wait,
            command_from_profile=command_from_profile,
        )
        if res is not None:
            return res
    status_r, status_w = os.pipe()
    fds = [status_r, status_w]
    try:
        launch = Launch(
            args,
            options,
            status_fd=status_w,
            session=session,
            state_dir=state_dir,
            wait=wait,
            command_from_profile=command_from_profile,
        )
        out_r, out_w = os.pipe()
        fds += [out_r, out_w]
        err_r, err_w = os.pipe()
        fds += [err_r, err_w]
        in_r = in_w = -1
        if input is not None:
            in_r, in_w = os.pipe()
            fds += [in_r, in_w]
        try:
            proc = subprocess.Popen(
                launch.argv,
                stdin=in_r if input is not None else subprocess.DEVNULL,
                stdout=out_w,
                stderr=err_w,
                pass_fds=(status_w, *launch.pass_fds),
            )
        except BaseException:
            launch.cleanup()
            raise
        # hutch holds its own copies of the secrets' memfds now.
        launch.secret_fds.close()
        for fd in (status_w, out_w, err_w, in_r):
            if fd >= 0:
                os.close(fd)
                fds.remove(fd)
        bufs = {out_r: bytearray(), err_r: bytearray(), status_r: bytearray()}
        try:
            pump(bufs, in_w, input, fds)
            returncode = proc.wait()
        except BaseException:
            cancel(proc, bytes(bufs[status_r]))
            launch.cleanup()
            raise
        res = launch.finish(
            bytes(bufs[status_r]), returncode, bytes(bufs[out_r]), bytes(bufs[err_r]), check
        )
        warn_unenforced(res.report)
        return res
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


#: The report descriptor's number in the server's request process.
SERVER_REPORT_FD = 3


def server_launch(
    args: Sequence[str],
    options: Any,
    *,
    session: str | None,
    state_dir: PathLike | None,
    wait: bool,
    command_from_profile: bool,
    events: bool = False,
) -> Launch | None:
    """The command as a request to this process's ``hutch serve`` (its
    report descriptor at ``SERVER_REPORT_FD``; ``events``: as
    ``--status-fd``, for a spawn); ``None`` when it needs descriptors of
    this process (secrets' memfds), which a request cannot carry: the
    caller then execs hutch itself."""
    launch = Launch(
        args,
        options,
        status_fd=SERVER_REPORT_FD,
        events=events,
        session=session,
        state_dir=state_dir,
        wait=wait,
        command_from_profile=command_from_profile,
    )
    if launch.pass_fds:
        launch.cleanup()
        return None
    return launch


def server_result(launch: Launch, r: _serve.Reply, check: bool) -> Result:
    """The result of a command the server ran (or its exception)."""
    start = None
    for line in r.reports:
        if isinstance(line, dict) and line.get("event") == "start":
            start = StartEvent.from_dict(line)
    res = launch.finish_parsed(start, r.envelope, r.returncode, r.out, r.err, check)
    warn_unenforced(res.report)
    return res


def execute_on_server(
    args: Sequence[str],
    options: Any,
    *,
    input: bytes | None,
    check: bool,
    session: str | None,
    state_dir: PathLike | None,
    wait: bool,
    command_from_profile: bool,
) -> Result | None:
    """``execute`` through the server (``None``: see ``server_launch``)."""
    launch = server_launch(
        args,
        options,
        session=session,
        state_dir=state_dir,
        wait=wait,
        command_from_profile=command_from_profile,
    )
    if launch is None:
        return None
    try:
        r = _serve.request(launch.argv[1:], input=input, report_fd=SERVER_REPORT_FD)
    except BaseException:
        launch.cleanup()
        raise
    return server_result(launch, r, check)


def pump(bufs: dict[int, bytearray], in_w: int, data: bytes | None, fds: list[int]) -> None:
    """Read every fd of ``bufs`` to EOF while writing ``data`` to ``in_w``;
    each fd is closed (and taken off ``fds``) when done with. (poll(2):
    registering costs no syscall, which matters on the spawn path.)"""

    def close(fd: int) -> None:
        fds.remove(fd)
        os.close(fd)

    poller = select.poll()
    open_fds = len(bufs)
    for fd in bufs:
        poller.register(fd, select.POLLIN)
    view = memoryview(data) if data is not None else None
    offset = 0
    if in_w >= 0:
        if view is not None and len(view):
            os.set_blocking(in_w, False)
            poller.register(in_w, select.POLLOUT)
            open_fds += 1
        else:
            close(in_w)
    while open_fds:
        for fd, _ in poller.poll():
            if fd == in_w:
                assert view is not None
                try:
                    offset += os.write(fd, view[offset : offset + 65536])
                except BlockingIOError:
                    continue
                except BrokenPipeError:
                    offset = len(view)
                if offset >= len(view):
                    poller.unregister(fd)
                    close(fd)
                    open_fds -= 1
                continue
            chunk = os.read(fd, 1 << 17)
            if chunk:
                bufs[fd] += chunk
            else:
                poller.unregister(fd)
                close(fd)
                open_fds -= 1


def cancel(proc: subprocess.Popen[bytes], status: bytes) -> None:
    """End a command that is being abandoned: kill its sandbox (hutch still
    reports and cleans up), then hutch itself if it does not exit soon or
    the sandbox has not started. No process is left."""
    if proc.poll() is None:
        start, _ = parse_status(status.rsplit(b"\n", 1)[0] if b"\n" in status else b"")
        if start is not None:
            kill_sandbox(start.pid)
            killed = True
        else:
            killed = kill_sandbox_of(proc.pid)
        if killed:
            deadline = time.monotonic() + CANCEL_GRACE
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.005)
        if proc.poll() is None:
            proc.kill()  # its sandbox dies with it (parent-death signal)
    proc.wait()


class Command:
    """A sandboxed command to run (possibly many times): ``args`` and the
    keyword options of ``hutch.run``.

    >>> cmd = hutch.Command(["make", "test"], workspace="/srv/repo", timeout=600)
    >>> res = cmd.run()
    """

    def __init__(self, args: Sequence[str], **options: Unpack[Options]) -> None:
        self.args = list(args)
        self.options: dict[str, Any] = dict(options)

    def with_options(self, **options: Unpack[Options]) -> Command:
        """A copy with more (or other) options."""
        merged: dict[str, Any] = {**self.options, **options}
        c = Command(self.args)
        c.options = merged
        return c

    def run(self, *, input: bytes | None = None, check: bool = False) -> Result:
        """Run it and wait (see ``hutch.run``)."""
        return execute(self.args, self.options, input=input, check=check)

    def spawn(
        self,
        *,
        input: bytes | None = None,
        stdout: StreamMode = "stream",
        stderr: StreamMode = "capture",
        check: bool = False,
        on_stdout: LineCallback | None = None,
        on_stderr: LineCallback | None = None,
    ) -> Process:
        """Start it and return its ``Process`` (see ``hutch.spawn``)."""
        return Process(
            self.args,
            self.options,
            input=input,
            stdout=stdout,
            stderr=stderr,
            check=check,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
        )

    def hutch_argv(self) -> list[str]:
        """The ``hutch run`` command line this runs (status on fd 3)."""
        launch = Launch(self.args, self.options, status_fd=3)
        launch.cleanup()
        return launch.argv

    def __repr__(self) -> str:
        return f"hutch.Command({self.args!r}, **{self.options!r})"
