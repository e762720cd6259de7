"""The transport: one ``hutch serve`` per Python process (docs/machine.md,
"hutch serve"), started on first use, started again if it died, ended at
exit. A call is one ``argv`` request; a reader thread hands each request's
events to the thread waiting on it, so calls from many threads run at once.

``HUTCH_SERVE=0`` in the environment makes every call exec the ``hutch``
binary instead (the subprocess path), as before the server existed.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

from . import _binary
from ._errors import HutchError

#: The ``hutch serve`` protocol this package speaks.
PROTOCOL = 1
#: Bytes of stdin per ``stdin`` message (base64 keeps it under the
#: server's 16 MiB line cap).
STDIN_CHUNK = 8 << 20
#: How long a cancelled request may take to send its exit event: the
#: server's TERM-to-KILL grace, and some.
CANCEL_WAIT = 5.0


class ServerDied(HutchError):
    """The ``hutch serve`` process of this Python process ended while a call
    was in flight (``where="serve"``). That call's outcome is unknown; the
    next call starts a new server."""

    kind = "internal"


def enabled() -> bool:
    """Whether calls go through the server (``HUTCH_SERVE`` is not ``0``)."""
    return os.environ.get("HUTCH_SERVE", "1") != "0"


class Reply:
    """What one request produced: its exit (``returncode`` as
    ``subprocess`` gives it: negative for a signal), the envelope, stdout,
    stderr and the report descriptor's other lines."""

    __slots__ = (
        "_done",
        "envelope",
        "on_done",
        "on_event",
        "reports",
        "returncode",
        "server_error",
        "stderr",
        "stdout",
    )

    def __init__(
        self,
        on_done: Callable[[], None] | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> None:
        self._done = threading.Lock()
        self._done.acquire()
        #: Called (on the reader thread) once the request ended: how an
        #: event loop learns it (``loop.call_soon_threadsafe``).
        self.on_done = on_done
        #: A streamed request (``hutch.aio.spawn``): its ``started``,
        #: ``stdout``, ``stderr`` and ``report`` events go here as they
        #: come (on the reader thread, which must never block) instead of
        #: being kept.
        self.on_event = on_event
        self.stdout: list[bytes] = []
        self.stderr: list[bytes] = []
        self.reports: list[Any] = []
        self.envelope: dict[str, Any] | None = None
        self.returncode = 0
        #: The server's ``error`` event, or the death of the server.
        self.server_error: HutchError | None = None

    @property
    def out(self) -> bytes:
        return b"".join(self.stdout)

    @property
    def err(self) -> bytes:
        return b"".join(self.stderr)


def _signal_number(name: str | None) -> int:
    import signal as _signal

    if not name:
        return 0
    try:
        return int(getattr(_signal, "SIG" + name))
    except (AttributeError, TypeError, ValueError):
        return 0


class Server:
    """One ``hutch serve`` child and the thread reading its events."""

    def __init__(self, exe: str) -> None:
        self.exe = exe
        self.env0 = dict(os.environ)
        # The environment as last compared, in CPython's own form (bytes,
        # ``os.environ._data``) when there is one: an unchanged environment
        # is then one C-level dict comparison per call, not a decode of
        # every variable (35 us with 35 variables).
        # One tuple, replaced whole: calls from several threads never see
        # an environment paired with another one's changes.
        self.env_seen: tuple[dict[Any, Any], dict[str, str | None]] | None = None
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [exe, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            # Its own session: a terminal's ^C reaches Python, which
            # cancels what it waits for; the server ends when stdin closes.
            start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self.write_lock = threading.Lock()
        self.lock = threading.Lock()
        self.pending: dict[int, Reply] = {}
        self.next_id = 1
        self.dead: str | None = None
        hello = self.stdout.readline()
        try:
            doc = json.loads(hello)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or doc.get("event") != "hello":
            self.close()
            raise ServerDied(
                f"{exe} serve did not start (it said {hello[:200]!r}, expected a hello event)",
                where="serve",
                hint="check that the hutch binary is this package's version (hutch.binary())",
            )
        if doc.get("protocol") != PROTOCOL:
            self.close()
            raise ServerDied(
                f"{exe} serve speaks protocol {doc.get('protocol')}, this package {PROTOCOL}",
                where="serve",
                hint="install the hutch binary of this package's version, or set HUTCH_SERVE=0",
            )
        self.reader = threading.Thread(target=self._read, name="hutch-serve-reader", daemon=True)
        self.reader.start()

    def alive(self) -> bool:
        return self.dead is None and self.owner == os.getpid()

    def _read(self) -> None:
        stdout = self.stdout
        pending = self.pending
        b64 = base64.b64decode
        while True:
            try:
                line = stdout.readline()
            except (OSError, ValueError):
                line = b""
            if not line:
                break
            try:
                ev = json.loads(line)
                kind = ev["event"]
                rid = ev["id"]
            except (ValueError, KeyError, TypeError):
                continue
            r = pending.get(rid)
            if r is None:
                continue
            if r.on_event is not None and kind in ("started", "stdout", "stderr", "report"):
                r.on_event(kind, ev)
            elif kind == "stdout":
                r.stdout.append(b64(ev["data"]))
            elif kind == "stderr":
                r.stderr.append(b64(ev["data"]))
            elif kind == "report":
                r.reports.append(ev.get("line"))
            elif kind == "exit":
                code = ev.get("code")
                r.returncode = code if code is not None else -_signal_number(ev.get("signal"))
                r.envelope = ev.get("envelope")
                self._end(rid, r)
            elif kind == "error" and ev.get("verb") in ("argv", None):
                from ._errors import from_document

                r.server_error = from_document(ev.get("error"), "serve", None)
                self._end(rid, r)
        self._died()

    def _end(self, rid: int, r: Reply) -> None:
        with self.lock:
            self.pending.pop(rid, None)
        r._done.release()
        if r.on_done is not None:
            r.on_done()

    def _died(self) -> None:
        code = self.proc.poll()
        if code is None:
            try:
                code = self.proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                code = None
        with self.lock:
            self.dead = (
                f"hutch serve (pid {self.proc.pid}) ended"
                + (f" with status {code}" if code is not None and code >= 0 else "")
                + (f" by signal {-code}" if code is not None and code < 0 else "")
            )
            pending = list(self.pending.values())
            self.pending.clear()
        for r in pending:
            r.server_error = ServerDied(
                f"{self.dead} while this call was in flight; its outcome is unknown",
                where="serve",
                hint="retry the call: the next one starts a new server",
            )
            r._done.release()
            if r.on_done is not None:
                r.on_done()

    def send(self, doc: dict[str, Any]) -> None:
        data = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
        with self.write_lock:
            try:
                self.stdin.write(data)
                self.stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as e:
                raise ServerDied(
                    f"hutch serve (pid {self.proc.pid}) is gone: {e}",
                    where="serve",
                    hint="retry the call: the next one starts a new server",
                ) from None

    def env_changes(self) -> dict[str, str | None]:
        """What differs from the environment the server started with."""
        environ: Any = os.environ
        data = getattr(environ, "_data", None)
        decodekey = getattr(environ, "decodekey", None)
        decodevalue = getattr(environ, "decodevalue", None)
        if not isinstance(data, dict) or decodekey is None or decodevalue is None:
            return self.compare_env(os.environ)
        seen = self.env_seen
        if seen is not None and data == seen[0]:
            return dict(seen[1])
        # The changes of the snapshot itself, not of ``os.environ`` read
        # again (another thread may change it meanwhile).
        snapshot = dict(data)
        changes = self.compare_env({decodekey(k): decodevalue(v) for k, v in snapshot.items()})
        self.env_seen = (snapshot, changes)
        return dict(changes)

    def compare_env(self, env: Mapping[str, str]) -> dict[str, str | None]:
        env0 = self.env0
        changes: dict[str, str | None] = {k: v for k, v in env.items() if env0.get(k) != v}
        for k in env0:
            if k not in env:
                changes[k] = None
        return changes

    def start(
        self,
        argv: Sequence[str],
        *,
        stdin: bool = False,
        report_fd: int | None = None,
        json_stdout: bool = False,
        on_done: Callable[[], None] | None = None,
        on_event: Callable[[str, dict[str, Any]], None] | None = None,
        fields: dict[str, Any] | None = None,
    ) -> tuple[int, Reply]:
        r = Reply(on_done, on_event)
        with self.lock:
            if self.dead is not None:
                raise ServerDied(
                    self.dead, where="serve", hint="retry: the next call starts a new server"
                )
            rid = self.next_id
            self.next_id += 1
            self.pending[rid] = r
        doc: dict[str, Any] = {"id": rid, "verb": "argv", "argv": list(argv)}
        if stdin:
            doc["stdin"] = True
        if report_fd is not None:
            doc["report_fd"] = report_fd
        if json_stdout:
            doc["json_stdout"] = True
        if fields:
            doc.update(fields)  # e.g. ``pty``, ``pty_size``
        with contextlib.suppress(OSError):
            doc["cwd"] = os.getcwd()
        changes = self.env_changes()
        if changes:
            doc["env"] = changes
        try:
            self.send(doc)
        except BaseException:
            with self.lock:
                self.pending.pop(rid, None)
            raise
        return rid, r

    def write_stdin(self, rid: int, data: bytes) -> None:
        view = memoryview(data)
        for off in range(0, len(view), STDIN_CHUNK):
            chunk = base64.b64encode(view[off : off + STDIN_CHUNK]).decode()
            self.send({"id": rid, "verb": "stdin", "data": chunk})
        self.send({"id": rid, "verb": "stdin", "eof": True})

    def wait(self, rid: int, r: Reply) -> Reply:
        """Wait for the request's end; on an interrupt, cancel it (the
        sandbox is ended and reaped) before re-raising."""
        try:
            r._done.acquire()
        except BaseException:
            try:
                self.send({"id": rid, "verb": "cancel"})
                r._done.acquire(timeout=CANCEL_WAIT)
            except BaseException:
                pass
            raise
        if r.server_error is not None:
            raise r.server_error
        return r

    def close(self) -> None:
        """End the server: EOF on its stdin, which ends (TERM, then KILL)
        and reaps whatever it still runs; wait for it."""
        self.dead = self.dead or "hutch serve was closed"
        if self.owner != os.getpid():
            return
        with contextlib.suppress(OSError):
            self.stdin.close()
        try:
            self.proc.wait(timeout=CANCEL_WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        with contextlib.suppress(OSError):
            self.stdout.close()


_server: Server | None = None
_server_lock = threading.Lock()


def server() -> Server:
    """This process's server (started, or started again, as needed)."""
    global _server
    s = _server
    exe = _binary.binary()
    if s is not None and s.alive() and s.exe == exe:
        return s
    with _server_lock:
        s = _server
        if s is not None and s.alive() and s.exe == exe:
            return s
        if s is not None and s.owner == os.getpid():
            s.close()
        _server = Server(exe)
        return _server


def request(
    argv: Sequence[str],
    *,
    input: bytes | None = None,
    report_fd: int | None = None,
    json_stdout: bool = False,
) -> Reply:
    """Run hutch's command line ``argv`` (without the program) on the
    server and wait for its end."""
    s = server()
    rid, r = s.start(argv, stdin=input is not None, report_fd=report_fd, json_stdout=json_stdout)
    if input is not None:
        # A death here is reported by the wait below.
        with contextlib.suppress(ServerDied):
            s.write_stdin(rid, input)
    return s.wait(rid, r)


async def request_async(
    argv: Sequence[str],
    *,
    input: bytes | None = None,
    report_fd: int | None = None,
    json_stdout: bool = False,
) -> Reply:
    """``request`` for asyncio: the same server and transport; the reader
    thread wakes the loop when the request ends. Cancelling the awaiting
    task cancels the request (its sandbox is ended) and waits for its
    end before the cancellation goes on."""
    import asyncio  # here: ``import hutch`` stays without asyncio

    loop = asyncio.get_running_loop()
    ended: asyncio.Future[None] = loop.create_future()

    def done() -> None:
        def set_done() -> None:
            if not ended.done():
                ended.set_result(None)

        with contextlib.suppress(RuntimeError):  # the loop is closed
            loop.call_soon_threadsafe(set_done)

    s = server()
    rid, r = s.start(
        argv,
        stdin=input is not None,
        report_fd=report_fd,
        json_stdout=json_stdout,
        on_done=done,
    )
    if input is not None:
        with contextlib.suppress(ServerDied):
            s.write_stdin(rid, input)
    try:
        await asyncio.shield(ended)
    except asyncio.CancelledError:
        with contextlib.suppress(ServerDied):
            s.send({"id": rid, "verb": "cancel"})
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(ended), CANCEL_WAIT)
        raise
    if r.server_error is not None:
        raise r.server_error
    return r


def _close_at_exit() -> None:
    s = _server
    if s is not None:
        s.close()


def _forget_in_child() -> None:
    # A forked child must not hold the parent's server open (its EOF is
    # what ends the server) nor use it: it starts its own.
    global _server
    s = _server
    _server = None
    if s is not None:
        for f in (s.stdin, s.stdout):
            with contextlib.suppress(OSError, ValueError):
                os.close(f.fileno())


atexit.register(_close_at_exit)
os.register_at_fork(after_in_child=_forget_in_child)
