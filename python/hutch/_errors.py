"""Exceptions: one class per error kind of the machine interface.

Every exception carries the fields of hutch's one-line errors: ``what``
(the whole line), ``where`` (a key path, a path, a syscall), ``errno`` (its
name, e.g. ``"ENOENT"``) and ``hint`` (what to do), plus the ``kind`` and
``verb`` of the document it came from (docs/machine.md).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._types import ExitReport, Result


class HutchError(Exception):
    """Base class of every error this package raises."""

    kind: str = "internal"

    def __init__(
        self,
        what: str,
        *,
        kind: str | None = None,
        where: str | None = None,
        errno: str | None = None,
        hint: str | None = None,
        verb: str = "",
        returncode: int | None = None,
    ) -> None:
        super().__init__(what)
        self.what = what
        if kind is not None:
            self.kind = kind
        self.where = where
        self.errno = errno
        self.hint = hint
        self.verb = verb
        self.returncode = returncode
        #: What the failed verb still reports (e.g. the ids ``gc`` removed).
        self.partial: Any = None
        #: hutch's own line, naming its command-line flags.
        self.cli_what = what

    def __str__(self) -> str:
        return self.what


class UnenforcedLimit(UserWarning):
    """A limit asked for, or a default one, that this host cannot enforce
    (no delegated cgroup controller): the command ran without it. A
    warning (``warnings.warn``) naming the limit and why; ``strict=True``
    on the command refuses to start instead (``SetupError``), and
    ``warnings.simplefilter("error", hutch.UnenforcedLimit)`` makes it an
    exception after the fact."""

    def __init__(self, what: str, limit: str) -> None:
        super().__init__(what)
        #: The limit's key path, e.g. ``limits.memory``.
        self.limit = limit


class UsageError(HutchError):
    """A bad argument: option, session id, path or pattern (``usage``)."""

    kind = "usage"


class SpecError(HutchError):
    """The sandbox description is invalid: a profile, a limit, a seccomp
    profile (``spec``). ``where`` is the key path."""

    kind = "spec"


class SetupError(HutchError):
    """hutch could not build the sandbox (``setup``, exit 125): a missing
    bind source, an unavailable limit, a kernel feature. ``report`` is the
    exit report when the sandbox got far enough to make one."""

    kind = "setup"
    report: ExitReport | None = None


class PolicyError(HutchError):
    """The egress policy is invalid or has no such profile (``policy``)."""

    kind = "policy"


class NotFound(HutchError):
    """No such session (``not-found``)."""

    kind = "not-found"


class SessionBusy(HutchError):
    """Another operation holds the session (``session-busy``); pass
    ``wait=True`` to wait for it instead."""

    kind = "session-busy"


class Refused(HutchError):
    """The session's deadline or command budget refuses the request
    (``refused``)."""

    kind = "refused"


class TooLarge(HutchError):
    """A size or count limit would be exceeded; nothing was produced
    (``too-large``)."""

    kind = "too-large"


class DiffTooLarge(TooLarge):
    """The diff is longer than ``max_bytes``: no partial patch is returned."""


class FingerprintMismatch(HutchError):
    """The baseline is not the expected one (``fingerprint-mismatch``)."""

    kind = "fingerprint-mismatch"


class HostIOError(HutchError):
    """A host file or syscall failed (``io``); ``where`` names it."""

    kind = "io"


class RegistryError(HutchError):
    """An image registry could not be reached, refused the credentials, or
    sent content that does not match its digest (``registry``)."""

    kind = "registry"


class InternalError(HutchError):
    """Anything else, including a binary that answered outside the machine
    interface (``internal``)."""

    kind = "internal"


class BinaryNotFound(HutchError):
    """No usable ``hutch`` binary: not in the wheel, ``HUTCH_BIN`` or PATH."""

    kind = "binary-not-found"


class VersionMismatch(HutchError):
    """The ``hutch`` binary found is not the one this package was built with."""

    kind = "version-mismatch"


class CommandFailed(HutchError):
    """Raised by ``check=True`` when the command did not exit 0; ``result``
    is the full result (output, exit report)."""

    kind = "command-failed"

    def __init__(self, what: str, result: Result) -> None:
        super().__init__(what, returncode=result.returncode)
        self.result = result


class Timeout(CommandFailed):
    """Raised by ``check=True`` when the command's wall clock ran out (every
    process of the sandbox was killed)."""

    kind = "timed-out"


class CleanupIncomplete(HutchError):
    """``Session.close()`` removed the session but found something of it
    still there (a process, mount, cgroup or runtime record; ``remaining``
    names each). The host should be quarantined until it is cleaned."""

    kind = "cleanup-incomplete"

    def __init__(self, what: str, remaining: tuple[str, ...], **kw: Any) -> None:
        super().__init__(what, **kw)
        self.remaining = remaining


_BY_KIND: dict[str, type[HutchError]] = {
    "usage": UsageError,
    "spec": SpecError,
    "setup": SetupError,
    "policy": PolicyError,
    "not-found": NotFound,
    "session-busy": SessionBusy,
    "refused": Refused,
    "too-large": TooLarge,
    "fingerprint-mismatch": FingerprintMismatch,
    "io": HostIOError,
    "internal": InternalError,
    "registry": RegistryError,
}


#: hutch's flags whose keyword is not the flag's name with ``_`` for ``-``.
_KEYWORD_OF: dict[str, str] = {
    "--setenv": "env=",
    "--chdir": "cwd=",
    "--allow-host": "allow_hosts=",
    "--allow-address": "allow_addresses=",
    "--audit": "egress_audit=",
    "--secret": "secrets=",
    "--gateway": "gateways=",
    "--use-secret": "use_secrets=",
    "--ro-bind": "binds=",
    "--bind": "binds=",
    "--dev-bind": "binds=",
    "--ro-bind-try": "binds=",
    "--bind-try": "binds=",
    "--dev-bind-try": "binds=",
    "--rlimit": "rlimits=",
    "--from": "from_dir=",
    "--require-limits": "strict=True",
    "--agent": "spawn_agent(agent)",
    "--prompt": "prompt=",
    "--approved": "approved=",
    "--label": "labels=",
    "--insecure-registry": "insecure_registries=",
    "--dir": "dirs=",
    "--overlay": "overlays=",
    "--symlink": "symlinks=",
}
#: Flags without a value: their keyword is ``=True``.
_SWITCHES = frozenset(
    {
        "--wait",
        "--share-net",
        "--bare",
        "--allow-symlinks",
        "--allow-submodules",
        "--allow-export-attributes",
        "--allow-unpinned",
        "--network-none",
        "--patch",
        "--allow-platform-mismatch",
        "--allow-volumes",
        "--allow-secret-env",
        "--allow-devices",
        "--private-ids",
        "--include-ignored",
    }
)
#: The other flags of hutch's run and session verbs whose keyword is their
#: name (only hutch's own are rewritten: a hint may quote another tool's).
_SAME_NAME = frozenset(
    {
        "--timeout", "--memory", "--pids", "--cpus", "--output-limit", "--io-max",
        "--cgroup-parent", "--resolve", "--egress-policy", "--egress-profile",
        "--egress-mode", "--intercept", "--image", "--image-store", "--profile",
        "--seccomp", "--landlock-min-abi", "--cap-add", "--tmpfs", "--workspace",
        "--changes", "--changes-size", "--pass-env", "--unsetenv", "--uid", "--gid",
        "--hostname", "--status-file", "--state-dir", "--rev", "--from-git",
        "--expect-fingerprint", "--deadline", "--max-commands", "--max-files",
        "--max-bytes", "--max-file-bytes", "--max-depth", "--max-path-bytes",
        "--max-entries", "--disk-max", "--disk-max-preferred", "--audit-dir",
        "--workspace-path", "--lock", "--platform", "--since", "--exclude", "--keep-audit",
        "--warm", "--warm-idle", "--pull", "--registry-auth", "--cap-drop", "--proc", "--dev",
        "--mqueue", "--chmod", "--remount-ro", "--max-image-size", "--max-expansion",
    }
)  # fmt: skip
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _keyword(m: re.Match[str]) -> str:
    flag = m.group(0)
    if flag not in _KEYWORD_OF and flag not in _SWITCHES and flag not in _SAME_NAME:
        return flag
    if flag in _KEYWORD_OF:
        return _KEYWORD_OF[flag]
    name = flag[2:].replace("-", "_")
    return f"{name}=True" if flag in _SWITCHES else f"{name}="


def python_words(text: str) -> str:
    """hutch's line with its flags named as this package's keywords
    (``--allow-symlinks`` → ``allow_symlinks=True``, ``--memory`` →
    ``memory=``)."""
    return _FLAG.sub(_keyword, text)


def from_document(error: Any, verb: str, returncode: int | None) -> HutchError:
    """The exception for the ``error`` object of an envelope; flags in its
    text are named as keywords (``cli_what`` keeps hutch's own line)."""
    if not isinstance(error, dict):
        return InternalError(f"hutch {verb}: malformed error document", verb=verb)
    kind = str(error.get("kind", "internal"))
    cls = _BY_KIND.get(kind, InternalError)
    if cls is TooLarge and verb == "session.diff":
        cls = DiffTooLarge
    what = str(error.get("what", ""))
    hint = _opt_str(error.get("hint"))
    err = cls(
        python_words(what),
        kind=kind,
        where=_opt_str(error.get("where")),
        errno=_opt_str(error.get("errno")),
        hint=None if hint is None else python_words(hint),
        verb=verb,
        returncode=returncode,
    )
    err.cli_what = what
    return err


def _opt_str(v: Any) -> str | None:
    return None if v is None else str(v)
