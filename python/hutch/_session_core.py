"""Session verbs as data: each builds the ``hutch session --json VERB``
command line and knows how to read its result (docs/machine.md). The sync
``Session`` and ``aio.Session`` only execute them, so a new verb is one
builder here and one line in each front end."""

from __future__ import annotations

import base64
import os
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from . import _binary
from ._core import state_args
from ._errors import CleanupIncomplete
from ._options import (
    IMAGE_ALLOWS,
    PathLike,
    Seconds,
    Size,
    TempFiles,
    approved_args,
    duration,
    size,
    to_args,
)
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
    SnapshotInfo,
)

T = TypeVar("T")

#: Default bounds of the file and diff verbs (bounded by default).
DEFAULT_READ_MAX = 1 << 20
DEFAULT_WRITE_MAX = 16 << 20
DEFAULT_DIFF_MAX = 16 << 20


@dataclass(frozen=True)
class Verb(Generic[T]):
    """One ``hutch session`` invocation and the reader of its result."""

    verb: str
    argv: list[str]
    input: bytes | None
    parse: Callable[[Any], T]


LOCKS = frozenset({"egress", "binds", "env", "limits", "confinement", "all"})


@dataclass(frozen=True)
class CreateExtras:
    """What ``Session.create`` takes for production jobs (docs/sessions.md):
    the image, where the workspace appears, the disk quota, the audit's
    home, and the defaults of every command with what they lock."""

    image: str | None = None
    image_store: PathLike | None = None
    pull: str | None = None
    insecure_registries: Sequence[str] = ()
    registry_auth: PathLike | None = None
    registry_credential: str | None = None
    workspace_path: str | None = None
    disk_max: Size | None = None
    disk_max_preferred: Size | None = None
    audit_dir: PathLike | None = None
    defaults: Mapping[str, Any] | None = None
    locks: Sequence[str] = ()
    warm: int | None = None
    warm_idle: Seconds = None
    compact_depth: int | None = None
    platform: str | None = None
    #: A file, or the entries (written to a private file for the call).
    approved: PathLike | Sequence[str] | None = None
    #: ``allow_unpinned``... (``IMAGE_ALLOWS``) that are set.
    allows: Sequence[str] = ()

    def to_args(self, temp: TempFiles | None = None) -> list[str]:
        a: list[str] = []
        if self.image is not None:
            a += ["--image", self.image]
        if self.image_store is not None:
            a += ["--image-store", os.fspath(self.image_store)]
        if self.platform is not None:
            a += ["--platform", self.platform]
        if self.approved is not None:
            a += approved_args(self.approved, temp)
        a += [IMAGE_ALLOWS[k] for k in self.allows]
        if self.warm is not None:
            a += ["--warm", str(int(self.warm))]
        if self.warm_idle is not None:
            if self.warm is None:
                raise TypeError("warm_idle= goes with warm=N")
            a += ["--warm-idle", duration(self.warm_idle)]
        if self.pull is not None:
            if self.pull not in ("missing", "never"):
                raise ValueError(f"pull={self.pull!r}: 'missing' or 'never'")
            a += ["--pull", self.pull]
        if isinstance(self.insecure_registries, str):
            raise TypeError("insecure_registries= is a list of HOST[:PORT]")
        for h in self.insecure_registries:
            a += ["--insecure-registry", h]
        if self.registry_auth is not None:
            a += ["--registry-auth", os.fspath(self.registry_auth)]
        if self.registry_credential is not None:
            a += ["--registry-credential", self.registry_credential]
        if self.compact_depth is not None:
            a += ["--compact-depth", str(self.compact_depth)]
        if self.workspace_path is not None:
            a += ["--workspace-path", self.workspace_path]
        if self.disk_max is not None and self.disk_max_preferred is not None:
            raise TypeError("give disk_max= (a hard cap) or disk_max_preferred=, not both")
        if self.disk_max is not None:
            a += ["--disk-max", size(self.disk_max)]
        if self.disk_max_preferred is not None:
            a += ["--disk-max-preferred", size(self.disk_max_preferred)]
        if self.audit_dir is not None:
            a += ["--audit-dir", os.fspath(self.audit_dir)]
        if isinstance(self.locks, str):
            raise TypeError("locks= is a list of names, e.g. ['egress']")
        for lock in self.locks:
            if lock not in LOCKS:
                raise ValueError(f"locks: {lock!r} is not one of {', '.join(sorted(LOCKS))}")
            a += ["--lock", lock]
        if self.defaults:
            for sec in self.defaults.get("secrets", ()):
                per_command = (getattr(sec, a, None) is not None for a in ("value", "from_fd"))
                if any(per_command):
                    raise TypeError(
                        f"secret {sec.name!r}: a session declares secrets read at each command's "
                        "start: from_env or from_file (a value or an fd is per command: "
                        "Session.run(secrets=[...]))"
                    )
            a += to_args(self.defaults, session=True, temp=temp)
        return a


