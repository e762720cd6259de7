"""What the sync and asyncio front ends share: the hutch command lines, the
status stream and envelope parsing, the egress audit, the exceptions a
document turns into. No I/O beyond small files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from . import _binary
from ._errors import (
    CommandFailed,
    HutchError,
    InternalError,
    SetupError,
    Timeout,
    UnenforcedLimit,
    from_document,
)
from ._options import DEFAULT_OUTPUT_LIMIT, PathLike, TempFiles, to_args, uses_proxy
from ._secrets import SecretFds
from ._types import EgressDecision, ExitReport, Result, SessionResult, StartEvent

#: Bytes of egress decisions read back into ``Result.egress``.
EGRESS_READ_MAX = 1 << 20


def state_args(state_dir: PathLike | None, wait: bool) -> list[str]:
    a: list[str] = []
    if state_dir is not None:
        a += ["--state-dir", os.fspath(state_dir)]
    if wait:
        a.append("--wait")
    return a


def command_args(args: Sequence[str], *, may_be_empty: bool = False) -> list[str]:
    if isinstance(args, (str, bytes)):
        raise TypeError("args must be a sequence of strings (the argv), not one string")
    argv = [os.fspath(a) for a in args]
    if not argv and not may_be_empty:
        raise ValueError("args is empty: name the command to run")
    return argv


def with_default_limit(options: Mapping[str, Any], default: str | None) -> dict[str, Any]:
    o = dict(options)
    if "output_limit" not in o and default is not None:
        o["output_limit"] = default
    return o


class Launch:
    """One sandboxed command about to start: its hutch argv (with the
    status descriptor's number) and the egress audit to read back.

    With ``events`` the descriptor gets the launcher's start and exit events
    then the envelope (``--status-fd N --json``: what ``spawn`` needs for
    ``started()``); without, only the envelope (``--result-fd N``), which
    spares the launcher the start handshake on every ``run``."""

    def __init__(
        self,
        args: Sequence[str],
        options: Mapping[str, Any],
        *,
        status_fd: int,
        events: bool = False,
        session: str | None = None,
        state_dir: PathLike | None = None,
        wait: bool = False,
        default_output_limit: str | None = DEFAULT_OUTPUT_LIMIT,
        command_from_profile: bool = False,
    ) -> None:
        # An agent's command comes from its profile (`--agent --prompt`):
        # ``args`` are then only the CLI's own options, maybe none.
        self.args = tuple(command_args(args, may_be_empty=command_from_profile))
        if events and "status_file" in options:
            raise TypeError(
                "status_file: a spawned command reports through its own status stream "
                "(proc.started(), proc.wait())"
            )
        # Values become memfds here (closed by the caller once the child
        # holds them, or by cleanup): nothing of them reaches argv.
        self.secret_fds = SecretFds(options)
        self.temp = TempFiles()
        try:
            opts = with_default_limit(self.secret_fds.options, default_output_limit)
            flags = to_args(opts, session=session is not None, temp=self.temp)
        except BaseException:
            self.secret_fds.close()
            self.temp.cleanup()
            raise
        self.audit = EgressAudit(opts)
        flags += self.audit.args
        exe = _binary.binary()
        report = ["--status-fd" if events else "--result-fd", str(status_fd)]
        if session is None:
            self.verb = "run"
            self.argv = [exe, "run", "--quiet", "--json", *report]
        else:
            self.verb = "session.run"
            self.argv = [
                exe,
                "session",
                *state_args(state_dir, wait),
                "--json",
                "run",
                session,
                "--quiet",
                *report,
            ]
        self.argv += flags
        self.argv.append("--")
        self.argv += self.args

    def finish(
        self, status: bytes, returncode: int, stdout: bytes, stderr: bytes, check: bool
    ) -> Result:
        """The result of the finished command (or the exception for
        hutch's own failure)."""
        start, env = parse_status(status)
        return self.finish_parsed(start, env, returncode, stdout, stderr, check)

    def finish_parsed(
        self,
        start: StartEvent | None,
        env: dict[str, Any] | None,
        returncode: int,
        stdout: bytes,
        stderr: bytes,
        check: bool,
    ) -> Result:
        """``finish`` of a status stream already parsed (the server's)."""
        try:
            if env is None:
                raise no_report(self.verb, returncode, stderr)
            result_doc = env.get("result")
            report_doc = (
                result_doc.get("report")
                if self.verb == "session.run" and isinstance(result_doc, dict)
                else result_doc
            )
            if not env.get("ok"):
                err = from_document(env.get("error"), self.verb, returncode)
                if isinstance(err, SetupError) and isinstance(report_doc, dict):
                    err.report = ExitReport.from_dict(report_doc)
                raise err
            if not isinstance(report_doc, dict):
                raise no_report(self.verb, returncode, stderr)
            report = ExitReport.from_dict(report_doc)
            egress = self.audit.collect()
        finally:
            self.audit.cleanup()
            self.temp.cleanup()
        if self.verb == "session.run":
            assert isinstance(result_doc, dict)
            res: Result = SessionResult(
                args=self.args,
                returncode=report.status,
                stdout=stdout,
                stderr=stderr,
                report=report,
                start=start,
                egress=egress,
                command_seq=int(result_doc.get("command_seq") or 0),
                deadline_hit=bool(result_doc.get("deadline_hit")),
                egress_counts=result_doc.get("egress"),
            )
        else:
            res = Result(
                args=self.args,
                returncode=report.status,
                stdout=stdout,
                stderr=stderr,
                report=report,
                start=start,
                egress=egress,
            )
        if check:
            raise_for_result(res)
        return res

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """The fds the hutch process keeps besides the status fd."""
        return self.secret_fds.pass_fds

    def cleanup(self) -> None:
        self.secret_fds.close()
        self.audit.cleanup()
        self.temp.cleanup()


#: Unenforced entries that are not limits a caller asked for (the disk
#: of a session's upper is the host filesystem's business: docs/sessions.md).
NOT_A_LIMIT = ("limits.upper_size",)


def caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside this package (a
    warning then names the caller's line)."""
    here = os.path.dirname(os.path.abspath(__file__)) + os.sep
    level = 1
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(here):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def warn_unenforced(report: ExitReport) -> None:
    """One ``hutch.UnenforcedLimit`` warning per limit the command ran
    without (hutch's own note is hidden by ``--quiet``), at the caller's
    line. Called by the front ends once per command, in the caller's
    frames."""
    for line in report.unenforced:
        key = line.split(":", 1)[0].strip()
        if key in NOT_A_LIMIT:
            continue
        warnings.warn(
            UnenforcedLimit(
                f"not enforced on this host: {line} (strict=True refuses to run without it)",
                key,
            ),
            stacklevel=caller_stacklevel(),
        )


def kill_sandbox(init_pid: int) -> None:
    """SIGKILL the workload of the sandbox whose init is ``init_pid`` (the
    init's children): the init then reports the kill (``signaled``) and
    the sandbox ends, everything in it with it. When the children cannot
    be read, the init itself is killed. Only for a sandbox whose hutch
    still runs: the init is hutch's unreaped child, so its pid is that
    process, and the workload is the init's."""
    try:
        with open(f"/proc/{init_pid}/task/{init_pid}/children", "rb") as f:
            children = [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        children = []
    for pid in children or [init_pid]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def kill_sandbox_of(hutch_pid: int) -> bool:
    """``kill_sandbox`` for the sandbox of a running hutch whose start
    event is unknown: its init is hutch's child. False when hutch has no
    child (yet, or any more)."""
    try:
        with open(f"/proc/{hutch_pid}/task/{hutch_pid}/children", "rb") as f:
            inits = [int(c) for c in f.read().split()]
    except (OSError, ValueError):
        return False
    for init in inits:
        kill_sandbox(init)
    return bool(inits)


def raise_for_result(res: Result) -> None:
    """``check=True``: Timeout when the wall clock ran out, CommandFailed
    for any other unsuccessful end."""
    if res.report.success:
        return
    r = res.report
    name = res.args[0] if res.args else "the agent CLI"
    if r.timed_out:
        raise Timeout(f"{name}: timed out; every process of the sandbox was killed", res)
    why = r.error or (f"killed by signal {r.signal}" if r.signal else f"exit status {r.status}")
    raise CommandFailed(f"{name}: {r.reason}: {why}", res)


def parse_status(data: bytes) -> tuple[StartEvent | None, dict[str, Any] | None]:
    """The start event and the envelope of a status stream (the exit event
    between them is the envelope's result again, so it is not parsed)."""
    start = None
    env = None
    for line in data.split(b"\n"):
        if line.startswith(b'{"hutch"'):
            env = json.loads(line)
        elif line.startswith(b'{"event":"start"'):
            start = StartEvent.from_dict(json.loads(line))
    return start, env


def no_report(verb: str, returncode: int, stderr: bytes) -> HutchError:
    tail = stderr.decode("utf-8", "replace").strip().splitlines()
    last = tail[-1] if tail else ""
    return InternalError(
        f"hutch {verb} ended (status {returncode}) without a report"
        + (f": {last}" if last else ""),
        verb=verb,
        returncode=returncode,
    )


class EgressAudit:
    """When the command uses the egress proxy, its decisions are read back
    into ``Result.egress``: from a private file, or from the caller's own
    ``egress_audit`` file past its size before the command."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.args: list[str] = []
        self.path: str | None = None
        self.offset = 0
        self.own = False
        if not uses_proxy(options):
            return
        if "egress_audit" in options:
            self.path = os.fspath(options["egress_audit"])
            self.args = ["--audit", self.path]
            try:
                self.offset = os.stat(self.path).st_size
            except FileNotFoundError:
                self.offset = 0
            return
        fd, self.path = tempfile.mkstemp(prefix="hutch-egress-", suffix=".jsonl")
        os.close(fd)
        self.own = True
        self.args = ["--audit", self.path]

    def collect(self) -> tuple[EgressDecision, ...]:
        if self.path is None:
            return ()
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return ()
        try:
            os.lseek(fd, self.offset, os.SEEK_SET)
            data = os.read(fd, EGRESS_READ_MAX)
        finally:
            os.close(fd)
        out = []
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except ValueError:
                continue  # a line cut by the read bound
            if isinstance(d, dict) and d.get("kind") == "egress":
                out.append(EgressDecision.from_dict(d))
        return tuple(out)

    def cleanup(self) -> None:
        if self.own and self.path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
            self.own = False


def envelope_result(stdout: bytes, stderr: bytes, returncode: int, verb: str) -> Any:
    """The ``result`` of a ``--json`` document on stdout (or its exception)."""
    line = stdout.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        env = json.loads(line)
    except ValueError:
        raise no_report(verb, returncode, stderr) from None
    return envelope_doc_result(env, stderr, returncode, verb)


def envelope_doc_result(env: Any, stderr: bytes, returncode: int, verb: str) -> Any:
    """``envelope_result`` of an envelope already parsed (the server's)."""
    if not isinstance(env, dict) or "hutch" not in env:
        raise no_report(verb, returncode, stderr)
    if not env.get("ok"):
        err = from_document(env.get("error"), verb, returncode)
        err.partial = env.get("result")
        raise err
    return env.get("result")
