"""The keyword arguments of a sandboxed command, turned into ``hutch run``
options (docs/cli.md). One table, shared by ``run``, ``Command``,
``aio.spawn``/``aio.run`` and ``Session.run``."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, Union

from ._secrets import Gateway, Intercept, Secret

PathLike = Union[str, "os.PathLike[str]"]
#: A size: bytes as an int, or hutch's notation (``"512M"``, ``"2G"``).
Size = Union[int, str]
#: A duration: seconds as a number, hutch's notation (``"10m"``), or
#: ``None`` for no limit.
Seconds = Union[int, float, str, None]

#: Captured output of ``run`` and ``Session.run`` is capped here unless
#: ``output_limit`` says otherwise (stdout and stderr together).
DEFAULT_OUTPUT_LIMIT = "16M"


@dataclass(frozen=True)
class Bind:
    """A host path shown in the sandbox at ``dest`` (read-only unless
    ``readonly=False``; ``optional`` skips a missing source; ``dev`` keeps
    device nodes usable)."""

    src: PathLike
    dest: str
    readonly: bool = True
    optional: bool = False
    dev: bool = False


class Options(TypedDict, total=False):
    """Keyword arguments of every sandboxed command (``hutch run`` flags).

    Limits: ``timeout`` (seconds or ``"10m"``, ``None`` for none; default
    5 minutes), ``memory``, ``pids``, ``cpus``, ``output_limit`` (stdout +
    stderr; the excess is discarded and reported), ``rlimits``
    (``{"nofile": 1024, "as": "4G"}``), ``io_max`` (``["/dev/vda:wbps=10M"]``),
    ``cgroup_parent``.
    Egress: ``allow_hosts``, ``allow_addresses``, ``resolve``,
    ``egress_policy`` (a policy file) and ``egress_profile``, ``egress_audit``
    (also copy every decision to this file), ``egress_mode`` (``"proxy"``,
    the default, or ``"transparent"``: names resolve in the sandbox and
    connections to allowed hosts work for programs that ignore the proxy
    variables, see docs/egress.md), ``share_net`` (the host's network
    instead).
    Secrets (docs/secrets.md): ``secrets`` (``hutch.Secret``: the sandbox
    holds a placeholder, the proxy adds the value), ``gateways``
    (``hutch.Gateway``: a plain-HTTP base URL inside to an HTTPS upstream),
    ``intercept`` (``hutch.Intercept`` or a host name), and for a session's
    command ``use_secrets`` (names of secrets the session declared).
    System: ``image`` (``"sha256:..."`` or ``"name@sha256:..."`` from the
    image store: the image is the read-only system layer, see
    docs/images.md), ``image_store``, ``approved`` (an approved list: a
    file, or the entries ``sha256:...`` / ``REPOSITORY@sha256:...``; any
    other image is refused before launch).
    Confinement: ``profile`` (a TOML/JSON Spec), ``bare``, ``seccomp``
    (``default``, ``strict``, ``log``, ``unconfined`` or a JSON file),
    ``landlock_min_abi``, ``cap_add``.
    Filesystem: ``binds`` (``Bind`` or ``(src, dest)`` read-only),
    ``tmpfs`` (``"/scratch"`` or ``("/scratch", "1G")``), ``workspace`` (a
    host path, or ``(host_path, dest)`` to show it at ``dest``) and
    ``changes`` / ``changes_size`` (``run`` only; sessions bring their own).
    Process: ``env`` (set), ``pass_env`` (names copied from the caller's
    environment; nothing else of it enters), ``unsetenv``, ``cwd``, ``uid``, ``gid``,
    ``hostname``. ``status_file``: also write the launcher's start event
    and exit report there (JSON lines). ``extra_args``: more ``hutch run``
    flags, verbatim.
    ``strict``: every limit (``memory``, ``pids``, ``cpus``, ``io_max``,
    the defaults included) is required: where the host cannot enforce one
    the command is refused before it starts (``SetupError`` naming it).
    Without it, such a limit is a ``hutch.UnenforcedLimit`` warning.
    More of the filesystem, after ``binds`` and ``tmpfs`` (in this order):
    ``dirs``, ``overlays`` (``(lower, dest)``: a discarded upper),
    ``proc``, ``dev``, ``mqueue`` (mount points), ``symlinks``
    (``(target, dest)``), ``chmod`` (``(mode, dest)``, mode an int or octal
    str), ``remount_ro``; ``extra_args`` for another order.
    Images: ``platform`` (``"linux/amd64"``), ``approved`` (a file, or the
    entries: only these images may run), ``allow_unpinned``,
    ``allow_platform_mismatch``, ``allow_volumes``, ``allow_secret_env``,
    ``allow_devices`` (accept what that check refuses), ``pull``
    (``"missing"``: fetch an absent pinned image from its registry, with
    ``registry_auth`` and ``insecure_registries``; ``registry_credential``,
    ``"[user=USER,]from-env=VAR"`` or ``from-file=PATH``: the registry's
    password or token read by hutch from that source, never from argv).
    Also ``private_ids`` (65536 ids of the sandbox's own), ``labels``
    (``hutch ps``/``hutch.kill(label=)``), ``cap_drop``.
    Terminal (docs/pty.md): ``pty=True`` runs the command on a terminal of
    the sandbox's own (one output stream: stderr comes on stdout, with
    the terminal's ``\r\n``), ``pty_size=(cols, rows)`` (default 80x24);
    a spawned process then takes ``write()``, ``close_stdin()`` (^D) and
    ``resize(cols, rows)``.
    """

    timeout: Seconds
    memory: Size
    pids: int | str
    cpus: float
    output_limit: Size | None
    rlimits: Mapping[str, Size]
    io_max: Sequence[str]
    cgroup_parent: PathLike
    allow_hosts: Sequence[str]
    allow_addresses: Sequence[str]
    resolve: Mapping[str, str]
    egress_policy: PathLike
    egress_profile: str
    egress_audit: PathLike
    egress_mode: str
    share_net: bool
    secrets: Sequence[Secret]
    gateways: Sequence[Gateway]
    intercept: Sequence[Intercept | str]
    use_secrets: Sequence[str]
    image: str
    image_store: PathLike
    profile: PathLike
    bare: bool
    seccomp: str | PathLike
    landlock_min_abi: int
    cap_add: Sequence[str]
    binds: Sequence[Bind | tuple[PathLike, str]]
    tmpfs: Sequence[str | tuple[str, Size]]
    workspace: PathLike | tuple[PathLike, str]
    changes: PathLike
    changes_size: Size
    env: Mapping[str, str]
    pass_env: Sequence[str]
    unsetenv: Sequence[str]
    cwd: str
    uid: int
    gid: int
    hostname: str
    status_file: PathLike
    extra_args: Sequence[str]
    strict: bool
    dirs: Sequence[str]
    overlays: Sequence[tuple[PathLike, str]]
    proc: Sequence[str]
    dev: Sequence[str]
    mqueue: Sequence[str]
    symlinks: Sequence[tuple[str, str]]
    chmod: Sequence[tuple[int | str, str]]
    remount_ro: Sequence[str]
    platform: str
    approved: PathLike | Sequence[str]
    allow_unpinned: bool
    allow_platform_mismatch: bool
    allow_volumes: bool
    allow_secret_env: bool
    allow_devices: bool
    pull: Literal["missing", "never"]
    registry_auth: PathLike
    registry_credential: str
    insecure_registries: Sequence[str]
    private_ids: bool
    labels: Mapping[str, str]
    cap_drop: Sequence[str]
    pty: bool
    pty_size: tuple[int, int]


class TempFiles:
    """Private files a command line names for the length of one call
    (an approved list given as entries), removed by ``cleanup``."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def write(self, prefix: str, lines: Sequence[str]) -> str:
        fd, path = tempfile.mkstemp(prefix=prefix, suffix=".list")
        self.paths.append(path)
        with os.fdopen(fd, "w") as f:
            f.writelines(line + "\n" for line in lines)
        return path

    def cleanup(self) -> None:
        for path in self.paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        self.paths.clear()


def approved_args(approved: Any, temp: TempFiles | None) -> list[str]:
    """``--approved FILE`` for a path; for entries (``sha256:<64 hex>``,
    ``REPOSITORY@sha256:<64 hex>``) a private file of them in ``temp``."""
    if isinstance(approved, (str, os.PathLike)):
        return ["--approved", os.fspath(approved)]
    entries = [str(e) for e in approved]
    for entry in entries:
        if "\n" in entry or "#" in entry or not entry.strip():
            raise ValueError(f"approved entry {entry!r}: one digest reference, no newline")
    if temp is None:
        raise TypeError("approved: give a file here (entries only where hutch reads them at once)")
    return ["--approved", temp.write("hutch-approved-", entries)]


#: Boolean image options and their flags.
IMAGE_ALLOWS = {
    "allow_unpinned": "--allow-unpinned",
    "allow_platform_mismatch": "--allow-platform-mismatch",
    "allow_volumes": "--allow-volumes",
    "allow_secret_env": "--allow-secret-env",
    "allow_devices": "--allow-devices",
}


#: Options a session command refuses (the session provides /workspace).
NOT_IN_SESSION = frozenset({"workspace", "changes", "changes_size", "bare"})

_KNOWN = frozenset(Options.__annotations__)


def duration(v: Seconds) -> str:
    if v is None:
        return "none"
    if isinstance(v, str):
        return v
    if isinstance(v, bool) or v < 0:
        raise ValueError(f"a duration must be a positive number of seconds, not {v!r}")
    ms = round(float(v) * 1000)
    return f"{ms}ms"


def size(v: Size) -> str:
    if isinstance(v, bool):
        raise ValueError(f"a size must be a number of bytes or a string like '2G', not {v!r}")
    return str(v)


def _flag_value(v: Any) -> str:
    return os.fspath(v) if isinstance(v, os.PathLike) else str(v)


def workspace_flag(v: Any) -> str:
    """``--workspace``'s value: a host path (shown at the same path), or
    ``(host_path, dest)``."""
    if isinstance(v, tuple) and len(v) == 2:
        host, dest = v
        if not isinstance(host, (str, os.PathLike)) or not isinstance(dest, str):
            raise TypeError(
                f"workspace=(host_path, dest): a path and a str, not {type(host).__name__} "
                f"and {type(dest).__name__}"
            )
        host = os.path.abspath(os.fspath(host))
        if not dest.startswith("/") or ":" in dest or ":" in host:
            raise ValueError(
                f"workspace=({host!r}, {dest!r}): dest must be an absolute path inside, "
                "and neither may hold ':'"
            )
        return f"{host}:{dest}"
    if not isinstance(v, (str, os.PathLike)):
        raise TypeError(
            f"workspace: a host path or a (host_path, dest) tuple, not {type(v).__name__}"
        )
    return os.fspath(v)


def to_args(
    options: Mapping[str, Any], *, session: bool = False, temp: TempFiles | None = None
) -> list[str]:
    """The ``hutch run`` flags for ``options`` (unknown keys are a TypeError,
    bad values a ValueError: caught before anything runs)."""
    unknown = [k for k in options if k not in _KNOWN]
    if unknown:
        raise TypeError(f"unknown option(s) for a sandboxed command: {', '.join(sorted(unknown))}")
    if session:
        bad = [k for k in options if k in NOT_IN_SESSION]
        if bad:
            raise TypeError(
                f"{', '.join(sorted(bad))}: not for session commands (the session "
                "provides /workspace)"
            )
    a: list[str] = []
    o = options
    if "profile" in o:
        a += ["--profile", _flag_value(o["profile"])]
    if o.get("bare"):
        a.append("--bare")
    if "image" in o:
        a += ["--image", str(o["image"])]
    if "image_store" in o:
        a += ["--image-store", _flag_value(o["image_store"])]
    if "workspace" in o:
        a += ["--workspace", workspace_flag(o["workspace"])]
    if "changes" in o:
        a += ["--changes", _flag_value(o["changes"])]
    if "changes_size" in o:
        a += ["--changes-size", size(o["changes_size"])]
    for b in o.get("binds", ()):
        if isinstance(b, Bind):
            flag = "--dev-bind" if b.dev else ("--ro-bind" if b.readonly else "--bind")
            if b.optional:
                flag += "-try"
            a += [flag, _flag_value(b.src), b.dest]
        else:
            src, dest = b
            a += ["--ro-bind", _flag_value(src), str(dest)]
    for t in o.get("tmpfs", ()):
        if isinstance(t, str):
            a += ["--tmpfs", t]
        else:
            a += ["--size", size(t[1]), "--tmpfs", t[0]]
    if "timeout" in o:
        a += ["--timeout", duration(o["timeout"])]
    if "memory" in o:
        a += ["--memory", size(o["memory"])]
    if "pids" in o:
        a += ["--pids", str(o["pids"])]
    if "cpus" in o:
        a += ["--cpus", str(o["cpus"])]
    if o.get("output_limit") is not None:
        a += ["--output-limit", size(o["output_limit"])]
    for name, value in o.get("rlimits", {}).items():
        a += ["--rlimit", f"{name}={size(value)}"]
    for spec in o.get("io_max", ()):
        a += ["--io-max", spec]
    if "cgroup_parent" in o:
        a += ["--cgroup-parent", _flag_value(o["cgroup_parent"])]
    if o.get("share_net"):
        a.append("--share-net")
    for h in o.get("allow_hosts", ()):
        a += ["--allow-host", h]
    for addr in o.get("allow_addresses", ()):
        a += ["--allow-address", addr]
    for name, addr in o.get("resolve", {}).items():
        a += ["--resolve", f"{name}={addr}"]
    if "egress_policy" in o:
        a += ["--egress-policy", _flag_value(o["egress_policy"])]
    if "egress_profile" in o:
        a += ["--egress-profile", o["egress_profile"]]
    if "egress_mode" in o:
        a += ["--egress-mode", o["egress_mode"]]
    for g in o.get("gateways", ()):
        if not isinstance(g, Gateway):
            raise TypeError(f"gateways: {type(g).__name__} is not a hutch.Gateway")
        a += ["--gateway", g.flag()]
    for x in o.get("intercept", ()):
        a += ["--intercept", Intercept(x).flag() if isinstance(x, str) else x.flag()]
    for sec in o.get("secrets", ()):
        if not isinstance(sec, Secret):
            raise TypeError(f"secrets: {type(sec).__name__} is not a hutch.Secret")
        a += ["--secret", sec.flag()]
    uses = o.get("use_secrets", ())
    if uses and not session:
        raise TypeError("use_secrets: names secrets a session declared; for session commands")
    for name in uses:
        a += ["--use-secret", name]
    if "seccomp" in o:
        a += ["--seccomp", _flag_value(o["seccomp"])]
    if "landlock_min_abi" in o:
        a += ["--landlock-min-abi", str(o["landlock_min_abi"])]
    for cap in o.get("cap_add", ()):
        a += ["--cap-add", cap]
    for k, v in o.get("env", {}).items():
        a += ["--setenv", k, v]
    for k in o.get("pass_env", ()):
        a += ["--pass-env", k]
    for k in o.get("unsetenv", ()):
        a += ["--unsetenv", k]
    if "cwd" in o:
        a += ["--chdir", o["cwd"]]
    if "uid" in o:
        a += ["--uid", str(int(o["uid"]))]
    if "gid" in o:
        a += ["--gid", str(int(o["gid"]))]
    if "hostname" in o:
        a += ["--hostname", o["hostname"]]
    if "status_file" in o:
        a += ["--status-file", _flag_value(o["status_file"])]
    if o.get("strict"):
        a.append("--require-limits")
    a += pty_args(o)
    a += _more_args(o, temp)
    a += list(o.get("extra_args", ()))
    return a


def pty_size(v: Any) -> tuple[int, int]:
    """``pty_size``: ``(cols, rows)``, each from 1 to 65535."""
    if (
        not isinstance(v, (tuple, list))
        or len(v) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in v)
    ):
        raise TypeError(f"pty_size: a (cols, rows) tuple of ints, not {v!r}")
    cols, rows = v
    if not (0 < cols < 65536 and 0 < rows < 65536):
        raise ValueError(f"pty_size: cols and rows from 1 to 65535, not {v!r}")
    return cols, rows