def session_argv(
    verb: str, state_dir: PathLike | None, wait: bool, args: Sequence[str]
) -> list[str]:
    return [_binary.binary(), "session", *state_args(state_dir, wait), "--json", verb, *args]


def content(d: Any) -> bytes:
    """The bytes of an ``{"encoding", "content"}`` result."""
    text = str(d.get("content", ""))
    if d.get("encoding") == "base64":
        return base64.b64decode(text)
    return text.encode("utf-8")


def create(
    state_dir: PathLike | None,
    *,
    from_dir: PathLike | None,
    from_git: PathLike | None,
    rev: str | None,
    allow_submodules: bool,
    allow_symlinks: bool,
    allow_export_attributes: bool,
    expect_fingerprint: str | None,
    deadline: Seconds,
    max_commands: int | None,
    max_files: int | None,
    max_bytes: Size | None,
    max_file_bytes: Size | None,
    max_depth: int | None,
    max_path_bytes: int | None,
    production: CreateExtras,
) -> Verb[SessionInfo]:
    a: list[str] = []
    if (from_dir is None) == (from_git is None):
        raise TypeError("Session.create needs exactly one of from_dir= or from_git= (with rev=)")
    if from_dir is not None:
        if rev is not None:
            raise TypeError("rev= goes with from_git=, not from_dir=")
        a += ["--from", os.fspath(from_dir)]
    else:
        assert from_git is not None
        if rev is None:
            raise TypeError("from_git= needs rev= (a full commit id)")
        a += ["--from-git", os.fspath(from_git), "--rev", rev]
    if allow_submodules:
        a.append("--allow-submodules")
    if allow_symlinks:
        a.append("--allow-symlinks")
    if allow_export_attributes:
        a.append("--allow-export-attributes")
    if expect_fingerprint is not None:
        a += ["--expect-fingerprint", expect_fingerprint]
    if deadline is not None:
        a += ["--deadline", duration(deadline)]
    if max_commands is not None:
        a += ["--max-commands", str(int(max_commands))]
    if max_files is not None:
        a += ["--max-files", str(int(max_files))]
    if max_bytes is not None:
        a += ["--max-bytes", size(max_bytes)]
    if max_file_bytes is not None:
        a += ["--max-file-bytes", size(max_file_bytes)]
    if max_depth is not None:
        a += ["--max-depth", str(int(max_depth))]
    if max_path_bytes is not None:
        a += ["--max-path-bytes", str(int(max_path_bytes))]
    temp = TempFiles()
    try:
        a += production.to_args(temp)
    except BaseException:
        temp.cleanup()
        raise
    v = Verb(
        "session.create", session_argv("create", state_dir, False, a), None, SessionInfo.from_dict
    )
    # hutch reads an approved list at create: its file goes with the verb.
    weakref.finalize(v, temp.cleanup)
    return v


def read(s: Target, path: str, max_bytes: Size) -> Verb[bytes]:
    return s.verb("read", [os.fspath(path), "--max-bytes", size(max_bytes)], None, content)


