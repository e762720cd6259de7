"""The host side of ``pty=True`` for a spawned command (docs/pty.md).

hutch's own stdin is a pty opened here (raw: the sandbox's terminal does
the echo and line editing), never seen by the sandbox: ``hutch run --pty``
relays it to a terminal of the sandbox's own devpts. Input is written to
its master; ``resize`` sets its size and sends hutch SIGWINCH, which
copies the size to the sandbox's terminal (as a user's terminal would).
The end of input is ^D (closing the master would hang the terminal up,
and drop what hutch has not read yet).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import struct
import termios
import tty
from typing import Any

from ._errors import UsageError
from ._options import pty_size

#: A terminal nobody gave a size.
DEFAULT_SIZE = (80, 24)
#: The terminal's end of input (VEOF).
EOF = b"\x04"


def set_size(fd: int, cols: int, rows: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class HostPty:
    """The pty given to hutch as stdin: ``master`` stays here (written
    to, non-blocking), ``stdin`` goes to hutch and is closed once it
    holds it (``given()``)."""

    def __init__(self, options: Any) -> None:
        cols, rows = pty_size(options["pty_size"]) if "pty_size" in options else DEFAULT_SIZE
        self.master, self.stdin = os.openpty()
        try:
            tty.setraw(self.stdin)
            set_size(self.stdin, cols, rows)
            # Resizing goes through this end: the master is closed at the end.
            self.sizer = os.dup(self.stdin)
            os.set_blocking(self.master, False)
        except BaseException:
            self.close()
            raise
        self.hutch_pid: int | None = None

    def given(self, hutch_pid: int) -> None:
        os.close(self.stdin)
        self.stdin = -1
        self.hutch_pid = hutch_pid

    def resize(self, cols: int, rows: int) -> None:
        cols, rows = pty_size((cols, rows))
        if self.hutch_pid is None or self.sizer < 0:
            raise UsageError("resize(): the command has ended", where="pty")
        set_size(self.sizer, cols, rows)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.hutch_pid, signal.SIGWINCH)

    def close(self) -> None:
        for name in ("master", "stdin", "sizer"):
            fd = getattr(self, name, -1)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)


def not_a_pty(what: str) -> UsageError:
    return UsageError(
        f"{what}: the command was not spawned with pty=True (give its input as input=)",
        where="pty",
        hint="pty=True",
    )
