"""asyncio front end: ``spawn`` (a process handle with streamed output),
``run`` and ``Session``.

A spawn is a request to this process's ``hutch serve`` (``_aio_serve``;
docs/python.md, "The server") unless it must exec hutch (secrets,
``HUTCH_SERVE=0``, an ``output_limit`` above 64 MiB). Output streams
without deadlock: each stream buffers what arrives (from the server, up
to the spawn's ``output_limit``; from its own pipe, pausing it while
1 MiB is buffered and unread); stderr is
captured aside by default (so a consumer of stdout alone never stalls the
sandbox), and once ``wait()`` is called whatever is not read is drained.
Cancelling a task that awaits a command (``run``, ``wait()``, the body of
``async with spawn(...)``) kills the sandbox and waits until hutch is gone:
no process is left behind.
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import os
import signal
import subprocess
from collections.abc import Coroutine, Generator, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Literal,
    TypeVar,
    overload,
)

from . import _serve
from . import _session_core as core
from ._agent import agent_options
from ._aio_serve import ServerChild, server_spawn_launch
from ._core import (
    Launch,
    envelope_doc_result,
    envelope_result,
    kill_sandbox,
    kill_sandbox_of,
    parse_status,
    warn_unenforced,
)
from ._errors import HutchError, UsageError
from ._options import PathLike, Seconds, Size
from ._pty import EOF as PTY_EOF
from ._pty import HostPty, not_a_pty
from ._run import CANCEL_GRACE, SERVER_REPORT_FD, server_launch, server_result
from ._types import (
    CompactReport,
    DiffReport,
    ExitReport,
    ExportManifest,
    GcReport,
    GlobMatch,
    GrepMatch,
    Result,
    SealInfo,
    SearchResult,
    SessionInfo,
    SessionResult,
    SnapshotInfo,
    StartEvent,
)

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import ParamSpec, Unpack

    P = ParamSpec("P")

    from ._options import Options

__all__ = ["Process", "Session", "Stream", "run", "spawn", "spawn_agent"]

T = TypeVar("T")

#: A stream pauses its pipe while this much is buffered and unread.
HIGH_WATER = 1 << 20
#: ``readline`` returns a line in pieces of at most this many bytes.
MAX_LINE = 1 << 20

StreamMode = Literal["stream", "capture", "devnull"]


class Stream:
    """One output pipe of a sandboxed command: ``async for line in
    stream``, ``await readline()``, ``await read(n)``, ``await read()`` (to
    EOF). In ``capture`` mode it is read aside and ends up in the result."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, capture: bool = False) -> None:
        self._loop = loop
        self._fd = fd
        self._buf = bytearray()
        self._eof = False
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self._capture = capture
        self._discard = False
        self._line_hook: Callable[[bytes], None] | None = None
        self._hook_pos = 0
        self.dropped = 0
        #: Whether anyone read from it (``result()`` refuses to drop a
        #: streamed output nobody read).
        self.touched = False
        self.eof_future: asyncio.Future[None] = loop.create_future()
        # fd -1: a stream fed by the server's events (``feed``), no pipe.
        if fd >= 0:
            os.set_blocking(fd, False)
            loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, 1 << 17)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close()
        else:
            self._got(data)
        self._wake()

    def _got(self, data: bytes) -> None:
        if self._discard and not self._capture and len(self._buf) >= HIGH_WATER:
            self.dropped += len(data)
        else:
            self._buf += data
            if self._line_hook is not None:
                self._scan_lines()
        if (
            self._fd >= 0
            and not self._capture
            and not self._discard
            and len(self._buf) >= HIGH_WATER
        ):
            self._loop.remove_reader(self._fd)
            self._paused = True

    def feed(self, data: bytes) -> None:
        """A chunk of a stream fed by the server (no pipe to pause: what
        it buffers is bounded by the command's ``output_limit``)."""
        if not self._eof:
            self._got(data)
            self._wake()

    def feed_eof(self) -> None:
        self._close()
        self._wake()

    def _scan_lines(self) -> None:
        assert self._line_hook is not None
        while True:
            nl = self._buf.find(b"\n", self._hook_pos)
            if nl < 0:
                return
            line = bytes(self._buf[self._hook_pos : nl])
            self._hook_pos = nl + 1
            self._line_hook(line)

    def _close(self) -> None:
        if self._eof:
            return
        self._eof = True
        if self._fd >= 0:
            if not self._paused:
                self._loop.remove_reader(self._fd)
            os.close(self._fd)
        self._paused = False
        if not self.eof_future.done():
            self.eof_future.set_result(None)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _consumed(self) -> None:
        if self._paused and len(self._buf) < HIGH_WATER // 2:
            self._paused = False
            self._loop.add_reader(self._fd, self._readable)

    async def _wait_data(self) -> None:
        if self._waiter is not None:
            raise RuntimeError("another task is already reading this stream")
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def drain_unread(self) -> None:
        """From now on never pause: keep reading the pipe, dropping what
        overflows the buffer (so the command can finish)."""
        self._discard = True
        if self._paused:
            self._paused = False
            self._loop.add_reader(self._fd, self._readable)

    def at_eof(self) -> bool:
        return self._eof and not self._buf

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (``b""`` at EOF); with ``n < 0``, everything to EOF."""
        self.touched = True
        if n < 0:
            while not self._eof:
                await self._wait_data()
            data = bytes(self._buf)
            self._buf.clear()
            return data
        while not self._buf and not self._eof:
            await self._wait_data()
        data = bytes(self._buf[:n])
        del self._buf[:n]
        self._consumed()
        return data

    async def readline(self) -> bytes:
        """The next line with its newline (the last may lack one; a line
        longer than 1 MiB comes in pieces); ``b""`` at EOF."""
        self.touched = True
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0 or len(self._buf) >= MAX_LINE or (self._eof and self._buf):
                end = nl + 1 if nl >= 0 else min(len(self._buf), MAX_LINE)
                data = bytes(self._buf[:end])
                del self._buf[:end]
                self._consumed()
                return data
            if self._eof:
                return b""
            await self._wait_data()

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> bytes:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line

    def captured(self) -> bytes:
        """What a ``capture`` stream holds (call after EOF)."""
        return bytes(self._buf)


class _Child:
    """A started hutch process: its exit as a future (through a pidfd, no
    child watcher thread), its pipes as streams."""

    def __init__(
        self,
        argv: list[str],
        *,
        input: bytes | None,
        stdout: str,
        stderr: str,
        status_w: int | None = None,
        pass_fds: tuple[int, ...] = (),
        pty: HostPty | None = None,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        fds: list[int] = []
        #: ``pty=True``: hutch's stdin is this terminal, written to at will.
        self.pty = pty

        def pipe() -> tuple[int, int]:
            r, w = os.pipe()
            fds.extend((r, w))
            return r, w

        try:
            out_r = out_w = err_r = err_w = in_r = in_w = -1
            if stdout != "devnull":
                out_r, out_w = pipe()
            if stderr != "devnull":
                err_r, err_w = pipe()
            if input is not None and pty is None:
                in_r, in_w = pipe()
            self.popen = subprocess.Popen(
                argv,
                stdin=pty.stdin
                if pty is not None
                else (in_r if input is not None else subprocess.DEVNULL),
                stdout=out_w if out_w >= 0 else subprocess.DEVNULL,
                stderr=err_w if err_w >= 0 else subprocess.DEVNULL,
                pass_fds=((status_w,) if status_w is not None else ()) + pass_fds,
            )
            for fd in (out_w, err_w, in_r):
                if fd >= 0:
                    os.close(fd)
                    fds.remove(fd)
            self.pidfd = os.pidfd_open(self.popen.pid)
            if pty is not None:
                pty.given(self.popen.pid)
        except BaseException:
            for fd in fds:
                os.close(fd)
            if pty is not None:
                pty.close()
            if hasattr(self, "popen"):
                self.popen.kill()
                self.popen.wait()
            raise
        self.exited: asyncio.Future[int] = self._loop.create_future()
        #: Always ``None`` here (a server's request may end in ``ServerDied``).
        self.error: HutchError | None = None
        self._loop.add_reader(self.pidfd, self._on_exit)
        self.stdout = Stream(self._loop, out_r, capture=stdout == "capture") if out_r >= 0 else None
        self.stderr = Stream(self._loop, err_r, capture=stderr == "capture") if err_r >= 0 else None
        self._stdin_task: asyncio.Task[None] | None = None
        #: ``pty=True``: the writes in order (each waits for the one before).
        self._pty_writes: asyncio.Lock | None = asyncio.Lock() if pty is not None else None
        if input is not None and pty is None:
            self._stdin_task = self._loop.create_task(self._feed(in_w, input))
        elif input and pty is not None:
            self._stdin_task = self._loop.create_task(self.write_pty(input))

    async def write_pty(self, data: bytes) -> None:
        """Write ``data`` to the terminal's master, waiting while it is
        full; an ended command (EIO) drops the rest."""
        assert self.pty is not None and self._pty_writes is not None
        async with self._pty_writes:
            view = memoryview(data)
            while view and self.pty.master >= 0:
                try:
                    n = os.write(self.pty.master, view[:65536])
                    view = view[n:]
                except BlockingIOError:
                    ready = self._loop.create_future()
                    self._loop.add_writer(self.pty.master, ready.set_result, None)
                    try:
                        await ready
                    finally:
                        self._loop.remove_writer(self.pty.master)
                except OSError:
                    break
            if self.popen.returncode is not None:
                self.pty.close()

    async def _feed(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        os.set_blocking(fd, False)
        try:
            while view:
                try:
                    n = os.write(fd, view[:65536])
                    view = view[n:]
                except BlockingIOError:
                    ready = self._loop.create_future()
                    self._loop.add_writer(fd, ready.set_result, None)
                    try:
                        await ready
                    finally:
                        self._loop.remove_writer(fd)
                except BrokenPipeError:
                    return
        finally:
            os.close(fd)

    def _on_exit(self) -> None:
        code = self.popen.poll()
        if code is None:
            return
        self._loop.remove_reader(self.pidfd)
        os.close(self.pidfd)
        if self.pty is not None and self._pty_writes is not None and not self._pty_writes.locked():
            self.pty.close()
        if not self.exited.done():
            self.exited.set_result(code)

    def kill_hutch(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()

    def send_signal(self, sig: int) -> None:
        """To hutch, which forwards it to the workload."""
        if self.popen.poll() is None:
            self.popen.send_signal(sig)


class Process:
    """A running sandboxed command (``spawn``).

    ``stdout`` (and ``stderr`` with ``stderr="stream"``) are ``Stream``s;
    ``await started()`` gives the start event, ``await wait()`` the exit
    report (or raises hutch's own failure: ``SetupError``...), ``kill()``
    ends the whole sandbox. ``pid`` is hutch's pid (the supervisor).
    """

    def __init__(
        self,
        launch: Launch,
        child: _Child | ServerChild,
        status: Stream | None,
        check: bool,
    ) -> None:
        self._launch = launch
        self._child = child
        self._status = status
        self._check = check
        self._start: asyncio.Future[StartEvent | None] = child._loop.create_future()
        self._result: Result | None = None
        self._finishing: asyncio.Task[Result] | None = None
        self._kill_timer: asyncio.TimerHandle | None = None
        self._eof_sent = False
        if status is not None:
            status._line_hook = self._status_line
            status.eof_future.add_done_callback(self._status_done)
        else:
            # Through the server: its ``report`` events bring the start.
            assert isinstance(child, ServerChild)
            child.on_start = self._got_start
        self.stdout: Stream = child.stdout if child.stdout is not None else _closed(child._loop)
        self.stderr: Stream = child.stderr if child.stderr is not None else _closed(child._loop)

    def _status_line(self, line: bytes) -> None:
        if not self._start.done() and line.startswith(b'{"event":"start"'):
            start, _ = parse_status(line)
            self._start.set_result(start)

    def _status_done(self, _: Any) -> None:
        if not self._start.done():
            self._start.set_result(None)

    def _got_start(self, start: StartEvent | None) -> None:
        if not self._start.done():
            self._start.set_result(start)

    @property
    def pid(self) -> int:
        return self._child.popen.pid

    @property
    def sandbox_pid(self) -> int | None:
        """The sandbox's init on the host, once it started."""
        if self._start.done() and self._start.result() is not None:
            s = self._start.result()
            assert s is not None
            return s.pid
        return None

    @property
    def returncode(self) -> int | None:
        return self._child.popen.returncode

    async def started(self) -> StartEvent | None:
        """The start event (``None`` when the command never started)."""
        return await self._start

    async def write(self, data: bytes) -> None:
        """``pty=True``: type ``data`` into the command's terminal (``\r``
        is Enter, ``\x03`` Ctrl-C); returns once hutch took it."""
        if self._child.pty is None:
            raise not_a_pty("write()")
        if self._eof_sent:
            raise UsageError("write(): the command's input was closed", where="pty")
        await self._child.write_pty(bytes(data))

    async def close_stdin(self) -> None:
        """``pty=True``: end the input as a terminal does, with ^D."""
        await self.write(PTY_EOF)
        self._eof_sent = True

    def resize(self, cols: int, rows: int) -> None:
        """``pty=True``: the terminal is now ``cols`` x ``rows`` (the
        command's foreground job gets SIGWINCH)."""
        if self._child.pty is None:
            raise not_a_pty("resize()")
        self._child.pty.resize(cols, rows)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the command: hutch forwards it to the workload
        (as ``hutch run`` does for its own signals); nothing once it ended."""
        self._child.send_signal(int(sig))

    def terminate(self) -> None:
        """``send_signal(SIGTERM)``."""
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """End the sandbox and every process in it: SIGKILL to the workload
        (the exit report says ``signaled``, signal 9), or to hutch itself
        when the sandbox has not started yet or hutch does not exit soon."""
        if self._child.popen.poll() is not None:
            return
        pid = self.sandbox_pid
        if pid is not None:
            kill_sandbox(pid)
        if pid is not None or kill_sandbox_of(self._child.popen.pid):
            if self._kill_timer is None:
                self._kill_timer = self._child._loop.call_later(
                    CANCEL_GRACE, self._child.kill_hutch
                )
        else:
            self._child.kill_hutch()

    async def _finish(self) -> Result:
        for s in (self.stdout, self.stderr):
            s.drain_unread()
        code = await self._child.exited
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        if self._child.error is not None:
            self._launch.cleanup()
            raise self._child.error
        if self._status is not None:
            await self._status.eof_future
        for s in (self.stdout, self.stderr):
            if s._capture:
                await s.eof_future
        if self._child._stdin_task is not None:
            self._child._stdin_task.cancel()
        out = self.stdout.captured() if self.stdout._capture else b""
        err = self.stderr.captured() if self.stderr._capture else b""
        if self._status is None:
            assert isinstance(self._child, ServerChild)
            start = self._start.result() if self._start.done() else None
            return self._launch.finish_parsed(
                start, self._child.envelope, code, out, err, self._check
            )
        return self._launch.finish(self._status.captured(), code, out, err, self._check)

    async def _whole(self) -> Result:
        if self._result is not None:
            return self._result
        if self._finishing is None:
            self._finishing = asyncio.ensure_future(self._finish())
            # Its error is re-raised to the waiter; an abandoned wait
            # (cancelled) does not want it reported as never retrieved.
            self._finishing.add_done_callback(_retrieve)
        try:
            self._result = await asyncio.shield(self._finishing)
        except asyncio.CancelledError:
            await self._abandon()
            raise
        # In the awaiting task: the warning names the caller's line.
        warn_unenforced(self._result.report)
        return self._result

    async def result(self) -> Result:
        """Wait and return the whole result (captured output, report). A
        cancelled wait kills the sandbox first. With ``stdout="stream"``
        the result's ``stdout`` is empty: what nobody read is not silently
        dropped, it is ``UsageError`` (read ``proc.stdout`` first, or
        spawn with ``stdout="capture"``; ``wait()`` drains it)."""
        res = await self._whole()
        out = self.stdout
        if not out._capture and not out.touched:
            await out.eof_future
            lost = len(out._buf) + out.dropped
            if lost:
                raise UsageError(
                    f"result(): {lost} bytes of the streamed stdout were never read; read "
                    'proc.stdout before result(), or spawn(..., stdout="capture") to get it '
                    "in the result (wait() drains it)",
                    where="stdout",
                    hint='stdout="capture"',
                )
        return res

    async def wait(self) -> ExitReport:
        """Wait for the end and return the exit report. Output nobody reads
        from now on is drained. Raises hutch's own failure (``SetupError``,
        ``SpecError``, ``PolicyError``...); with ``check=True`` also
        ``CommandFailed``/``Timeout``. A cancelled wait kills the sandbox."""
        return (await self._whole()).report

    async def _entered(self) -> None:
        """Return once the command started; raise hutch's failure when it
        never did (a refused limit, a missing bind source...), so that
        ``async with spawn(...)`` and ``await spawn(...)`` raise it instead
        of a clean EOF on stdout."""
        try:
            if await self._start is None:
                await self._whole()
        except asyncio.CancelledError:
            await self._abandon()
            raise

    async def _abandon(self) -> None:
        """Kill and wait until hutch is gone (also when cancelled again)."""
        self.kill()
        try:
            await asyncio.shield(self._child.exited)
        except asyncio.CancelledError:
            self._child.kill_hutch()
            raise
        finally:
            self._launch.cleanup()

    async def __aenter__(self) -> Process:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._child.popen.poll() is None:
            if exc is None:
                # A block that ends normally waits for the command.
                await self._whole()
                return
            await self._abandon()
        elif self._finishing is None and exc is None:
            await self._whole()


def _retrieve(f: asyncio.Future[Any]) -> None:
    if not f.cancelled():
        f.exception()


def _closed(loop: asyncio.AbstractEventLoop) -> Stream:
    r, w = os.pipe()
    os.close(w)
    return Stream(loop, r)


class _Spawn:
    """``spawn(...)``: awaitable (the Process) and an async context manager
    (the Process, killed and waited for when the block is left early)."""

    def __init__(self, make: Callable[[], Process]) -> None:
        self._make = make
        self._proc: Process | None = None

    def __await__(self) -> Generator[Any, None, Process]:
        async def start() -> Process:
            proc = self._make()
            await proc._entered()
            return proc

        return start().__await__()

    async def __aenter__(self) -> Process:
        self._proc = self._make()
        await self._proc._entered()
        return self._proc

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._proc is not None
        await self._proc.__aexit__(exc_type, exc, tb)


def _start(
    args: Sequence[str],
    options: Any,
    *,
    input: bytes | None,
    stdout: str,
    stderr: str,
    check: bool,
    events: bool,
    session: str | None = None,
    state_dir: PathLike | None = None,
    wait: bool = False,
    command_from_profile: bool = False,
) -> Process:
    loop = asyncio.get_running_loop()
    if events and _serve.enabled():
        # Through this process's ``hutch serve`` (no exec); ``None``: a
        # command it cannot carry (secrets, unbounded output, big input).
        launch_on_server = server_spawn_launch(
            args,
            options,
            input=input,
            session=session,
            state_dir=state_dir,
            wait=wait,
            command_from_profile=command_from_profile,
        )
        if launch_on_server is not None:
            try:
                server_child = ServerChild(
                    launch_on_server.argv[1:],
                    Stream,
                    input=input,
                    stdout=stdout,
                    stderr=stderr,
                    options=options,
                )
            except BaseException:
                launch_on_server.cleanup()
                raise
            return Process(launch_on_server, server_child, None, check)
    status_r, status_w = os.pipe()
    try:
        launch = Launch(
            args,
            options,
            status_fd=status_w,
            events=events,
            session=session,
            state_dir=state_dir,
            wait=wait,
            command_from_profile=command_from_profile,
        )
    except BaseException:
        os.close(status_r)
        os.close(status_w)
        raise
    try:
        child = _Child(
            launch.argv,
            input=input,
            stdout=stdout,
            stderr=stderr,
            status_w=status_w,
            pass_fds=launch.pass_fds,
            pty=HostPty(options) if options.get("pty") else None,
        )
    except BaseException:
        os.close(status_r)
        launch.cleanup()
        raise
    finally:
        os.close(status_w)
        # hutch holds its own copies of the secrets' memfds now.
        launch.secret_fds.close()
    status = Stream(loop, status_r, capture=True)
    return Process(launch, child, status, check)


def spawn(
    args: Sequence[str],
    *,
    input: bytes | None = None,
    stdout: StreamMode = "stream",
    stderr: StreamMode = "capture",
    check: bool = False,
    **options: Unpack[Options],
) -> _Spawn:
    """Start ``args`` in a sandbox and return its ``Process`` (use ``await
    spawn(...)`` or ``async with spawn(...) as proc``).

    ``stdout="stream"`` (default): read ``proc.stdout`` as it comes;
    ``"capture"``: kept for the result; ``"devnull"``. ``stderr``: the same,
    ``"capture"`` by default (so reading stdout alone never stalls). The
    options are ``hutch.run``'s (``allow_hosts``, ``memory``, ``timeout``...);
    ``output_limit`` (default 16 MiB) caps what the command may write."""
    return _Spawn(
        lambda: _start(
            args, options, input=input, stdout=stdout, stderr=stderr, check=check, events=True
        )
    )


def spawn_agent(
    agent: str,
    *,
    prompt: str,
    repo: PathLike | None = None,
    workspace_at: str | None = None,
    allowed_egress: Sequence[str] = (),
    agents_dir: PathLike | None = None,
    cli_args: Sequence[str] = (),
    input: bytes | None = None,
    stdout: StreamMode = "stream",
    stderr: StreamMode = "capture",
    check: bool = False,
    **options: Unpack[Options],
) -> _Spawn:
    """Run an agent CLI on one prompt in a sandbox: ``async with
    spawn_agent("claude-code", prompt=..., repo=path) as proc``, the same
    ``Process`` as ``spawn`` (streamed stdout, ``wait()``, ``result()``).

    ``agent``: a profile's name (``"claude-code"``, ``"codex"``; ``NAME.toml``
    in ``agents_dir``, then in the directories of ``HUTCH_AGENTS_PATH``,
    replace or add to the built-in ones) or a profile file's path. The
    profile (docs/agents.md) brings the CLI's uid, HOME, settings, model
    gateway and key (``secrets``/``gateways`` of the same name replace its
    own), wall clock and preferred memory cap; it says how the prompt goes
    to the CLI (``claude -p -- PROMPT``, ``codex exec ... -- PROMPT``), as
    one argument, no shell. ``repo`` is shown at ``workspace_at`` (default
    ``/workspace/<repo's name>``) through an overlay (``changes=DIR`` keeps
    the writes in ``DIR/upper``; the host repository is never written) and
    is the CLI's working directory. ``allowed_egress``: hosts added to the
    profile's allow-list. ``memory``: a *required* cap (the run is refused
    before start where the host cannot enforce it), ``timeout``: the wall
    clock; any other keyword of ``spawn`` overrides the profile's default.
    ``cli_args``: the CLI's own options, between its name and the prompt.
    The CLI is looked up in the sandbox's ``PATH`` (``env={"PATH": ...}``
    to point elsewhere)."""
    opts = agent_options(
        agent,
        prompt=prompt,
        repo=repo,
        workspace_at=workspace_at,
        allowed_egress=allowed_egress,
        agents_dir=agents_dir,
        options=options,
    )
    return _Spawn(
        lambda: _start(
            cli_args,
            opts,
            input=input,
            stdout=stdout,
            stderr=stderr,
            check=check,
            events=True,
            command_from_profile=True,
        )
    )


async def run(
    args: Sequence[str],
    *,
    input: bytes | None = None,
    check: bool = False,
    **options: Unpack[Options],
) -> Result:
    """``hutch.run`` for asyncio: run and wait, output captured (bounded by
    ``output_limit``, 16 MiB unless given). Cancelling the awaiting task
    kills the sandbox."""
    res = await _run_on_server(args, options, input=input, check=check)
    if res is not None:
        return res
    proc = _start(
        args, options, input=input, stdout="capture", stderr="capture", check=check, events=False
    )
    return await proc.result()


async def _run_on_server(
    args: Sequence[str],
    options: Any,
    *,
    input: bytes | None,
    check: bool,
    session: str | None = None,
    state_dir: PathLike | None = None,
    wait: bool = False,
) -> Result | None:
    """A captured command through this process's ``hutch serve``, as the
    sync API runs it; ``None`` when it must exec hutch (``HUTCH_SERVE=0``,
    secrets)."""
    if not _serve.enabled():
        return None
    launch = server_launch(
        args, options, session=session, state_dir=state_dir, wait=wait, command_from_profile=False
    )
    if launch is None:
        return None
    try:
        r = await _serve.request_async(launch.argv[1:], input=input, report_fd=SERVER_REPORT_FD)
    except BaseException:
        launch.cleanup()
        raise
    return server_result(launch, r, check)


async def _exec(v: core.Verb[T]) -> T:
    """Run one session verb (captured) and read its result."""
    if _serve.enabled():
        r = await _serve.request_async(v.argv[1:], input=v.input, json_stdout=True)
        if r.envelope is not None:
            return v.parse(envelope_doc_result(r.envelope, r.err, r.returncode, v.verb))
        return v.parse(envelope_result(r.out, r.err, r.returncode, v.verb))
    child = _Child(
        v.argv, input=v.input if v.input is not None else b"", stdout="capture", stderr="capture"
    )
    assert child.stdout is not None and child.stderr is not None
    try:
        code = await asyncio.shield(child.exited)
    except asyncio.CancelledError:
        child.kill_hutch()
        await asyncio.shield(child.exited)
        raise
    await child.stdout.eof_future
    await child.stderr.eof_future
    return v.parse(envelope_result(child.stdout.captured(), child.stderr.captured(), code, v.verb))


class _Creating:
    """``Session.create(...)``: awaitable (the Session) and an async
    context manager (the Session, closed when the block ends)."""

    def __init__(self, creating: Coroutine[Any, Any, Session]) -> None:
        self._creating = creating
        self._session: Session | None = None

    def __await__(self) -> Generator[Any, None, Session]:
        return self._creating.__await__()

    async def __aenter__(self) -> Session:
        self._session = await self._creating
        return self._session

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._session is not None
        await self._session.close()


def _entered_or_awaited(
    f: Callable[P, Coroutine[Any, Any, Session]],
) -> Callable[P, _Creating]:
    @functools.wraps(f)
    def creating(*args: P.args, **kwargs: P.kwargs) -> _Creating:
        return _Creating(f(*args, **kwargs))

    return creating


class Session(core.Target):
    """``hutch.Session`` for asyncio: the same verbs, awaited. ``async with
    Session.create(...) as s:`` (or ``async with await ...``) closes it
    when the block ends."""

    def __init__(
        self,
        id: str,
        *,
        state_dir: PathLike | None = None,
        wait: bool = False,
        info: SessionInfo | None = None,
    ) -> None:
        self.id = id
        self.state_dir = state_dir
        self.wait = wait
        self._info = info
        self.closed = False

    @property
    def info(self) -> SessionInfo | None:
        """The session's description: what ``create()`` answered, or for
        an attached session what ``attach()`` (or the first ``show()``)
        read; ``None`` once closed without one. A property cannot await, so
        a ``Session(id)`` made directly has read nothing yet: then this
        raises ``UsageError`` naming ``await Session.attach(id)`` rather
        than answering ``None``."""
        if self._info is None and not self.closed:
            raise UsageError(
                f"session {self.id}: its description is not read yet; attach with "
                "`await hutch.aio.Session.attach(id)` (or `await s.show()`)",
                where="info",
                hint="await hutch.aio.Session.attach(id)",
            )
        return self._info

    @classmethod
    async def attach(
        cls, id: str, *, state_dir: PathLike | None = None, wait: bool = False
    ) -> Session:
        """An existing session, its ``info`` read (``NotFound`` when there
        is no such session)."""
        s = cls(id, state_dir=state_dir, wait=wait)
        await s.show()
        return s

    @classmethod
    @_entered_or_awaited
    async def create(
        cls,
        *,
        from_dir: PathLike | None = None,
        from_git: PathLike | None = None,
        rev: str | None = None,
        allow_submodules: bool = False,
        allow_symlinks: bool = False,
        allow_export_attributes: bool = False,
        expect_fingerprint: str | None = None,
        deadline: Seconds = None,
        max_commands: int | None = None,
        max_files: int | None = None,
        max_bytes: Size | None = None,
        max_file_bytes: Size | None = None,
        max_depth: int | None = None,
        max_path_bytes: int | None = None,
        image: str | None = None,
        image_store: PathLike | None = None,
        pull: str | None = None,
        insecure_registries: Sequence[str] = (),
        registry_auth: PathLike | None = None,
        registry_credential: str | None = None,
        workspace_path: str | None = None,
        disk_max: Size | None = None,
        disk_max_preferred: Size | None = None,
        audit_dir: PathLike | None = None,
        defaults: Options | None = None,
        locks: Sequence[str] = (),
        warm: int | None = None,
        warm_idle: Seconds = None,
        compact_depth: int | None = None,
        platform: str | None = None,
        approved: PathLike | Sequence[str] | None = None,
        allow_unpinned: bool = False,
        allow_platform_mismatch: bool = False,
        allow_volumes: bool = False,
        allow_secret_env: bool = False,
        allow_devices: bool = False,
        state_dir: PathLike | None = None,
        wait: bool = False,
    ) -> Session:
        """See ``hutch.Session.create``."""
        info = await _exec(
            core.create(
                state_dir,
                from_dir=from_dir,
                from_git=from_git,
                rev=rev,
                allow_submodules=allow_submodules,
                allow_symlinks=allow_symlinks,
                allow_export_attributes=allow_export_attributes,
                expect_fingerprint=expect_fingerprint,
                deadline=deadline,
                max_commands=max_commands,
                max_files=max_files,
                max_bytes=max_bytes,
                max_file_bytes=max_file_bytes,
                max_depth=max_depth,
                max_path_bytes=max_path_bytes,
                production=core.CreateExtras(
                    image=image,
                    image_store=image_store,
                    pull=pull,
                    insecure_registries=insecure_registries,
                    registry_auth=registry_auth,
                    registry_credential=registry_credential,
                    workspace_path=workspace_path,
                    disk_max=disk_max,
                    disk_max_preferred=disk_max_preferred,
                    audit_dir=audit_dir,
                    defaults=defaults,
                    locks=locks,
                    warm=warm,
                    warm_idle=warm_idle,
                    compact_depth=compact_depth,
                    platform=platform,
                    approved=approved,
                    allows=core.allows(
                        allow_unpinned=allow_unpinned,
                        allow_platform_mismatch=allow_platform_mismatch,
                        allow_volumes=allow_volumes,
                        allow_secret_env=allow_secret_env,
                        allow_devices=allow_devices,
                    ),
                ),
            )
        )
        return cls(info.id, state_dir=state_dir, wait=wait, info=info)

    @classmethod
    async def list(cls, *, state_dir: PathLike | None = None) -> builtins.list[SessionInfo]:
        return await _exec(core.list_sessions(state_dir))

    @classmethod
    async def gc(cls, older_than: Seconds, *, state_dir: PathLike | None = None) -> GcReport:
        return await _exec(core.gc(state_dir, older_than))

    async def run(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        check: bool = False,
        **options: Unpack[Options],
    ) -> SessionResult:
        """See ``hutch.Session.run``; cancelling the task kills the command."""
        res = await _run_on_server(
            args,
            options,
            input=input,
            check=check,
            session=self.id,
            state_dir=self.state_dir,
            wait=self.wait,
        )
        if res is not None:
            assert isinstance(res, SessionResult)
            return res
        proc = _start(
            args,
            options,
            input=input,
            stdout="capture",
            stderr="capture",
            check=check,
            events=False,
            session=self.id,
            state_dir=self.state_dir,
            wait=self.wait,
        )
        res = await proc.result()
        assert isinstance(res, SessionResult)
        return res

    def spawn(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        stdout: StreamMode = "stream",
        stderr: StreamMode = "capture",
        check: bool = False,
        **options: Unpack[Options],
    ) -> _Spawn:
        """A session command as a ``Process`` with streamed output (see
        ``spawn``); its ``result()`` is a ``SessionResult``."""
        return _Spawn(
            lambda: _start(
                args,
                options,
                input=input,
                stdout=stdout,
                stderr=stderr,
                check=check,
                events=True,
                session=self.id,
                state_dir=self.state_dir,
                wait=self.wait,
            )
        )

    async def read(self, path: str, *, max_bytes: Size = core.DEFAULT_READ_MAX) -> bytes:
        return await _exec(core.read(self, path, max_bytes))

    async def read_text(self, path: str, *, max_bytes: Size = core.DEFAULT_READ_MAX) -> str:
        return (await self.read(path, max_bytes=max_bytes)).decode("utf-8", "replace")

    async def write(
        self, path: str, data: bytes | str, *, max_bytes: Size = core.DEFAULT_WRITE_MAX
    ) -> int:
        return await _exec(core.write(self, path, data, max_bytes))

    async def glob(
        self,
        pattern: str,
        *,
        path: str | None = None,
        max_matches: int = 1000,
        max_bytes: Size = 1 << 20,
        timeout: Seconds = None,
        exclude: Sequence[str] = (),
    ) -> SearchResult[GlobMatch]:
        return await _exec(core.glob(self, pattern, path, max_matches, max_bytes, timeout, exclude))

    async def grep(
        self,
        regex: str,
        *,
        path: str | None = None,
        glob: str | None = None,
        ignore_case: bool = False,
        fixed_strings: bool = False,
        files_with_matches: bool = False,
        max_matches: int = 1000,
        max_bytes: Size = 1 << 20,
        max_line_bytes: Size = 1024,
        engine: str = "auto",
        timeout: Seconds = None,
        exclude: Sequence[str] = (),
    ) -> SearchResult[GrepMatch]:
        return await _exec(
            core.grep(
                self,
                regex,
                path,
                glob,
                ignore_case,
                fixed_strings,
                files_with_matches,
                max_matches,
                max_bytes,
                max_line_bytes,
                engine,
                timeout,
                exclude,
            )
        )

    @overload
    async def diff(
        self,
        *,
        format: Literal["unified"] = "unified",
        max_bytes: Size = ...,
        since: int | str | None = ...,
        exclude: Sequence[str] = ...,
        include_ignored: bool = ...,
    ) -> bytes: ...
    @overload
    async def diff(
        self,
        *,
        format: Literal["json"],
        max_bytes: Size = ...,
        since: int | str | None = ...,
        exclude: Sequence[str] = ...,
        include_ignored: bool = ...,
    ) -> DiffReport: ...
    @overload
    async def diff(
        self,
        *,
        format: Literal["stat"],
        max_bytes: Size = ...,
        since: int | str | None = ...,
        exclude: Sequence[str] = ...,
        include_ignored: bool = ...,
    ) -> str: ...
    async def diff(
        self,
        *,
        format: str = "unified",
        max_bytes: Size = core.DEFAULT_DIFF_MAX,
        since: int | str | None = None,
        exclude: Sequence[str] = (),
        include_ignored: bool = False,
    ) -> Any:
        return await _exec(core.diff(self, format, max_bytes, since, exclude, include_ignored))

    async def export(
        self,
        paths: Sequence[str],
        *,
        out: PathLike,
        patch: bool = False,
        max_bytes: Size | None = None,
        max_file_bytes: Size | None = None,
        max_entries: int | None = None,
        since: int | str | None = None,
        exclude: Sequence[str] = (),
        include_ignored: bool = False,
    ) -> ExportManifest:
        return await _exec(
            core.export(
                self,
                paths,
                out,
                patch,
                max_bytes,
                max_file_bytes,
                max_entries,
                since,
                exclude,
                include_ignored,
            )
        )

    async def rm(self, *paths: str) -> builtins.list[str]:
        return await _exec(core.rm(self, paths))

    async def audit(self, *, audit_dir: PathLike | None = None) -> builtins.list[dict[str, Any]]:
        return await _exec(core.audit(self, audit_dir))

    async def warm(self, count: int, *, idle: Seconds = None) -> None:
        await _exec(core.warm(self, count, idle))

    async def warm_ready(self, *, timeout: Seconds = None) -> dict[str, Any]:
        return await _exec(core.warm_ready(self, timeout))

    async def seal(self, *, network_none: bool = False) -> SealInfo:
        return await _exec(core.seal(self, network_none))

    async def show(self) -> SessionInfo:
        info = await _exec(core.show(self))
        if self._info is None:
            self._info = info
        return info

    async def snapshot(self, name: str | None = None) -> SnapshotInfo:
        return await _exec(core.snapshot(self, name))

    async def snapshots(self) -> builtins.list[SnapshotInfo]:
        return await _exec(core.snapshots(self))

    async def compact(self, depth: int = 1) -> CompactReport:
        """``hutch.Session.compact``."""
        return await _exec(core.compact(self, depth))

    async def fork(
        self,
        count: int = 1,
        *,
        from_: int | str | SnapshotInfo | None = None,
        deadline: Seconds = None,
        max_commands: int | None = None,
        warm: int | None = None,
        warm_idle: Seconds = None,
    ) -> builtins.list[Session]:
        snap = from_.id if isinstance(from_, SnapshotInfo) else from_
        ids = await _exec(core.fork(self, count, snap, deadline, max_commands, warm, warm_idle))
        return [Session(i, state_dir=self.state_dir, wait=self.wait) for i in ids]

    async def rollback(self, snap: int | str | SnapshotInfo) -> SnapshotInfo:
        return await _exec(core.rollback(self, snap))

    async def close(self, *, keep_audit: PathLike | None = None) -> bool:
        if self.closed:
            return False
        removed = await _exec(core.close(self, keep_audit))
        self.closed = True
        return removed

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"hutch.aio.Session({self.id!r})"
