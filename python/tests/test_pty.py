"""``pty=True``: a command on a terminal of its sandbox (docs/pty.md),
sync and asyncio: a /dev/pts of the sandbox's own devpts as stdio, the
size and a resize, input answered, Ctrl-C, the exit code."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

import hutch
import hutch.aio

#: Each step prints a marker the test waits for (never a sleep). The
#: foreground job prints SLEEPING once it runs with SIGINT's default action.
SCRIPT = r"""
tty
test -t 0 -a -t 1 -a -t 2 && echo STDIO-ARE-TTYS
echo "DEVPTS=$(stat -c %d /dev/pts)"
echo "SIZE1=$(stty size)"
read go
echo "SIZE2=$(stty size)"
printf 'NAME? '
read name
echo "HELLO=$name"
trap 'echo INTERRUPTED; exit 42' INT
sh -c 'echo SLEEPING; exec sleep 1000'
echo NOT-INTERRUPTED
"""


def field(text: str, key: str) -> str:
    return text.split(f"{key}=", 1)[1].split("\r\n", 1)[0]


def check_first_lines(text: str) -> None:
    assert text.startswith("/dev/pts/0\r\n"), text
    assert "STDIO-ARE-TTYS" in text, text
    assert int(field(text, "DEVPTS")) != os.stat("/dev/pts").st_dev, text
    assert field(text, "SIZE1") == "30 100", text


def test_spawn_pty_terminal_resize_input_ctrl_c(work: Path) -> None:
    with hutch.spawn(["sh", "-c", SCRIPT], workspace=work, pty=True, pty_size=(100, 30)) as p:
        text = b""
        while b"SIZE1=" not in text:
            text += p.stdout.readline()
        check_first_lines(text.decode())
        p.resize(132, 40)
        p.write(b"go\r")
        text = b""
        while b"NAME? " not in text:
            text += p.stdout.read(1)
        assert b"SIZE2=40 132\r\n" in text, text
        p.write(b"hutch\r")
        text = b""
        while b"SLEEPING" not in text:
            text += p.stdout.readline()
        assert b"HELLO=hutch\r\n" in text, text
        p.write(b"\x03")
        rest = p.stdout.read()
        assert b"INTERRUPTED" in rest and b"NOT-INTERRUPTED" not in rest, rest
        report = p.wait()
    assert report.exit_code == 42


def test_aio_spawn_pty_terminal_resize_input_ctrl_c(work: Path) -> None:
    async def main() -> int | None:
        async with hutch.aio.spawn(
            ["sh", "-c", SCRIPT], workspace=work, pty=True, pty_size=(100, 30)
        ) as p:
            text = b""
            while b"SIZE1=" not in text:
                text += await p.stdout.readline()
            check_first_lines(text.decode())
            p.resize(132, 40)
            await p.write(b"go\r")
            text = b""
            while b"NAME? " not in text:
                text += await p.stdout.read(1)
            assert b"SIZE2=40 132\r\n" in text, text
            await p.write(b"hutch\r")
            text = b""
            while b"SLEEPING" not in text:
                text += await p.stdout.readline()
            assert b"HELLO=hutch\r\n" in text, text
            await p.write(b"\x03")
            rest = await p.stdout.read()
            assert b"INTERRUPTED" in rest and b"NOT-INTERRUPTED" not in rest, rest
            return (await p.wait()).exit_code

    assert asyncio.run(main()) == 42


def test_close_stdin_is_eof_and_run_takes_pty(work: Path) -> None:
    with hutch.spawn(["sh", "-c", "cat; echo CAT-ENDED"], workspace=work, pty=True) as p:
        p.write(b"one\r")
        p.close_stdin()
        out = p.stdout.read()
    assert out == b"one\r\none\r\nCAT-ENDED\r\n", out
    res = hutch.run(
        ["sh", "-c", "stty size; read a; echo a=$a >&2"],
        workspace=work,
        pty=True,
        pty_size=(90, 20),
        input=b"x\n",
    )
    # One stream: the command's stderr is the terminal too (the echo of
    # the input may come before or after the size: it was written at once).
    assert sorted(res.stdout.splitlines(keepends=True)) == [b"20 90\r\n", b"a=x\r\n", b"x\r\n"]
    assert res.stderr == b""


def test_session_spawn_pty(work: Path, state_dir: Path) -> None:
    async def aio_session() -> bytes:
        async with (
            hutch.aio.Session.create(from_dir=work, state_dir=state_dir) as s,
            s.spawn(["sh", "-c", "tty; read a; echo a=$a"], pty=True) as p,
        ):
            out = await p.stdout.readline()
            await p.write(b"yes\r")
            out += await p.stdout.read()
            assert (await p.wait()).exit_code == 0
            return out

    with (
        hutch.Session.create(from_dir=work, state_dir=state_dir) as s,
        s.spawn(["sh", "-c", "test -t 0 && tty"], pty=True) as p,
    ):
        assert p.stdout.read() == b"/dev/pts/0\r\n"
    assert asyncio.run(aio_session()) == b"/dev/pts/0\r\nyes\r\na=yes\r\n"


def test_pty_misuse_is_refused_at_the_call(work: Path) -> None:
    with pytest.raises(TypeError, match="pty_size"):
        hutch.spawn(["true"], workspace=work, pty_size=(80, 24))
    with pytest.raises(ValueError, match="pty_size"):
        hutch.spawn(["true"], workspace=work, pty=True, pty_size=(0, 24))
    with pytest.raises(TypeError, match="pty_size"):
        hutch.spawn(["true"], workspace=work, pty=True, pty_size="80x24")  # type: ignore[arg-type]
    with hutch.spawn(["true"], workspace=work) as p:
        with pytest.raises(hutch.UsageError, match="pty=True"):
            p.write(b"x")
        with pytest.raises(hutch.UsageError, match="pty=True"):
            p.resize(80, 24)
