"""hutch: Linux sandboxes and persistent workspace sessions for untrusted
code (AI agents, CI builds of arbitrary repositories), driven from Python.

The wheel carries the ``hutch`` binary; this package runs it and reads its
machine interface (docs/machine.md), never its human output::

    import hutch

    res = hutch.run(["make", "test"], workspace="/srv/repo", timeout=600,
                    allow_hosts=["pypi.org"], output_limit="10M")
    res.returncode, res.stdout, res.report.reason

    with hutch.Session.create(from_git="/srv/checkouts/x", rev=sha) as s:
        s.run(["pytest", "-x"], timeout=300)
        patch = s.diff()

``hutch.aio`` has the same for asyncio (``spawn``, ``run``, ``Session``), and
``spawn_agent`` runs an agent CLI (Claude Code, Codex) on one prompt with its
profile (``hutch.run_agent`` synchronously; docs/agents.md).
"""

from . import images
from ._binary import binary, set_binary
from ._check import check
from ._errors import (
    BinaryNotFound,
    CleanupIncomplete,
    CommandFailed,
    DiffTooLarge,
    FingerprintMismatch,
    HostIOError,
    HutchError,
    InternalError,
    NotFound,
    PolicyError,
    Refused,
    RegistryError,
    SessionBusy,
    SetupError,
    SpecError,
    Timeout,
    TooLarge,
    UnenforcedLimit,
    UsageError,
    VersionMismatch,
)
from ._options import Bind, Options
from ._run import Command, run, run_agent
from ._secrets import Gateway, Intercept, Secret
from ._serve import ServerDied
from ._session import Session, kill, ps
from ._spawn import Process, Stream, spawn
from ._types import (
    Changes,
    CheckReport,
    CompactReport,
    DiffFile,
    DiffReport,
    DiffSide,
    EgressDecision,
    Enforcement,
    ExitReport,
    ExportEntry,
    ExportManifest,
    Feature,
    GcReport,
    GlobMatch,
    GrepMatch,
    Killed,
    LimitSupport,
    Result,
    Sandbox,
    SealInfo,
    SearchResult,
    SessionInfo,
    SessionResult,
    Skipped,
    SnapshotInfo,
    Source,
    StartEvent,
    Usage,
)
from ._version import MACHINE_VERSION, __version__


def __getattr__(name: str) -> object:
    # `hutch.aio` without `import hutch.aio`, and without importing
    # asyncio for programs that never use it.
    if name == "aio":
        import importlib

        return importlib.import_module(".aio", __name__)
    raise AttributeError(f"module 'hutch' has no attribute {name!r}")


__all__ = [
    "MACHINE_VERSION",
    "BinaryNotFound",
    "Bind",
    "Changes",
    "CheckReport",
    "CleanupIncomplete",
    "Command",
    "CommandFailed",
    "CompactReport",
    "DiffFile",
    "DiffReport",
    "DiffSide",
    "DiffTooLarge",
    "EgressDecision",
    "Enforcement",
    "ExitReport",
    "ExportEntry",
    "ExportManifest",
    "Feature",
    "FingerprintMismatch",
    "Gateway",
    "GcReport",
    "GlobMatch",
    "GrepMatch",
    "HostIOError",
    "HutchError",
    "Intercept",
    "InternalError",
    "Killed",
    "LimitSupport",
    "NotFound",
    "Options",
    "PolicyError",
    "Process",
    "Refused",
    "RegistryError",
    "Result",
    "Sandbox",
    "SealInfo",
    "SearchResult",
    "Secret",
    "ServerDied",
    "Session",
    "SessionBusy",
    "SessionInfo",
    "SessionResult",
    "SetupError",
    "Skipped",
    "SnapshotInfo",
    "Source",
    "SpecError",
    "StartEvent",
    "Stream",
    "Timeout",
    "TooLarge",
    "UnenforcedLimit",
    "Usage",
    "UsageError",
    "VersionMismatch",
    "__version__",
    "binary",
    "check",
    "images",
    "kill",
    "ps",
    "run",
    "run_agent",
    "set_binary",
    "spawn",
]
