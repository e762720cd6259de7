"""Synchronous streaming: ``hutch.spawn`` / ``Command.spawn`` /
``Session.spawn`` return a ``Process`` whose output is read as it comes
(line iterators, ``on_stdout``/``on_stderr`` callbacks), the sync
counterpart of ``hutch.aio.spawn``.

No thread: whichever call needs data (a ``readline``, the iteration,
``wait()``) polls every pipe of the command at once, so reading stdout
alone never stalls a command that writes stderr. A ``stream`` pipe nobody
reads pauses while 1 MiB of it is unread; from ``wait()`` on, what is not
read is dropped past that much, so the command can finish.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Callable, Literal

from ._core import Launch, kill_sandbox, kill_sandbox_of, parse_status, warn_unenforced
from ._errors import UsageError
from ._options import PathLike
from ._pty import EOF, HostPty, not_a_pty
from ._types import ExitReport, Result, StartEvent

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Unpack

    from ._options import Options

StreamMode = Literal["stream", "capture", "devnull"]
LineCallback = Callable[[bytes], None]

#: A stream nobody reads pauses its pipe while this much is unread.
HIGH_WATER = 1 << 20
#: ``readline`` returns a line in pieces of at most this many bytes.
MAX_LINE = 1 << 20
#: Seconds a killed sandbox's hutch gets to report before it is killed.
KILL_GRACE = 5.0


class Stream:
    """One output pipe of a spawned command: ``for line in stream``,
    ``readline()``, ``read(n)``, ``read()`` (to EOF). Each call pumps
    every pipe of the command until it has its data."""

    def __init__(self, proc: Process, name: str, mode: str, on_line: LineCallback | None) -> None:
        self._proc = proc
        self.name = name
        self._mode = mode
        self._on_line = on_line
        self._buf = bytearray()
        self._line_start = 0
        self.eof = mode == "devnull"
        self.dropped = 0
        #: Whether anyone read from it (``result()`` refuses to drop a
        #: streamed output nobody read).
        self.touched = False

    # What the pump does with a chunk of the pipe.
    def _feed(self, data: bytes, draining: bool) -> None:
        if self._on_line is not None:
            self._buf += data
            while True:
                nl = self._buf.find(b"\n", self._line_start)
                if nl < 0:
                    break
                line = bytes(self._buf[: nl + 1])
                del self._buf[: nl + 1]
                self._line_start = 0
                self._on_line(line)
            self._line_start = len(self._buf)
            return
        if draining and self._mode == "stream" and len(self._buf) >= HIGH_WATER:
            self.dropped += len(data)
            return
        self._buf += data

    def _ended(self) -> None:
        self.eof = True
        if self._on_line is not None and self._buf:
            line = bytes(self._buf)
            self._buf.clear()
            self._on_line(line)

    def _wants_more(self) -> bool:
        """Whether the pump may read this pipe now (a streamed output
        nobody reads pauses at ``HIGH_WATER``)."""
        return self._mode != "stream" or self._on_line is not None or len(self._buf) < HIGH_WATER

    def readline(self) -> bytes:
        """The next line with its newline (the last may lack one; a line
        longer than 1 MiB comes in pieces); ``b""`` at EOF."""
        self._readable()
        self._proc._pump(lambda: b"\n" in self._buf or len(self._buf) >= MAX_LINE or self.eof)
        nl = self._buf.find(b"\n")
        end = nl + 1 if nl >= 0 else min(len(self._buf), MAX_LINE)
        data = bytes(self._buf[:end])
        del self._buf[:end]
        return data

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (``b""`` at EOF); with ``n < 0``, everything to EOF."""
        self._readable()
        if n < 0:
            self._proc._pump(lambda: self.eof, reading=self)
            data = bytes(self._buf)
            self._buf.clear()
            return data
        self._proc._pump(lambda: bool(self._buf) or self.eof)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def _readable(self) -> None:
        if self._mode != "stream":
            raise UsageError(
                f'{self.name} is {self._mode!r}: read a spawn(..., {self.name}="stream")',
                where=self.name,
            )
        if self._on_line is not None:
            raise UsageError(
                f"{self.name} goes to its on_{self.name} callback; it cannot be read too",
                where=self.name,
            )
        self.touched = True

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def captured(self) -> bytes:
        return bytes(self._buf)


