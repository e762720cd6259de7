"""Finding the ``hutch`` binary: the wheel's own first, then ``HUTCH_BIN``,
then ``PATH``; its version is checked once (``hutch version --json``) and
the answer cached for the life of the process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from ._errors import BinaryNotFound, VersionMismatch
from ._version import MACHINE_VERSION, __version__

_resolved: str | None = None
_explicit: str | None = None


def _bundled() -> list[Path]:
    """Where pip put the wheel's binary: the scripts directory of the
    install scheme whose library directory holds this package."""
    here = Path(__file__).resolve().parent.parent
    found: list[Path] = []
    schemes = [sysconfig.get_default_scheme()] if hasattr(sysconfig, "get_default_scheme") else []
    schemes += [s for s in sysconfig.get_scheme_names() if s not in schemes]
    for scheme in schemes:
        try:
            paths = sysconfig.get_paths(scheme)
        except (KeyError, ValueError):
            continue
        libs = {paths.get("purelib"), paths.get("platlib")}
        if any(lib and Path(lib).resolve() == here for lib in libs if lib):
            found.append(Path(paths["scripts"]) / "hutch")
    # `pip install --target DIR`: DIR/bin next to DIR's packages.
    found.append(here / "bin" / "hutch")
    # A virtual environment's scripts directory, found from the interpreter.
    found.append(Path(sys.prefix) / "bin" / "hutch")
    return found


def _usable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def _candidates() -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = [("the wheel", str(p)) for p in _bundled() if _usable(p)]
    env = os.environ.get("HUTCH_BIN")
    if env:
        out.append(("HUTCH_BIN", env))
    on_path = shutil.which("hutch")
    if on_path:
        out.append(("PATH", on_path))
    return out


def check_version(path: str) -> None:
    """Raise VersionMismatch unless ``path`` is hutch of this package's
    version, speaking this machine interface."""
    try:
        out = subprocess.run(
            [path, "version", "--json"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=30,
            check=False,
        )
    except OSError as e:
        raise BinaryNotFound(f"cannot run {path}: {e}") from e
    try:
        doc = json.loads(out.stdout)
        version = str(doc["result"]["version"])
        machine = int(doc["result"]["machine"])
    except (ValueError, KeyError, TypeError):
        raise VersionMismatch(
            f"{path} does not answer `hutch version --json` (exit {out.returncode}); "
            f"this package needs hutch {__version__}",
            where=path,
        ) from None
    if version != __version__ or machine != MACHINE_VERSION:
        raise VersionMismatch(
            f"{path} is hutch {version} (machine interface {machine}); this package "
            f"is {__version__} (interface {MACHINE_VERSION}): install the matching wheel "
            "or point HUTCH_BIN at the matching binary",
            where=path,
        )


def binary() -> str:
    """The path of the ``hutch`` binary this package runs (found and checked
    on first use, then cached)."""
    global _resolved
    if _resolved is not None:
        return _resolved
    if _explicit is not None:
        check_version(_explicit)
        _resolved = _explicit
        return _resolved
    candidates = _candidates()
    if not candidates:
        raise BinaryNotFound(
            "no hutch binary: not installed with this package, HUTCH_BIN is unset and "
            "none is on PATH; install the hutch wheel (pip install hutch) or set HUTCH_BIN"
        )
    seen: set[str] = set()
    errors: list[str] = []
    for _origin, path in candidates:
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        try:
            check_version(path)
        except (VersionMismatch, BinaryNotFound) as e:
            errors.append(str(e))
            continue
        _resolved = path
        return path
    raise VersionMismatch("; ".join(errors))


def set_binary(path: str | None) -> None:
    """Use ``path`` as the hutch binary (checked on next use); ``None``
    goes back to the search (wheel, ``HUTCH_BIN``, ``PATH``)."""
    global _resolved, _explicit
    _explicit = None if path is None else os.fspath(path)
    _resolved = None
