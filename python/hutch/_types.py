"""Typed results: what the machine interface's documents hold
(docs/machine.md), as frozen dataclasses. Each keeps the document it was
read from as ``raw``, so a field added by a newer binary is still reachable."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar


def _str(v: Any) -> str | None:
    return None if v is None else str(v)


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


@dataclass(frozen=True)
class Changes:
    """Paths the workload changed in one overlay."""

    dest: str
    changed_paths: int
    kept_in: str | None


@dataclass(frozen=True)
class Enforcement:
    """What hutch enforced for the sandbox."""

    namespaces: tuple[str, ...]
    uid: int
    gid: int
    host_uid: int
    host_gid: int
    no_new_privs: bool
    capabilities: tuple[str, ...]
    network: str
    wall_clock_ms: int | None
    output_bytes: int | None
    confinement: dict[str, Any] | None
    limits: dict[str, Any] | None


@dataclass(frozen=True)
class Usage:
    """What a command used, all its processes together: from its cgroup
    where it has one (v1 or v2), else from the reaped process tree's
    rusage (``source`` says which). A value neither has is ``None``
    (``pids_peak`` needs a cgroup)."""

    cpu_user_usec: int | None
    cpu_system_usec: int | None
    #: The cgroup's peak (page cache and tmpfs files count), else the
    #: largest single process's peak resident set.
    memory_peak_bytes: int | None
    #: Bytes read from / written to block devices (not the page cache).
    io_read_bytes: int | None
    io_write_bytes: int | None
    #: The most processes alive at once.
    pids_peak: int | None
    source: str

    @property
    def cpu_seconds(self) -> float | None:
        """User and system CPU time together, in seconds."""
        if self.cpu_user_usec is None and self.cpu_system_usec is None:
            return None
        return ((self.cpu_user_usec or 0) + (self.cpu_system_usec or 0)) / 1e6

    @staticmethod
    def from_dict(d: Any) -> Usage | None:
        if not isinstance(d, dict):
            return None
        return Usage(
            cpu_user_usec=_int(d.get("cpu_user_usec")),
            cpu_system_usec=_int(d.get("cpu_system_usec")),
            memory_peak_bytes=_int(d.get("memory_peak_bytes")),
            io_read_bytes=_int(d.get("io_read_bytes")),
            io_write_bytes=_int(d.get("io_write_bytes")),
            pids_peak=_int(d.get("pids_peak")),
            source=str(d.get("source", "")),
        )


@dataclass(frozen=True)
class ExitReport:
    """How the sandbox ended (``hutch run --status-fd``'s exit report).

    ``reason`` is ``exited``, ``signaled``, ``timed-out``, ``oom-killed``,
    ``pids-limit-hit``, ``setup-failed`` or ``exec-failed``; ``status`` is
    hutch's exit status (the command's, 128+N for signal N, 124 timeout,
    125 hutch failed, 126/127 not executable / not found).
    ``output_bytes`` is what the workload wrote to stdout and stderr,
    ``output_kept`` what of it was relayed (within ``output_limit``);
    ``usage`` what it used (CPU, peak memory, block I/O, peak process
    count), ``None`` from a binary that does not report it."""

    sandbox_id: str
    status: int
    exit_code: int | None
    signal: int | None
    reason: str
    error: str | None
    duration_ms: int
    output_bytes: int
    output_truncated: bool
    changes: tuple[Changes, ...]
    enforced: Enforcement
    unenforced: tuple[str, ...]
    raw: dict[str, Any] = field(repr=False, compare=False)
    output_kept: int = 0
    usage: Usage | None = None

    @property
    def success(self) -> bool:
        return self.status == 0 and self.reason == "exited"

    @property
    def timed_out(self) -> bool:
        return self.reason == "timed-out"

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ExitReport:
        e = d.get("enforced") or {}
        return ExitReport(
            sandbox_id=str(d.get("sandbox_id", "")),
            status=int(d["status"]),
            exit_code=_int(d.get("exit_code")),
            signal=_int(d.get("signal")),
            reason=str(d.get("reason", "")),
            error=_str(d.get("error")),
            duration_ms=int(d.get("duration_ms", 0)),
            output_bytes=int(d.get("output_bytes", 0)),
            output_truncated=bool(d.get("output_truncated", False)),
            changes=tuple(
                Changes(str(c["dest"]), int(c["changed_paths"]), _str(c.get("kept_in")))
                for c in d.get("changes") or ()
            ),
            enforced=Enforcement(
                namespaces=tuple(e.get("namespaces") or ()),
                uid=int(e.get("uid", 0)),
                gid=int(e.get("gid", 0)),
                host_uid=int(e.get("host_uid", 0)),
                host_gid=int(e.get("host_gid", 0)),
                no_new_privs=bool(e.get("no_new_privs", False)),
                capabilities=tuple(e.get("capabilities") or ()),
                network=str(e.get("network", "")),
                wall_clock_ms=_int(e.get("wall_clock_ms")),
                output_bytes=_int(e.get("output_bytes")),
                confinement=e.get("confinement"),
                limits=e.get("limits"),
            ),
            unenforced=tuple(d.get("unenforced") or ()),
            raw=d,
            output_kept=int(d.get("output_kept", d.get("output_bytes", 0))),
            usage=Usage.from_dict(d.get("usage")),
        )


@dataclass(frozen=True)
class StartEvent:
    """The sandbox started: ``pid`` is its init on the host, ``workload_pid``
    the command's pid inside."""

    sandbox_id: str
    pid: int
    workload_pid: int
    namespaces: dict[str, int]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> StartEvent:
        return StartEvent(
            sandbox_id=str(d.get("sandbox_id", "")),
            pid=int(d["pid"]),
            workload_pid=int(d.get("workload_pid", 0)),
            namespaces=dict(d.get("namespaces") or {}),
            raw=d,
        )


