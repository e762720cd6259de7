"""``hutch.Session``: a persistent workspace over a sealed baseline
(docs/sessions.md), synchronous."""

from __future__ import annotations

import builtins
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from . import _serve
from . import _session_core as core
from ._core import envelope_doc_result, envelope_result
from ._options import PathLike, Seconds, Size
from ._run import execute
from ._spawn import LineCallback, Process, StreamMode
from ._types import (
    CompactReport,
    DiffReport,
    ExportManifest,
    GcReport,
    GlobMatch,
    GrepMatch,
    Killed,
    Sandbox,
    SealInfo,
    SearchResult,
    SessionInfo,
    SessionResult,
    SnapshotInfo,
)

if TYPE_CHECKING:
    from types import TracebackType

    from typing_extensions import Unpack

    from ._options import Options

T = TypeVar("T")


def call(v: core.Verb[T]) -> T:
    """Run one session verb and read its result (or raise its error)."""
    if _serve.enabled():
        r = _serve.request(v.argv[1:], input=v.input, json_stdout=True)
        if r.envelope is not None:
            return v.parse(envelope_doc_result(r.envelope, r.err, r.returncode, v.verb))
        return v.parse(envelope_result(r.out, r.err, r.returncode, v.verb))
    p = subprocess.run(
        v.argv,
        input=v.input if v.input is not None else b"",
        capture_output=True,
        check=False,
    )
    return v.parse(envelope_result(p.stdout, p.stderr, p.returncode, v.verb))