def write(s: Target, path: str, data: bytes | str, max_bytes: Size) -> Verb[int]:
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return s.verb(
        "write", [os.fspath(path), "--max-bytes", size(max_bytes)], raw, lambda r: int(r["bytes"])
    )


def diff_args(since: int | str | None, exclude: Sequence[str], include_ignored: bool) -> list[str]:
    """What a diff starts from and leaves out (``diff`` and ``export(patch=True)``)."""
    if isinstance(exclude, str):
        raise TypeError("exclude= is a list of globs, e.g. ['.deps/']")
    a: list[str] = []
    if since is not None:
        if isinstance(since, bool) or not (since == "baseline" or isinstance(since, int)):
            raise ValueError(f"since: 'baseline' or a seal's index, not {since!r}")
        a += ["--since", str(since)]
    for g in exclude:
        a += ["--exclude", g]
    if include_ignored:
        a.append("--include-ignored")
    return a


def diff(
    s: Target,
    fmt: str,
    max_bytes: Size,
    since: int | str | None = None,
    exclude: Sequence[str] = (),
    include_ignored: bool = False,
) -> Verb[Any]:
    if fmt not in ("unified", "json", "stat"):
        raise ValueError(f"diff format {fmt!r}: use 'unified', 'json' or 'stat'")
    scope = diff_args(since, exclude, include_ignored)

    def parse(r: Any) -> Any:
        if fmt == "json":
            return DiffReport.from_dict(r["diff"])
        data = content(r)
        return data if fmt == "unified" else data.decode("utf-8", "replace")

    return s.verb("diff", ["--format", fmt, "--max-bytes", size(max_bytes), *scope], None, parse)


def export(
    s: Target,
    paths: Sequence[str],
    out: PathLike,
    patch: bool,
    max_bytes: Size | None,
    max_file_bytes: Size | None,
    max_entries: int | None,
    since: int | str | None = None,
    exclude: Sequence[str] = (),
    include_ignored: bool = False,
) -> Verb[ExportManifest]:
    if isinstance(paths, str):
        raise TypeError("paths must be a list of workspace paths, not one string")
    a = ["--out", os.fspath(out)]
    scope = diff_args(since, exclude, include_ignored)
    if scope and not patch:
        raise TypeError("since=, exclude= and include_ignored= shape the patch: give patch=True")
    if patch:
        a.append("--patch")
        a += scope
    if max_bytes is not None:
        a += ["--max-bytes", size(max_bytes)]
    if max_file_bytes is not None:
        a += ["--max-file-bytes", size(max_file_bytes)]
    if max_entries is not None:
        a += ["--max-entries", str(int(max_entries))]
    a.append("--")
    a += [os.fspath(p) for p in paths]
    return s.verb("export", a, None, ExportManifest.from_dict)


def close(s: Target, keep_audit: PathLike | None = None) -> Verb[bool]:
    def parse(r: Any) -> bool:
        remaining = tuple(str(x) for x in r.get("remaining") or ())
        if remaining:
            raise CleanupIncomplete(
                f"hutch session close {s.id}: still there after it: {'; '.join(remaining)}",
                remaining,
                where=s.id,
                verb="session.close",
            )
        return bool(r["closed"])

    keep = [] if keep_audit is None else ["--keep-audit", os.fspath(keep_audit)]
    return s.verb("close", keep, None, parse)


def rm(s: Target, paths: Sequence[str]) -> Verb[list[str]]:
    """The removed paths."""
    if isinstance(paths, str):
        raise TypeError("rm: workspace paths as separate arguments, not one string")
    if not paths:
        raise TypeError("rm needs at least one workspace path")
    return s.verb(
        "rm", [os.fspath(p) for p in paths], None, lambda r: [str(p) for p in r["removed"]]
    )


def audit(s: Target, audit_dir: PathLike | None) -> Verb[list[dict[str, Any]]]:
    """The audit's events (one dict per line of ``audit.jsonl``)."""
    a = [] if audit_dir is None else ["--audit-dir", os.fspath(audit_dir)]
    return s.verb("audit", a, None, lambda r: [dict(e) for e in r["events"]])