@dataclass(frozen=True)
class EgressDecision:
    """One decision of the egress proxy (docs/egress.md, "Audit").
    ``verdict`` is ``allow``, ``deny``, ``invalid``, ``limit`` or ``error``."""

    verdict: str
    host: str | None
    port: int | None
    method: str
    status: int
    rule: str | None
    error: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def allowed(self) -> bool:
        return self.verdict == "allow"

    @staticmethod
    def from_dict(d: dict[str, Any]) -> EgressDecision:
        return EgressDecision(
            verdict=str(d.get("verdict", "")),
            host=_str(d.get("host")),
            port=_int(d.get("port")),
            method=str(d.get("method", "")),
            status=int(d.get("status") or 0),
            rule=_str(d.get("rule")),
            error=_str(d.get("error")),
            raw=d,
        )


@dataclass(frozen=True)
class Result:
    """A finished command: its output (bounded by ``output_limit``), the
    exit report, and, when it used the egress proxy, the proxy's decisions."""

    args: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes
    report: ExitReport
    start: StartEvent | None
    egress: tuple[EgressDecision, ...] = ()

    @property
    def ok(self) -> bool:
        return self.report.success

    @property
    def timed_out(self) -> bool:
        return self.report.timed_out

    @property
    def usage(self) -> Usage | None:
        """What the command used (``report.usage``)."""
        return self.report.usage

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    @property
    def denied_hosts(self) -> tuple[str, ...]:
        """Hosts the egress proxy refused (``deny`` verdicts), each once, in
        the order first refused (``denied_counts`` says how often)."""
        return tuple(self.denied_counts)

    @property
    def denied_counts(self) -> dict[str, int]:
        """Refused host → how many times it was refused."""
        counts: dict[str, int] = {}
        for d in self.egress:
            if d.verdict == "deny":
                counts[d.host or ""] = counts.get(d.host or "", 0) + 1
        return counts


