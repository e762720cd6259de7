"""``hutch.aio.spawn`` through the package's ``hutch serve`` (docs/python.md,
"The server"): no exec of the binary per spawn, output streamed in order,
stdin, signals, a terminal, cancellation, 200 spawns that leak nothing, an
unread stream that stalls no other call, and a server killed mid-spawn
that is one ``ServerDied`` for that process while the next spawn works."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest
from support import family, family_settles, sleeps

import hutch
import hutch.aio
from hutch import _serve

WAIT = 60.0
# A sleep no other process on the machine runs (leftovers are found by it).
LONG = f"{2000 + random.random():.6f}"


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def children_of(pid: int) -> set[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return {int(c) for c in f.read().split()}


async def until(what: str, ready: object) -> None:
    assert callable(ready)
    deadline = time.monotonic() + WAIT
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def line_with(stream: hutch.aio.Stream, marker: bytes) -> bytes:
    text = b""
    while marker not in text:
        line = await asyncio.wait_for(stream.readline(), WAIT)
        assert line, f"EOF before {marker!r}: {text!r}"
        text += line
    return text


def test_spawn_runs_on_the_server_and_streams_in_order(work: Path) -> None:
    hutch.run(["true"])  # the server is up
    server = _serve.server()

    async def main() -> None:
        before = server.next_id
        # More than the pipes on its way hold (300 KB a stream): it cannot
        # end before this reads, so its parent is read while it runs.
        script = "i=0; while [ $i -lt 30000 ]; do echo out $i; echo err $i >&2; i=$((i+1)); done"
        async with hutch.aio.spawn(["sh", "-c", script], workspace=work, stderr="stream") as p:
            # hutch is the server's child: no exec of the binary for it.
            assert parent_of(p.pid) == server.proc.pid
            assert server.next_id == before + 1
            assert children_of(os.getpid()) == {server.proc.pid}, "a hutch of our own"
            out, err = await asyncio.gather(p.stdout.read(), p.stderr.read())
            report = await p.wait()
        assert out == b"".join(f"out {i}\n".encode() for i in range(30000))
        assert err == b"".join(f"err {i}\n".encode() for i in range(30000))
        assert report.success and p.returncode == 0
        assert report.output_bytes == len(out) + len(err)

    asyncio.run(main())


def test_stdin_signals_and_terminate_through_the_server(work: Path) -> None:
    trap = "trap 'echo got-$1; exit {code}' {sig}; echo ready; sleep {long} & wait"

    async def main() -> None:
        big = os.urandom(3 << 20)
        r = await hutch.aio.spawn(["sha256sum"], workspace=work, input=big, stdout="capture")
        import hashlib

        assert (await r.result()).stdout.split()[0].decode() == hashlib.sha256(big).hexdigest()
        script = trap.format(code=3, sig="USR1", long=LONG).replace("$1", "usr1")
        async with hutch.aio.spawn(["sh", "-c", script], workspace=work) as p:
            assert parent_of(p.pid) == _serve.server().proc.pid
            await line_with(p.stdout, b"ready")
            p.send_signal(signal.SIGUSR1)
            assert await asyncio.wait_for(p.stdout.read(), WAIT) == b"got-usr1\n"
            report = await p.wait()
        assert report.exit_code == 3
        script = trap.format(code=5, sig="TERM", long=LONG).replace("$1", "term")
        async with hutch.aio.spawn(["sh", "-c", script], workspace=work) as p:
            await line_with(p.stdout, b"ready")
            p.terminate()
            assert await asyncio.wait_for(p.stdout.read(), WAIT) == b"got-term\n"
        assert (await p.wait()).exit_code == 5
        async with hutch.aio.spawn(["sh", "-c", f"exec sleep {LONG}"], workspace=work) as p:
            await p.started()
            p.kill()
        report = await p.wait()
        assert report.reason == "signaled" and report.signal == 9, report
        assert not sleeps(LONG)

    asyncio.run(main())


def test_pty_through_the_server(work: Path) -> None:
    async def main() -> None:
        async with hutch.aio.spawn(
            ["sh", "-c", "stty size; read x; stty size; echo got-$x"],
            workspace=work,
            pty=True,
            pty_size=(120, 40),
        ) as p:
            assert parent_of(p.pid) == _serve.server().proc.pid
            assert b"40 120\r\n" in await line_with(p.stdout, b"40 120")
            p.resize(100, 30)
            await p.write(b"hi\r")
            rest = await asyncio.wait_for(p.stdout.read(), WAIT)
            assert b"30 100\r\n" in rest and b"got-hi\r\n" in rest, rest
        assert (await p.wait()).success
        with pytest.raises(hutch.UsageError, match="ended"):
            p.resize(80, 24)

    asyncio.run(main())


def test_setup_failure_at_enter_and_cancel_ends_the_request(tmp_path: Path, work: Path) -> None:
    server = _serve.server()

    async def main() -> None:
        before = server.next_id
        with pytest.raises(hutch.SetupError):
            async with hutch.aio.spawn(
                ["echo", "never"], workspace=work, binds=[(tmp_path / "absent", "/data")]
            ):
                raise AssertionError("entered a command that never started")
        assert server.next_id == before + 1, "the failed spawn was a server request"
        p = await hutch.aio.spawn(["sh", "-c", f"echo up; exec sleep {LONG}"], workspace=work)
        await line_with(p.stdout, b"up")
        task = asyncio.ensure_future(p.wait())
        await until("the sleep", lambda: bool(sleeps(LONG)))
        await asyncio.sleep(0)  # the task runs up to its wait
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The cancelled wait ended the request before the task ended.
        assert not sleeps(LONG)
        assert p.returncode is not None
        assert not server.pending

    asyncio.run(main())


def test_an_unread_stream_stalls_no_other_call(work: Path) -> None:
    server = _serve.server()

    async def main() -> None:
        # 12 MB nobody reads (within the 16 MiB output_limit): buffered in
        # Python, while the server's other requests go on.
        p = await hutch.aio.spawn(
            ["sh", "-c", "head -c 12000000 /dev/zero; echo done >&2"], workspace=work
        )
        assert parent_of(p.pid) == server.proc.pid
        await until("the 12 MB to be written", lambda: p.returncode is not None)
        for i in range(5):
            r = await asyncio.wait_for(hutch.aio.run(["echo", str(i)], workspace=work), WAIT)
            assert r.stdout == f"{i}\n".encode()
        report = await asyncio.wait_for(p.wait(), WAIT)
        assert report.success and report.output_bytes == 12_000_005
        # Above the bound a spawn execs its own hutch (pipes pause it).
        # Each alive until killed: its parent is read while it runs.
        big = await hutch.aio.spawn(["sleep", LONG], workspace=work, output_limit="1G")
        assert parent_of(big.pid) == os.getpid()
        await big.started()
        big.kill()
        assert (await big.wait()).signal == 9
        gateway = hutch.Gateway("api", "https://api.example", env=["API_URL"])
        secret = hutch.Secret("api", ["api.example"], env="API_KEY", value="v")
        s = await hutch.aio.spawn(
            ["sleep", LONG],
            workspace=work,
            allow_hosts=["api.example"],
            gateways=[gateway],
            secrets=[secret],
        )
        assert parent_of(s.pid) == os.getpid(), "secrets' memfds cannot cross the pipe"
        await s.started()
        s.kill()
        assert (await s.wait()).signal == 9

    asyncio.run(main())


def test_200_spawns_leak_no_fd_task_thread_or_process(work: Path) -> None:
    hutch.run(["true"])
    server = _serve.server()
    me = os.getpid()

    async def one(i: int) -> None:
        k = i % 4
        if k == 0:
            async with hutch.aio.spawn(["echo", str(i)], workspace=work) as p:
                assert await p.stdout.read() == f"{i}\n".encode()
        elif k == 1:
            p = await hutch.aio.spawn(["cat"], workspace=work, input=b"x%d" % i, stdout="capture")
            assert (await p.result()).stdout == b"x%d" % i
        elif k == 2:
            p = await hutch.aio.spawn(["sh", "-c", "exit 7"], workspace=work, stdout="devnull")
            assert (await p.wait()).exit_code == 7
        else:
            p = await hutch.aio.spawn(["sh", "-c", f"exec sleep {LONG}"], workspace=work)
            await p.started()
            p.kill()
            assert (await p.wait()).signal == 9

    async def main() -> tuple[int, int]:
        before = server.next_id
        tasks = len(asyncio.all_tasks())
        for batch in range(0, 200, 8):
            await asyncio.gather(*(one(i) for i in range(batch, batch + 8)))
        assert len(asyncio.all_tasks()) == tasks
        return server.next_id - before, len(os.listdir("/proc/self/fd"))

    async def warm() -> int:
        await one(0)
        return len(os.listdir("/proc/self/fd"))

    fds = asyncio.run(warm())
    threads = threading.active_count()
    kids = family(me)
    requests, fds_after = asyncio.run(main())
    assert requests == 200, "every spawn was one server request"
    assert _serve.server() is server
    assert fds_after == fds
    assert threading.active_count() == threads
    assert family_settles(me, kids) == kids, "a process was left"
    assert not server.pending
    assert not sleeps(LONG)


def test_server_killed_mid_spawn_is_server_died_and_the_next_spawn_works(work: Path) -> None:
    async def main() -> None:
        server = _serve.server()
        p = await hutch.aio.spawn(["sh", "-c", f"echo up; exec sleep {LONG}"], workspace=work)
        assert parent_of(p.pid) == server.proc.pid
        await line_with(p.stdout, b"up")
        await until("the sleep", lambda: bool(sleeps(LONG)))
        os.kill(server.proc.pid, signal.SIGKILL)
        with pytest.raises(hutch.ServerDied) as e:
            await asyncio.wait_for(p.wait(), WAIT)
        assert e.value.where == "serve" and "in flight" in str(e.value)
        assert await p.stdout.read() == b""
        assert p.returncode is not None
        await until("the sleep to be gone", lambda: not sleeps(LONG))
        # Alive until killed: its parent is read while it runs.
        script = f"echo again; exec sleep {LONG}"
        async with hutch.aio.spawn(["sh", "-c", script], workspace=work) as q:
            assert parent_of(q.pid) == _serve.server().proc.pid
            await line_with(q.stdout, b"again")
            q.kill()
            assert (await q.wait()).signal == 9
        assert _serve.server() is not server

    asyncio.run(main())
