"""``hutch.aio.spawn`` through this process's ``hutch serve`` (docs/python.md,
"The server"): the request's events become the ``Process``'s streams, start
event and exit, with no exec of the binary per spawn.

The server's reader thread never blocks on a request: each event is handed
to the event loop (``call_soon_threadsafe``) and buffered there. A server
stream cannot be paused per request (protocol 1 has no flow control), so
what a stream nobody reads buffers is bounded by the command's
``output_limit`` instead (hutch stops keeping output past it): a spawn
whose ``output_limit`` is above ``MAX_BUFFERED`` (or ``None``) execs its
own hutch, whose pipes pause the command while 1 MiB is unread.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from . import _serve
from ._core import Launch
from ._errors import HutchError, UsageError
from ._options import DEFAULT_OUTPUT_LIMIT, PathLike, pty_size
from ._run import SERVER_REPORT_FD, server_launch
from ._types import StartEvent

if TYPE_CHECKING:
    from .aio import Stream

#: The most a spawn through the server may buffer unread (its
#: ``output_limit``, stdout and stderr together); above, it execs hutch.
MAX_BUFFERED = 64 << 20
#: The most ``input=`` a spawn through the server sends: the server's
#: bound on a request's unread stdin (its ``limits.stdin_pending_bytes``).
MAX_INPUT = 16 << 20

_SIZE = re.compile(r"\s*(\d+)\s*([kmgt]?)(i?b)?\s*", re.IGNORECASE)


def output_bound(options: Any) -> int | None:
    """The bytes ``output_limit`` lets the command write (``None``: no
    bound, or one this package does not read)."""
    v = options.get("output_limit", DEFAULT_OUTPUT_LIMIT)
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v
    m = _SIZE.fullmatch(str(v))
    if m is None:
        return None
    return int(m.group(1)) << (10 * "kmgt".find(m.group(2).lower()) + 10 if m.group(2) else 0)


def server_spawn_launch(
    args: Sequence[str],
    options: Any,
    *,
    input: bytes | None,
    session: str | None,
    state_dir: PathLike | None,
    wait: bool,
    command_from_profile: bool,
) -> Launch | None:
    """The spawn as a server request (``--status-fd`` at the request's
    report descriptor); ``None`` when it must exec hutch: secrets (memfds
    a request cannot carry), an output bound above ``MAX_BUFFERED``, an
    ``input`` above ``MAX_INPUT``."""
    if input is not None and len(input) > MAX_INPUT:
        return None
    bound = output_bound(options)
    if bound is None or bound > MAX_BUFFERED:
        return None
    return server_launch(
        args,
        options,
        session=session,
        state_dir=state_dir,
        wait=wait,
        command_from_profile=command_from_profile,
        events=True,
    )


class RequestProc:
    """The request's hutch process, as ``Process`` sees a child: its pid
    (the server's ``started`` event) and its exit status once it ended."""

    def __init__(self) -> None:
        self.pid = 0
        self.returncode: int | None = None

    def poll(self) -> int | None:
        return self.returncode


class ServerPty:
    """``pty=True`` through the server: the terminal is the server's
    (``pty`` request field); ``resize`` is its ``resize`` verb."""

    def __init__(self, child: ServerChild) -> None:
        self._child = child

    def resize(self, cols: int, rows: int) -> None:
        cols, rows = pty_size((cols, rows))
        if self._child.popen.returncode is not None:
            raise UsageError("resize(): the command has ended", where="pty")
        self._child.send({"verb": "resize", "cols": cols, "rows": rows})


class ServerChild:
    """One ``argv`` request of the server, as ``hutch.aio.Process`` uses a
    started hutch: ``stdout``/``stderr`` streams, ``exited`` (a future of
    the exit status), the start event (``on_start``), signals."""

    def __init__(
        self,
        argv: list[str],
        stream: type[Stream],
        *,
        input: bytes | None,
        stdout: str,
        stderr: str,
        options: Any,
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self.popen = RequestProc()
        self.stdout = (
            stream(self._loop, -1, capture=stdout == "capture") if stdout != "devnull" else None
        )
        self.stderr = (
            stream(self._loop, -1, capture=stderr == "capture") if stderr != "devnull" else None
        )
        self.exited: asyncio.Future[int] = self._loop.create_future()
        #: ``ServerDied`` when the server ended during the request.
        self.error: HutchError | None = None
        #: The exit event's envelope (the report descriptor's last one).
        self.envelope: dict[str, Any] | None = None
        self.on_start: Callable[[StartEvent | None], None] | None = None
        self._stdin_task: asyncio.Task[None] | None = None
        #: Events handed over by the reader thread, run on the loop in
        #: order; one wake-up of the loop per batch, not per event.
        self._inbox: collections.deque[tuple[str, dict[str, Any] | None]] = collections.deque()
        self._wake_pending = False
        self.pty = ServerPty(self) if options.get("pty") else None
        fields: dict[str, Any] = {}
        if self.pty is not None:
            fields["pty"] = True
            if "pty_size" in options:
                fields["pty_size"] = list(pty_size(options["pty_size"]))
        self._server = _serve.server()
        # The callbacks run on the loop, after this returns.
        self._rid, self._reply = self._server.start(
            argv,
            stdin=input is not None and self.pty is None,
            report_fd=SERVER_REPORT_FD,
            on_done=self._ended_threadsafe,
            on_event=self._event_threadsafe,
            fields=fields,
        )
        if input is not None:
            if self.pty is None:
                # A death here is reported by the exit (``ServerDied``).
                with contextlib.suppress(_serve.ServerDied):
                    self._server.write_stdin(self._rid, input)
            elif input:
                self._send_stdin(input)

    # On the server's reader thread: hand over, never block.
    def _event_threadsafe(self, kind: str, ev: dict[str, Any]) -> None:
        self._hand_over(kind, ev)

    def _ended_threadsafe(self) -> None:
        self._hand_over("", None)

    def _hand_over(self, kind: str, ev: dict[str, Any] | None) -> None:
        self._inbox.append((kind, ev))
        if not self._wake_pending:
            self._wake_pending = True
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        # Cleared first: an event appended from now on either is seen
        # below or schedules another drain.
        self._wake_pending = False
        inbox = self._inbox
        while inbox:
            kind, ev = inbox.popleft()
            if ev is None:
                self._ended()
            else:
                self._event(kind, ev)

    def _event(self, kind: str, ev: dict[str, Any]) -> None:
        if kind == "started":
            self.popen.pid = int(ev.get("pid") or 0)
        elif kind in ("stdout", "stderr"):
            s = self.stdout if kind == "stdout" else self.stderr
            if s is not None:
                s.feed(base64.b64decode(ev["data"]))
        elif kind == "report":
            line = ev.get("line")
            if isinstance(line, dict) and line.get("event") == "start" and self.on_start:
                self.on_start(StartEvent.from_dict(line))

    def _ended(self) -> None:
        r = self._reply
        self.error = r.server_error
        self.envelope = r.envelope
        # A dead server took its requests' hutch with it (SIGKILL).
        self.popen.returncode = r.returncode if r.server_error is None else -9
        for s in (self.stdout, self.stderr):
            if s is not None:
                s.feed_eof()
        if self.on_start is not None:
            self.on_start(None)
        if not self.exited.done():
            self.exited.set_result(self.popen.returncode)

    def send(self, doc: dict[str, Any]) -> None:
        """A message about this request (a dead server: nothing to do, the
        request's end says so)."""
        with contextlib.suppress(_serve.ServerDied):
            self._server.send({"id": self._rid, **doc})

    def _send_stdin(self, data: bytes) -> None:
        view = memoryview(data)
        for off in range(0, len(view), _serve.STDIN_CHUNK):
            chunk = base64.b64encode(view[off : off + _serve.STDIN_CHUNK]).decode()
            self.send({"verb": "stdin", "data": chunk})

    async def write_pty(self, data: bytes) -> None:
        """Queue ``data`` for the terminal (dropped once the command ended,
        as a pty's EIO drops it on the exec path)."""
        if self.popen.returncode is None and data:
            self._send_stdin(data)

    def send_signal(self, sig: int) -> None:
        if self.popen.returncode is None:
            self.send({"verb": "signal", "signal": sig})

    def kill_hutch(self) -> None:
        self.send_signal(9)