@dataclass(frozen=True)
class SessionResult(Result):
    """A session command: also its number in the session and whether the
    session deadline (not its own timeout) ended it."""

    command_seq: int = 0
    deadline_hit: bool = False
    egress_counts: dict[str, int] | None = None


@dataclass(frozen=True)
class Source:
    """Where a session's baseline came from: ``kind`` ``dir`` (``path``) or
    ``git`` (``repo`` and ``rev``)."""

    kind: str
    path: str | None = None
    repo: str | None = None
    rev: str | None = None


@dataclass(frozen=True)
class SessionInfo:
    """A session's description (``session.json``)."""

    id: str
    source: Source
    fingerprint: str
    files: int
    created_unix_ms: int
    used_unix_ms: int
    deadline_unix_ms: int | None
    max_commands: int | None
    commands_run: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> SessionInfo:
        s = d.get("source") or {}
        return SessionInfo(
            id=str(d["id"]),
            source=Source(
                kind=str(s.get("kind", "")),
                path=_str(s.get("path")),
                repo=_str(s.get("repo")),
                rev=_str(s.get("rev") or s.get("commit")),
            ),
            fingerprint=str(d.get("fingerprint", "")),
            files=int(d.get("files", 0)),
            created_unix_ms=int(d.get("created_unix_ms", 0)),
            used_unix_ms=int(d.get("used_unix_ms", 0)),
            deadline_unix_ms=_int(d.get("deadline_unix_ms")),
            max_commands=_int(d.get("max_commands")),
            commands_run=int(d.get("commands_run", 0)),
            raw=d,
        )


@dataclass(frozen=True)
class Skipped:
    """An entry a diff or export cannot carry (FIFO, socket, device)."""

    path: str
    path_quoted: str
    kind: str


@dataclass(frozen=True)
class DiffSide:
    kind: str
    mode: str
    size: int
    sha256: str
    target: str | None = None


@dataclass(frozen=True)
class DiffFile:
    """One changed path of ``diff(format="json")``; ``status`` is ``added``,
    ``deleted``, ``modified`` or ``type-changed``."""

    path: str
    path_quoted: str
    status: str
    old: DiffSide | None
    new: DiffSide | None
    binary: bool
    insertions: int
    deletions: int


@dataclass(frozen=True)
class DiffReport:
    """``diff(format="json")``: the changes without their content."""

    files: tuple[DiffFile, ...]
    skipped: tuple[Skipped, ...]
    files_changed: int
    insertions: int
    deletions: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> DiffReport:
        def side(s: Any) -> DiffSide | None:
            if not s:
                return None
            return DiffSide(
                str(s["kind"]),
                str(s["mode"]),
                int(s["size"]),
                str(s["sha256"]),
                _str(s.get("target")),
            )

        return DiffReport(
            files=tuple(
                DiffFile(
                    path=str(f["path"]),
                    path_quoted=str(f["path_quoted"]),
                    status=str(f["status"]),
                    old=side(f.get("old")),
                    new=side(f.get("new")),
                    binary=bool(f.get("binary", False)),
                    insertions=int(f.get("insertions", 0)),
                    deletions=int(f.get("deletions", 0)),
                )
                for f in d.get("files") or ()
            ),
            skipped=skipped_from(d.get("skipped")),
            files_changed=int(d.get("files_changed", 0)),
            insertions=int(d.get("insertions", 0)),
            deletions=int(d.get("deletions", 0)),
            raw=d,
        )


def skipped_from(v: Any) -> tuple[Skipped, ...]:
    return tuple(
        Skipped(str(s.get("path", "")), str(s.get("path_quoted", "")), str(s.get("kind", "")))
        for s in v or ()
    )


@dataclass(frozen=True)
class ExportEntry:
    """One entry of an export's manifest (``skipped`` ones are not in the
    archive)."""

    path: str
    path_quoted: str
    kind: str
    mode: str | None
    size: int | None
    sha256: str | None
    target: str | None
    skipped: bool