def warm(s: Target, count: int, idle: Seconds) -> Verb[None]:
    a = [str(int(count))]
    if idle is not None:
        a += ["--warm-idle", duration(idle)]
    return s.verb("warm", a, None, lambda r: None)


def warm_ready(s: Target, timeout: Seconds) -> Verb[dict[str, Any]]:
    """The warm server's status once settled (``size``, ``ready``,
    ``warming``, ``claimed``)."""
    a = ["--ready"]
    if timeout is not None:
        a += ["--timeout", duration(timeout)]
    return s.verb("warm", a, None, lambda r: dict(r))


def seal(s: Target, network_none: bool) -> Verb[SealInfo]:
    return s.verb("seal", ["--network", "none"] if network_none else [], None, SealInfo.from_dict)


def show(s: Target) -> Verb[SessionInfo]:
    return s.verb("show", [], None, SessionInfo.from_dict)


def ps() -> Verb[list[Sandbox]]:
    return Verb(
        "ps",
        [_binary.binary(), "ps", "--json"],
        None,
        lambda r: [Sandbox.from_dict(d) for d in r["sandboxes"]],
    )


def kill(
    sandboxes: Sequence[str], session: str | None, label: str | None, all: bool
) -> Verb[list[Killed]]:
    if isinstance(sandboxes, str):
        raise TypeError("sandboxes must be a list of sandbox ids, not one string")
    a = [str(x) for x in sandboxes]
    if session is not None:
        a += ["--session", session]
    if label is not None:
        a += ["--label", label]
    if all:
        a.append("--all")
    if not a:
        raise TypeError("kill needs sandbox ids, session=, label= or all=True")
    return Verb(
        "kill",
        [_binary.binary(), "kill", *a, "--json"],
        None,
        lambda r: [Killed.from_dict(d) for d in r["killed"]],
    )


def search_args(
    pattern: str,
    path: str | None,
    max_matches: int,
    max_bytes: Size,
    timeout: Seconds,
    exclude: Sequence[str] = (),
) -> list[str]:
    a = ["--max-matches", str(int(max_matches)), "--max-bytes", size(max_bytes)]
    if isinstance(exclude, str):
        raise TypeError("exclude= is a list of patterns, e.g. ['.deps']")
    for x in exclude:
        a += ["--exclude", x]
    if path is not None:
        a += ["--path", os.fspath(path)]
    if timeout is not None:
        a += ["--timeout", duration(timeout)]
    return a


def glob(
    s: Target,
    pattern: str,
    path: str | None,
    max_matches: int,
    max_bytes: Size,
    timeout: Seconds,
    exclude: Sequence[str] = (),
) -> Verb[SearchResult[GlobMatch]]:
    a = [*search_args(pattern, path, max_matches, max_bytes, timeout, exclude), "--", pattern]

    def parse(r: Any) -> SearchResult[GlobMatch]:
        return SearchResult(
            matches=tuple(
                GlobMatch(str(m["path"]), str(m["path_quoted"]), str(m.get("kind", "file")))
                for m in r["matches"]
            ),
            **_search_fields(r),
        )

    return s.verb("glob", a, None, parse)


def grep(
    s: Target,
    regex: str,
    path: str | None,
    glob: str | None,
    ignore_case: bool,
    fixed_strings: bool,
    files_with_matches: bool,
    max_matches: int,
    max_bytes: Size,
    max_line_bytes: Size,
    engine: str,
    timeout: Seconds,
    exclude: Sequence[str] = (),
) -> Verb[SearchResult[GrepMatch]]:
    a = search_args(regex, path, max_matches, max_bytes, timeout, exclude)
    a += ["--max-line-bytes", size(max_line_bytes), "--engine", engine]
    if glob is not None:
        a += ["--glob", glob]
    if ignore_case:
        a.append("--ignore-case")
    if fixed_strings:
        a.append("--fixed-strings")
    if files_with_matches:
        a.append("--files-with-matches")
    a += ["--", regex]

    def parse(r: Any) -> SearchResult[GrepMatch]:
        return SearchResult(
            matches=tuple(
                GrepMatch(
                    path=str(m["path"]),
                    path_quoted=str(m["path_quoted"]),
                    line=None if m.get("line") is None else int(m["line"]),
                    text=None if m.get("text") is None else str(m["text"]),
                    text_truncated=bool(m.get("text_truncated", False)),
                )
                for m in r["matches"]
            ),
            **_search_fields(r),
        )

    return s.verb("grep", a, None, parse)


