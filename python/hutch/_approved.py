"""``--approved FILE`` for an approved list given as entries: written once
to a private file named by the entries' digest, so the flag can be built
before the command runs and the file outlives no call's need (one small
file per distinct list, reused)."""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Sequence
from typing import Union

PathLike = Union[str, "os.PathLike[str]"]
#: An approved list: a file of entries, or the entries themselves
#: (``sha256:<64 hex>`` or ``REPOSITORY@sha256:<64 hex>``).
Approved = Union[PathLike, Sequence[str]]


def approved_path(approved: Approved) -> str:
    """The path to give ``--approved``: ``approved`` itself when it is a
    path, else a file holding its entries (one a line)."""
    if isinstance(approved, (str, os.PathLike)):
        return os.fspath(approved)
    entries = list(approved)
    for entry in entries:
        if not isinstance(entry, str) or "\n" in entry or "#" in entry:
            raise ValueError(f"approved entry {entry!r}: one digest reference, no newline")
    text = "".join(e + "\n" for e in entries)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    home = os.path.join(tempfile.gettempdir(), f"hutch-approved-{os.getuid()}")
    os.makedirs(home, mode=0o700, exist_ok=True)
    st = os.lstat(home)
    if st.st_uid != os.getuid() or st.st_mode & 0o077 or not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{home}: not a private directory of this user")
    path = os.path.join(home, f"{digest}.list")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=home, prefix=".partial-")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    return path