@dataclass(frozen=True)
class ExportManifest:
    """What ``export`` wrote: the archive and its manifest (sha256 of every
    file, as in the archive's ``.hutch/manifest.json``)."""

    archive: Path
    entries: tuple[ExportEntry, ...]
    total_bytes: int
    skipped: int
    patch_sha256: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    def by_path(self) -> dict[str, ExportEntry]:
        return {e.path: e for e in self.entries}

    @staticmethod
    def from_dict(d: dict[str, Any]) -> ExportManifest:
        m = d.get("manifest") or {}
        return ExportManifest(
            archive=Path(str(d["archive"])),
            entries=tuple(
                ExportEntry(
                    path=str(e["path"]),
                    path_quoted=str(e.get("path_quoted", e["path"])),
                    kind=str(e["kind"]),
                    mode=_str(e.get("mode")),
                    size=_int(e.get("size")),
                    sha256=_str(e.get("sha256")),
                    target=_str(e.get("target")),
                    skipped=bool(e.get("skipped", False)),
                )
                for e in m.get("entries") or ()
            ),
            total_bytes=int(d.get("total_bytes", 0)),
            skipped=int(d.get("skipped", 0)),
            patch_sha256=_str(d.get("patch_sha256")),
            raw=d,
        )


@dataclass(frozen=True)
class GlobMatch:
    """A file ``glob`` found: ``kind`` is ``file``, ``symlink`` or ``other``."""

    path: str
    path_quoted: str
    kind: str


@dataclass(frozen=True)
class GrepMatch:
    """A matching line (``line`` and ``text`` are ``None`` with
    ``files_with_matches``)."""

    path: str
    path_quoted: str
    line: int | None
    text: str | None
    text_truncated: bool


M = TypeVar("M", GlobMatch, GrepMatch)


@dataclass(frozen=True)
class SearchResult(Generic[M]):
    """What ``glob`` or ``grep`` found, in path order. ``truncated_by`` names
    the bound that stopped it early (``max-matches``, ``max-bytes``,
    ``max-line-bytes`` or ``timeout``); ``matches`` is what it found until
    then."""

    matches: tuple[M, ...]
    engine: str
    truncated: bool
    truncated_by: str | None
    pattern: str
    path: str
    duration_ms: int

    def __iter__(self) -> Any:
        return iter(self.matches)

    def __len__(self) -> int:
        return len(self.matches)

    @property
    def paths(self) -> list[str]:
        """The paths, each once, in order."""
        seen: dict[str, None] = {}
        for m in self.matches:
            seen.setdefault(m.path, None)
        return list(seen)


@dataclass(frozen=True)
class GcReport:
    """What ``Session.gc`` removed, and what it could not (name, error)."""

    removed: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Feature:
    """One kernel feature of ``hutch check``."""

    name: str
    ok: bool
    status: str
    required: bool
    detail: str | None
    fix: str | None


@dataclass(frozen=True)
class LimitSupport:
    """Whether a resource limit (``memory``, ``pids``, ``cpus``, ``io``)
    can be enforced here, by what, and how to fix it."""

    key: str
    flag: str | None
    works: bool
    by: str | None
    why_not: str | None
    fix: str | None