def _search_fields(r: Any) -> dict[str, Any]:
    return {
        "engine": str(r.get("engine", "")),
        "truncated": bool(r.get("truncated", False)),
        "truncated_by": r.get("truncated_by"),
        "pattern": str(r.get("pattern", "")),
        "path": str(r.get("path", ".")),
        "duration_ms": int(r.get("duration_ms", 0)),
    }


def list_sessions(state_dir: PathLike | None) -> Verb[list[SessionInfo]]:
    return Verb(
        "session.list",
        session_argv("list", state_dir, False, []),
        None,
        lambda r: [SessionInfo.from_dict(d) for d in r["sessions"]],
    )


def gc(state_dir: PathLike | None, older_than: Seconds) -> Verb[GcReport]:
    if older_than is None:
        raise TypeError("gc needs older_than (seconds or a duration like '1d')")

    def parse(r: Any) -> GcReport:
        return GcReport(
            removed=tuple(str(i) for i in r.get("removed", ())),
            failed=tuple((str(f["name"]), str(f["error"])) for f in r.get("failed", ())),
        )

    return Verb(
        "session.gc",
        session_argv("gc", state_dir, False, ["--older-than", duration(older_than)]),
        None,
        parse,
    )


class Target:
    """What a session verb needs of its session: id, state dir, waiting."""

    id: str
    state_dir: PathLike | None
    wait: bool

    def verb(
        self, name: str, args: list[str], data: bytes | None, parse: Callable[[Any], T]
    ) -> Verb[T]:
        return Verb(
            f"session.{name}",
            session_argv(name, self.state_dir, self.wait, [self.id, *args]),
            data,
            parse,
        )


def snapshot(s: Target, name: str | None) -> Verb[SnapshotInfo]:
    return s.verb(
        "snapshot", [] if name is None else ["--name", name], None, SnapshotInfo.from_dict
    )


def compact(s: Target, depth: int) -> Verb[CompactReport]:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth={depth!r}: frozen layers to keep, at least 1")
    return s.verb("compact", ["--depth", str(depth)], None, CompactReport.from_dict)


def snapshots(s: Target) -> Verb[list[SnapshotInfo]]:
    return s.verb(
        "snapshots", [], None, lambda r: [SnapshotInfo.from_dict(d) for d in r["snapshots"]]
    )


def fork(
    s: Target,
    count: int,
    from_: int | str | None,
    deadline: Seconds,
    max_commands: int | None,
    warm: int | None,
    warm_idle: Seconds = None,
) -> Verb[list[str]]:
    """The new sessions' ids."""
    a = ["--count", str(int(count))]
    if from_ is not None:
        a += ["--from", str(from_)]
    if deadline is not None:
        a += ["--deadline", duration(deadline)]
    if max_commands is not None:
        a += ["--max-commands", str(int(max_commands))]
    if warm is not None:
        a += ["--warm", str(int(warm))]
    if warm_idle is not None:
        if warm is None:
            raise TypeError("warm_idle= goes with warm=N")
        a += ["--warm-idle", duration(warm_idle)]
    return s.verb("fork", a, None, lambda r: [str(c) for c in r["children"]])


def rollback(s: Target, snap: int | str | SnapshotInfo) -> Verb[SnapshotInfo]:
    target = snap.id if isinstance(snap, SnapshotInfo) else snap
    return s.verb("rollback", [str(target)], None, SnapshotInfo.from_dict)


def allows(**flags: bool) -> list[str]:
    """The names of the image checks overridden (``allow_unpinned=True``...)."""
    return [k for k, on in flags.items() if on]