class Session(core.Target):
    """A session: many commands in fresh sandboxes over one workspace (files
    persist, processes do not), file access, search, the diff, artifacts.

    ``with Session.create(...) as s:`` closes it when the block ends, also
    on exceptions; ``close()`` is idempotent. ``state_dir`` is hutch's
    session state directory (default: ``$HUTCH_STATE_DIR``, else hutch's);
    ``wait=True`` waits for a busy session instead of raising
    ``SessionBusy``.
    """

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
        """The session's description: what ``create()`` answered, or for a
        session attached by id (``hutch.Session(id)``), ``show()``'s on
        first use (``NotFound`` when there is no such session); ``None``
        once closed without one."""
        if self._info is None and not self.closed:
            self._info = self.show()
        return self._info

    @classmethod
    def create(
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
        """Import a baseline (a directory, or a full commit id of a git
        repository) and open a session over it.

        Refused unless allowed: submodules, tracked symlinks, export
        attributes. ``expect_fingerprint`` refuses any other baseline
        (``FingerprintMismatch``); ``deadline`` (seconds or ``"1h"``) and
        ``max_commands`` bound the session; the ``max_*`` caps bound the
        import (``TooLarge``, nothing kept).

        For production jobs: ``image`` (a pinned image of the store) is the
        system of every command (``pull="missing"`` fetches it from its
        registry first when the store lacks it, with ``insecure_registries``
        ``registry_auth`` and ``registry_credential`` as for
        ``images.pull``; ``approved``, a file or
        the entries, refuses any other image, now and for every command);
        ``workspace_path`` (default ``/workspace``) is where commands see
        the workspace; ``disk_max``
        is a hard cap of what the session writes (root only; refused
        otherwise) and ``disk_max_preferred`` the same where it can be
        enforced, else accounted after each command; ``audit_dir`` keeps
        the audit after close; ``defaults`` (``hutch.run``'s options) apply
        to every command, which may narrow them but never widen what
        ``locks`` names (``"egress"``, ``"binds"``, ``"env"``, ``"limits"``,
        ``"confinement"``, ``"all"``)."""
        info = call(
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
    def list(cls, *, state_dir: PathLike | None = None) -> builtins.list[SessionInfo]:
        """Every session of the state directory."""
        return call(core.list_sessions(state_dir))

    @classmethod
    def gc(cls, older_than: Seconds, *, state_dir: PathLike | None = None) -> GcReport:
        """Remove sessions unused for ``older_than`` (seconds or ``"1d"``) and
        leftovers of interrupted creates and closes. An entry that could not
        be removed raises ``HostIOError`` (``partial`` holds the report)."""
        return call(core.gc(state_dir, older_than))

    def run(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        check: bool = False,
        **options: Unpack[Options],
    ) -> SessionResult:
        """Run ``args`` in a fresh sandbox whose ``/workspace`` (and cwd) is
        the session's workspace; the options are ``hutch.run``'s (without
        ``workspace``/``changes``/``bare``). Output is bounded (16 MiB
        unless ``output_limit``). ``SessionBusy`` while another operation
        runs; ``Refused`` past the deadline or the command budget."""
        res = execute(
            args,
            options,
            input=input,
            check=check,
            session=self.id,
            state_dir=self.state_dir,
            wait=self.wait,
        )
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
        on_stdout: LineCallback | None = None,
        on_stderr: LineCallback | None = None,
        **options: Unpack[Options],
    ) -> Process:
        """A session command as a ``Process`` with streamed output (see
        ``hutch.spawn``); its ``result()`` is a ``SessionResult``."""
        return Process(
            args,
            options,
            input=input,
            stdout=stdout,
            stderr=stderr,
            check=check,
            on_stdout=on_stdout,
            on_stderr=on_stderr,
            session=self.id,
            state_dir=self.state_dir,
            wait=self.wait,
        )

    def read(self, path: str, *, max_bytes: Size = core.DEFAULT_READ_MAX) -> bytes:
        """The regular file ``path`` of the workspace (links are not
        followed); ``TooLarge`` when it has more than ``max_bytes``."""
        return call(core.read(self, path, max_bytes))

    def read_text(self, path: str, *, max_bytes: Size = core.DEFAULT_READ_MAX) -> str:
        return self.read(path, max_bytes=max_bytes).decode("utf-8", "replace")

    def write(
        self, path: str, data: bytes | str, *, max_bytes: Size = core.DEFAULT_WRITE_MAX
    ) -> int:
        """Replace (or create) the file ``path``, creating its parents;
        returns the bytes written."""
        return call(core.write(self, path, data, max_bytes))

    def glob(
        self,
        pattern: str,
        *,
        path: str | None = None,
        max_matches: int = 1000,
        max_bytes: Size = 1 << 20,
        timeout: Seconds = None,
        exclude: Sequence[str] = (),
    ) -> SearchResult[GlobMatch]:
        """Files of the workspace matching ``pattern`` (``**/*.py``), found
        inside the session's sandbox; paths relative to the workspace.
        ``exclude`` leaves out paths, directories with all below
        (gitignore's shape: ``".deps"`` anywhere, ``"build/**"`` from the
        root); nothing by default, so pass ``[".deps"]`` for a tree a
        provisioning step installed."""
        return call(core.glob(self, pattern, path, max_matches, max_bytes, timeout, exclude))

    def grep(
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
        """Lines of the workspace's files matching ``regex``, found inside the
        session's sandbox (with rg when it has one, else hutch's built-in
        engine); bounded by ``max_matches`` and ``max_bytes``. ``exclude``
        as for ``glob``."""
        return call(
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
    def diff(
        self,
        *,
        format: Literal["unified"] = "unified",
        max_bytes: Size = ...,
        since: int | str | None = ...,
        exclude: Sequence[str] = ...,
        include_ignored: bool = ...,
    ) -> bytes: ...
    @overload
    def diff(
        self,
        *,
        format: Literal["json"],
        max_bytes: Size = ...,
        since: int | str | None = ...,
        exclude: Sequence[str] = ...,
        include_ignored: bool = ...,
    ) -> DiffReport: ...
    @overload
    def diff(
        self,
        *,
        format: Literal["stat"],
        max_bytes: Size = ...,
        since: int | str | None = ...,
        exclude: Sequence[str] = ...,
        include_ignored: bool = ...,
    ) -> str: ...
    def diff(
        self,
        *,
        format: str = "unified",
        max_bytes: Size = core.DEFAULT_DIFF_MAX,
        since: int | str | None = None,
        exclude: Sequence[str] = (),
        include_ignored: bool = False,
    ) -> Any:
        """The workspace's changes since the last seal (the baseline when
        there is none; ``since="baseline"`` or a seal's index to choose): a
        patch that ``git apply`` takes (``unified``, bytes), a
        ``DiffReport`` (``json``) or a diffstat (``stat``). Paths the
        baseline's ignore files name are left out unless
        ``include_ignored``; ``exclude`` leaves out more (gitignore globs,
        e.g. ``[".deps/"]``). ``DiffTooLarge`` when longer than
        ``max_bytes``: never a partial patch."""
        return call(core.diff(self, format, max_bytes, since, exclude, include_ignored))

    def export(
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
        """Write the named paths (directories recursively) into ``out``
        (``.zip`` or ``.tar``) with a manifest of sha256s; ``patch=True``
        adds the unified diff (``since``, ``exclude``, ``include_ignored``
        as for ``diff``). Caps fail the export whole."""
        return call(
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

    def rm(self, *paths: str) -> builtins.list[str]:
        """Remove workspace paths (directories with their content), as
        ``rm -rf`` in a command would (frees what a disk quota counts);
        returns them."""
        return call(core.rm(self, paths))

    def audit(self, *, audit_dir: PathLike | None = None) -> builtins.list[dict[str, Any]]:
        """The session's audit, one dict per event (commands, searches,
        seals, ...; docs/sessions.md); of a closed session, the copy kept
        in ``audit_dir``."""
        return call(core.audit(self, audit_dir))

    def warm(self, count: int, *, idle: Seconds = None) -> None:
        """Keep ``count`` sandboxes ready for this session's commands
        (docs/warm.md); the server stops after ``idle`` without a command
        (default 10 minutes), at close, or at the deadline."""
        call(core.warm(self, count, idle))

    def warm_ready(self, *, timeout: Seconds = None) -> dict[str, Any]:
        """Wait until the warm server has all its sandboxes ready and none
        handed out (default timeout 30 s); its status (``size``,
        ``ready``, ``warming``, ``claimed``)."""
        return call(core.warm_ready(self, timeout))

    def seal(self, *, network_none: bool = False) -> SealInfo:
        """Freeze the changes so far as a read-only layer (provisioning
        done): ``diff`` and ``export`` show what comes after it.
        ``network_none=True``: no later command may have egress (a run
        asking for it raises ``Refused``)."""
        return call(core.seal(self, network_none))

    def show(self) -> SessionInfo:
        """The session now: ``raw`` holds all of ``session show`` (seals,
        disk use, budget, deadline, live commands; docs/machine.md)."""
        return call(core.show(self))

    def snapshot(self, name: str | None = None) -> SnapshotInfo:
        """Freeze the changes so far into a read-only layer and go on over
        it (cost O(changes)); the diff and the network stay as they were.
        Returns the snapshot (its ``id`` is what ``fork`` and ``rollback``
        take, as is its name)."""
        return call(core.snapshot(self, name))

    def snapshots(self) -> builtins.list[SnapshotInfo]:
        """The session's layers, lowest first."""
        return call(core.snapshots(self))

    def compact(self, depth: int = 1) -> CompactReport:
        """Merge the oldest frozen layers until ``depth`` are left (exactly:
        whiteouts and opaque directories kept; a fork's layers stay its
        own). Snapshots and seals also do this by themselves past the
        session's ``compact_depth``; merged snapshots can no longer be a
        ``rollback`` or ``fork`` point."""
        return call(core.compact(self, depth))

    def fork(
        self,
        count: int = 1,
        *,
        from_: int | str | SnapshotInfo | None = None,
        deadline: Seconds = None,
        max_commands: int | None = None,
        warm: int | None = None,
        warm_idle: Seconds = None,
    ) -> builtins.list[Session]:
        """``count`` new sessions over this one's layers up to ``from_``
        (default: a snapshot of now), sharing them (nothing is copied);
        each has its own upper, lock, audit, budget and deadline. Waits for
        a command running here. Close each (or use ``with``)."""
        snap = from_.id if isinstance(from_, SnapshotInfo) else from_
        ids = call(core.fork(self, count, snap, deadline, max_commands, warm, warm_idle))
        return [Session(i, state_dir=self.state_dir, wait=self.wait) for i in ids]

    def rollback(self, snap: int | str | SnapshotInfo) -> SnapshotInfo:
        """Discard every change after ``snap`` (the upper and later
        layers); the session goes on from it."""
        return call(core.rollback(self, snap))

    def close(self, *, keep_audit: PathLike | None = None) -> bool:
        """Kill the session's live commands, remove the session and
        everything in it, and verify nothing of it is left (else
        ``CleanupIncomplete``). Idempotent: returns whether this call
        removed it. ``keep_audit``: keep the audit as
        ``DIR/ID.audit.jsonl``."""
        if self.closed:
            return False
        removed = call(core.close(self, keep_audit))
        self.closed = True
        return removed

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"hutch.Session({self.id!r})"


def ps() -> builtins.list[Sandbox]:
    """The running sandboxes (``hutch ps``): the caller's own; root sees
    every user's."""
    return call(core.ps())


def kill(
    *sandboxes: str, session: str | None = None, label: str | None = None, all: bool = False
) -> builtins.list[Killed]:
    """End sandboxes and every process in them (``hutch kill``): by id,
    all of a session, all with a label ``KEY=VALUE``, or ``all=True``."""
    return call(core.kill(sandboxes, session, label, all))