class Process:
    """A running sandboxed command (``hutch.spawn``). ``stdout`` /
    ``stderr`` are ``Stream``s; ``started()`` is the start event,
    ``wait()`` the exit report, ``result()`` the whole result,
    ``kill()`` ends the sandbox. ``with`` it: entering raises hutch's own
    failure when the command never started (``SetupError``...); leaving
    waits, or on an exception kills the sandbox and waits until hutch is
    gone."""

    def __init__(
        self,
        args: Sequence[str],
        options: Any,
        *,
        input: bytes | None,
        stdout: StreamMode,
        stderr: StreamMode,
        check: bool,
        on_stdout: LineCallback | None,
        on_stderr: LineCallback | None,
        session: str | None = None,
        state_dir: PathLike | None = None,
        wait: bool = False,
    ) -> None:
        for name, mode in (("stdout", stdout), ("stderr", stderr)):
            if mode not in ("stream", "capture", "devnull"):
                raise ValueError(f"{name}: 'stream', 'capture' or 'devnull', not {mode!r}")
        for name, cb, mode in (("stdout", on_stdout, stdout), ("stderr", on_stderr, stderr)):
            if cb is not None and mode != "stream":
                raise TypeError(f'on_{name} takes the lines of {name}="stream"')
        self._check = check
        self._status = bytearray()
        self._start: StartEvent | None = None
        self._result: Result | None = None
        self._draining = False
        self.stdout = Stream(self, "stdout", stdout, on_stdout)
        self.stderr = Stream(self, "stderr", stderr, on_stderr)
        self._fds: dict[int, Stream | None] = {}
        self._in_w = -1
        self._input = memoryview(input) if input is not None else None
        #: ``pty=True``: hutch's stdin is this terminal, written to at will.
        self._pty = HostPty(options) if options.get("pty") else None
        self._eof_sent = False
        if self._pty is not None:
            self._input = memoryview(input or b"")
        opened: list[int] = []

        def pipe() -> tuple[int, int]:
            r, w = os.pipe()
            opened.extend((r, w))
            return r, w

        try:
            status_r, status_w = pipe()
            self._launch = Launch(
                args,
                options,
                status_fd=status_w,
                events=True,
                session=session,
                state_dir=state_dir,
                wait=wait,
            )
            out_r, out_w = pipe() if stdout != "devnull" else (-1, -1)
            err_r, err_w = pipe() if stderr != "devnull" else (-1, -1)
            in_r, self._in_w = pipe() if input is not None and self._pty is None else (-1, -1)
            if self._pty is not None:
                in_r, self._in_w = self._pty.stdin, self._pty.master
            try:
                self._popen = subprocess.Popen(
                    self._launch.argv,
                    stdin=in_r if in_r >= 0 else subprocess.DEVNULL,
                    stdout=out_w if out_w >= 0 else subprocess.DEVNULL,
                    stderr=err_w if err_w >= 0 else subprocess.DEVNULL,
                    pass_fds=(status_w, *self._launch.pass_fds),
                )
            except BaseException:
                self._launch.cleanup()
                raise
            # hutch holds its own copies of the secrets' memfds now.
            self._launch.secret_fds.close()
        except BaseException:
            for fd in opened:
                os.close(fd)
            if self._pty is not None:
                self._pty.close()
            raise
        if self._pty is not None:
            self._pty.given(self._popen.pid)
            in_r = -1
        for fd in (status_w, out_w, err_w, in_r):
            if fd >= 0:
                os.close(fd)
        self._fds[status_r] = None
        if out_r >= 0:
            self._fds[out_r] = self.stdout
        if err_r >= 0:
            self._fds[err_r] = self.stderr
        if self._in_w >= 0:
            os.set_blocking(self._in_w, False)
            if not self._input and self._pty is None:
                self._close_stdin()

    @property
    def pid(self) -> int:
        """hutch's pid (the supervisor)."""
        return self._popen.pid

    @property
    def sandbox_pid(self) -> int | None:
        """The sandbox's init on the host, once its start event was read
        (``started()`` waits for it; a line of output may come first)."""
        return self._start.pid if self._start is not None else None

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    def _close_stdin(self) -> None:
        if self._pty is not None:
            self._pty.close()
            self._in_w = -1
        elif self._in_w >= 0:
            os.close(self._in_w)
            self._in_w = -1

    def _stdin_waiting(self) -> bool:
        """Whether input waits to be written (a terminal stays open
        between writes)."""
        return self._in_w >= 0 and (self._pty is None or bool(self._input))

    def write(self, data: bytes) -> None:
        """``pty=True``: type ``data`` into the command's terminal (``\r``
        is Enter, ``\x03`` Ctrl-C); returns once hutch took it, reading
        the output meanwhile so neither side stalls."""
        if self._pty is None:
            raise not_a_pty("write()")
        if self._in_w < 0 or self._eof_sent:
            raise UsageError("write(): the command's input was closed", where="pty")
        self._input = memoryview(bytes(self._input or b"") + bytes(data))
        self._pump(lambda: not self._input)

    def close_stdin(self) -> None:
        """``pty=True``: end the input as a terminal does, with ^D (a read
        at the start of a line returns end of file)."""
        self.write(EOF)
        self._eof_sent = True

    def resize(self, cols: int, rows: int) -> None:
        """``pty=True``: the terminal is now ``cols`` x ``rows`` (the
        command's foreground job gets SIGWINCH, as in a resized window)."""
        if self._pty is None:
            raise not_a_pty("resize()")
        self._pty.resize(cols, rows)

    def _pump(self, done: Callable[[], bool], reading: Stream | None = None) -> None:
        """Read every pipe (and write stdin) until ``done()`` or every
        pipe is at EOF. ``reading``: the stream a ``read()`` to EOF
        empties, which must not pause."""
        while not done() and (self._fds or self._stdin_waiting()):
            poller = select.poll()
            polled = 0
            for fd, stream in self._fds.items():
                if stream is None or self._draining or stream is reading or stream._wants_more():
                    poller.register(fd, select.POLLIN)
                    polled += 1
            if self._stdin_waiting():
                poller.register(self._in_w, select.POLLOUT)
                polled += 1
            if not polled:
                raise UsageError(
                    "every output of the command is paused with 1 MiB unread: read "
                    "proc.stdout / proc.stderr (or wait())",
                    where="stdout",
                )
            for fd, _ in poller.poll():
                if fd == self._in_w:
                    self._write_stdin()
                    continue
                self._read(fd)

    def _write_stdin(self) -> None:
        assert self._input is not None
        try:
            n = os.write(self._in_w, self._input[:65536])
            self._input = self._input[n:]
        except BlockingIOError:
            return
        except OSError:
            # EPIPE, or EIO from a terminal whose other end is gone.
            self._input = self._input[:0]
        if not self._input and self._pty is None:
            self._close_stdin()

    def _read(self, fd: int) -> None:
        stream = self._fds[fd]
        try:
            data = os.read(fd, 1 << 17)
        except OSError:
            data = b""
        if not data:
            os.close(fd)
            del self._fds[fd]
            if stream is not None:
                stream._ended()
            return
        if stream is not None:
            stream._feed(data, self._draining)
            return
        self._status += data
        if self._start is None and b'{"event":"start"' in self._status:
            complete = self._status[: self._status.rfind(b"\n") + 1]
            self._start, _ = parse_status(bytes(complete))

    def _status_done(self) -> bool:
        return not any(s is None for s in self._fds.values())

    def started(self) -> StartEvent | None:
        """The start event, once the sandbox runs (``None`` when the
        command never started)."""
        self._pump(lambda: self._start is not None or self._status_done())
        return self._start

    def _finish(self) -> Result:
        if self._result is not None:
            return self._result
        self._draining = True
        try:
            self._pump(lambda: False)
            code = self._popen.wait()
        except BaseException:
            self._abandon()
            raise
        self._close_stdin()
        out = self.stdout.captured() if self.stdout._mode == "capture" else b""
        err = self.stderr.captured() if self.stderr._mode == "capture" else b""
        self._result = self._launch.finish(bytes(self._status), code, out, err, self._check)
        warn_unenforced(self._result.report)
        return self._result

    def wait(self) -> ExitReport:
        """Wait for the end and return the exit report; output nobody
        reads from now on is drained (``on_stdout``/``on_stderr`` still
        get every line). Raises hutch's own failure (``SetupError``...);
        with ``check=True`` also ``CommandFailed``/``Timeout``. An
        interrupted wait (``KeyboardInterrupt``) kills the sandbox."""
        return self._finish().report

    def result(self) -> Result:
        """Wait and return the whole result. With ``stdout="stream"`` its
        ``stdout`` is empty: bytes of it nobody read are ``UsageError``,
        not silently dropped (read ``proc.stdout`` first, or spawn with
        ``stdout="capture"``)."""
        res = self._finish()
        out = self.stdout
        if out._mode == "stream" and out._on_line is None and not out.touched:
            lost = len(out._buf) + out.dropped
            if lost:
                raise UsageError(
                    f"result(): {lost} bytes of the streamed stdout were never read; read "
                    'proc.stdout before result(), or spawn(..., stdout="capture")',
                    where="stdout",
                    hint='stdout="capture"',
                )
        return res

    def kill(self) -> None:
        """End the sandbox and every process in it (the report says
        ``signaled``, signal 9; hutch itself when the sandbox has not
        started)."""
        if self._popen.poll() is not None:
            return
        if self._start is not None:
            kill_sandbox(self._start.pid)
        elif not kill_sandbox_of(self._popen.pid):
            self._popen.kill()

    def _abandon(self) -> None:
        """Kill the sandbox and wait until hutch is gone (hutch itself
        after ``KILL_GRACE``)."""
        self.kill()
        try:
            self._popen.wait(KILL_GRACE)
        except subprocess.TimeoutExpired:
            self._popen.kill()  # its sandbox dies with it (parent-death signal)
            self._popen.wait()
        finally:
            for fd in list(self._fds):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._fds.clear()
            self._close_stdin()
            self._launch.cleanup()

    def __enter__(self) -> Process:
        if self.started() is None:
            self._finish()  # raises hutch's failure
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            if self._result is None:
                self._abandon()
            return
        self._finish()

    def __del__(self) -> None:
        # A Process dropped unfinished: no hutch left behind.
        if getattr(self, "_result", None) is None and hasattr(self, "_popen"):
            with contextlib.suppress(Exception):
                if self._popen.poll() is None:
                    self._abandon()


def spawn(
    args: Sequence[str],
    *,
    input: bytes | None = None,
    stdout: StreamMode = "stream",
    stderr: StreamMode = "capture",
    check: bool = False,
    on_stdout: LineCallback | None = None,
    on_stderr: LineCallback | None = None,
    **options: Unpack[Options],
) -> Process:
    """Start ``args`` in a sandbox and return its ``Process`` at once
    (``with hutch.spawn(...) as proc:`` to have a command that never
    started raise on entry). ``stdout="stream"`` (default): iterate
    ``proc.stdout`` (lines) or give ``on_stdout`` (called with each line,
    from whichever call reads: the iteration, ``wait()``);
    ``"capture"``: kept for ``result()``; ``"devnull"``. ``stderr``: the
    same, ``"capture"`` by default. The options are ``hutch.run``'s."""
    return Process(
        args,
        options,
        input=input,
        stdout=stdout,
        stderr=stderr,
        check=check,
        on_stdout=on_stdout,
        on_stderr=on_stderr,
    )