def pty_args(o: Mapping[str, Any]) -> list[str]:
    """``--pty`` / ``--pty-size COLSxROWS`` (docs/pty.md)."""
    if "pty_size" in o and not o.get("pty"):
        raise TypeError("pty_size: needs pty=True (the size of the command's terminal)")
    if not o.get("pty"):
        return []
    a = ["--pty"]
    if "pty_size" in o:
        cols, rows = pty_size(o["pty_size"])
        a += ["--pty-size", f"{cols}x{rows}"]
    return a


def _pairs(o: Mapping[str, Any], key: str) -> list[tuple[Any, Any]]:
    out = []
    for item in o.get(key, ()):
        if not isinstance(item, tuple) or len(item) != 2:
            raise TypeError(f"{key}: a sequence of 2-tuples, not {item!r}")
        out.append(item)
    return out


def _more_args(o: Mapping[str, Any], temp: TempFiles | None) -> list[str]:
    """The flags of the options added for parity with ``hutch run``."""
    a: list[str] = []
    for key in ("dirs", "proc", "dev", "mqueue", "remount_ro", "cap_drop", "insecure_registries"):
        if isinstance(o.get(key), str):
            raise TypeError(f"{key}: a sequence of str, not one str")
    for d in o.get("dirs", ()):
        a += ["--dir", d]
    for lower, dest in _pairs(o, "overlays"):
        a += ["--overlay", _flag_value(lower), dest]
    for flag, key in (("--proc", "proc"), ("--dev", "dev"), ("--mqueue", "mqueue")):
        for dest in o.get(key, ()):
            a += [flag, dest]
    for target, dest in _pairs(o, "symlinks"):
        a += ["--symlink", target, dest]
    for mode, dest in _pairs(o, "chmod"):
        a += ["--chmod", f"{mode:o}" if isinstance(mode, int) else str(mode), dest]
    for dest in o.get("remount_ro", ()):
        a += ["--remount-ro", dest]
    if "platform" in o:
        a += ["--platform", o["platform"]]
    if "approved" in o:
        a += approved_args(o["approved"], temp)
    for key, flag in IMAGE_ALLOWS.items():
        if o.get(key):
            a.append(flag)
    if "pull" in o:
        if o["pull"] not in ("missing", "never"):
            raise ValueError(f"pull: 'missing' or 'never', not {o['pull']!r}")
        a += ["--pull", o["pull"]]
    if "registry_auth" in o:
        a += ["--registry-auth", _flag_value(o["registry_auth"])]
    if "registry_credential" in o:
        a += ["--registry-credential", _flag_value(o["registry_credential"])]
    for h in o.get("insecure_registries", ()):
        a += ["--insecure-registry", h]
    if o.get("private_ids"):
        a.append("--private-ids")
    for k, v in o.get("labels", {}).items():
        if "=" in k:
            raise ValueError(f"labels: key {k!r} may not hold '='")
        a += ["--label", f"{k}={v}"]
    for cap in o.get("cap_drop", ()):
        a += ["--cap-drop", cap]
    return a


def uses_proxy(options: Mapping[str, Any]) -> bool:
    """Whether the command's network goes through the egress proxy."""
    return bool(
        options.get("allow_hosts")
        or options.get("allow_addresses")
        or options.get("resolve")
        or options.get("egress_policy")
        or options.get("egress_mode")
        or options.get("gateways")
        or options.get("intercept")
    )