@dataclass(frozen=True)
class CheckReport:
    """``hutch check``: what works on this kernel. ``ok`` means everything
    ``hutch run`` needs by default works."""

    ok: bool
    hutch_version: str
    kernel_release: str
    uid: int
    root: bool
    features: tuple[Feature, ...]
    limits: dict[str, LimitSupport]
    landlock_abi: int | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    def feature(self, name: str) -> Feature | None:
        return next((f for f in self.features if f.name == name), None)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> CheckReport:
        limits = ((d.get("cgroup") or {}).get("limits")) or {}
        return CheckReport(
            ok=bool(d.get("ok", False)),
            hutch_version=str(d.get("hutch_version", "")),
            kernel_release=str(d.get("kernel_release", "")),
            uid=int(d.get("uid", 0)),
            root=bool(d.get("root", False)),
            features=tuple(
                Feature(
                    name=str(f.get("name", "")),
                    ok=bool(f.get("ok", False)),
                    status=str(f.get("status", "")),
                    required=bool(f.get("required", False)),
                    detail=_str(f.get("detail")),
                    fix=_str(f.get("fix")),
                )
                for f in d.get("features") or ()
            ),
            limits={
                name: LimitSupport(
                    key=str(v.get("key", "")),
                    flag=_str(v.get("flag")),
                    works=bool(v.get("works", False)),
                    by=_str(v.get("by")),
                    why_not=_str(v.get("why_not")),
                    fix=_str(v.get("fix")),
                )
                for name, v in limits.items()
                if isinstance(v, dict)
            },
            landlock_abi=_int(d.get("landlock_abi")),
            raw=d,
        )


@dataclass(frozen=True)
class SealInfo:
    """A seal of a session (``session seal``): the layer it froze."""

    index: int
    fingerprint: str
    changes: int
    network_none: bool
    raw: dict[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> SealInfo:
        return SealInfo(
            index=int(d["index"]),
            fingerprint=str(d.get("fingerprint", "")),
            changes=int(d.get("changes", 0)),
            network_none=bool(d.get("network_none", False)),
            raw=d,
        )


@dataclass(frozen=True)
class Sandbox:
    """A running sandbox, as ``hutch ps`` lists it."""

    sandbox_id: str
    state: str
    session: str | None
    labels: dict[str, str]
    pid: int | None
    command: tuple[str, ...]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Sandbox:
        return Sandbox(
            sandbox_id=str(d["sandbox_id"]),
            state=str(d.get("state", "")),
            session=_str(d.get("session")),
            labels={str(k): str(v) for k, v in (d.get("labels") or {}).items()},
            pid=_int(d.get("pid")),
            command=tuple(str(a) for a in d.get("command") or ()),
            raw=d,
        )


@dataclass(frozen=True)
class Killed:
    """One sandbox ``hutch kill`` dealt with: ``outcome`` is ``killed``,
    ``gone`` (it ended by itself) or ``still-running``."""

    sandbox_id: str
    session: str | None
    outcome: str

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Killed:
        return Killed(
            sandbox_id=str(d["sandbox_id"]),
            session=_str(d.get("session")),
            outcome=str(d.get("outcome", "")),
        )


@dataclass(frozen=True)
class CompactReport:
    """What ``compact()`` did: frozen layers before and after, each run
    of snapshot ids merged (first, last), entries written."""

    layers_before: int
    layers_after: int
    merged: list[tuple[int, int]]
    entries: int
    raw: dict[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> CompactReport:
        return CompactReport(
            layers_before=int(d["layers_before"]),
            layers_after=int(d["layers_after"]),
            merged=[(int(a), int(b)) for a, b in d.get("merged", [])],
            entries=int(d.get("entries", 0)),
            raw=d,
        )


@dataclass(frozen=True)
class SnapshotInfo:
    """A layer of a session (``session snapshot``/``snapshots``): its id
    (what ``fork(from_=)``, ``rollback`` and ``diff --since`` take), name,
    kind (``snapshot`` or ``seal``), files and bytes changed, the layer
    below (None: the baseline) and the session that made it."""

    id: int
    name: str | None
    kind: str
    files: int
    bytes: int
    parent: int | None
    session: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> SnapshotInfo:
        return SnapshotInfo(
            id=int(d["id"]),
            name=_str(d.get("name")),
            kind=str(d.get("kind", "snapshot")),
            files=int(d.get("files", 0)),
            bytes=int(d.get("bytes", 0)),
            parent=_int(d.get("parent")),
            session=_str(d.get("session")),
            raw=d,
        )
