"""The package's transport: one ``hutch serve`` per Python process
(docs/python.md, "The server"). Many calls against one warm session leak
nothing; a server killed mid-call is one clear exception and the next call
works; the client's environment and cwd reach each call; ``HUTCH_SERVE=0``
execs the binary instead."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import family, family_settles, sleeps

import hutch
from hutch import _serve

WAIT = 60.0


def wait_until(what: str, ready: object) -> None:
    assert callable(ready)
    deadline = time.monotonic() + WAIT
    while not ready():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


@pytest.fixture
def session(tmp_path: Path, state_dir: Path) -> Iterator[hutch.Session]:
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "a.txt").write_text("alpha\nTODO one\n")
    (src / "pkg" / "m.py").write_text("def main():\n    pass  # TODO two\n")
    with hutch.Session.create(from_dir=src, state_dir=state_dir) as s:
        yield s


def test_thousand_mixed_calls_on_one_server_leak_nothing(session: hutch.Session) -> None:
    session.run(["true"])  # the server and the session are warm
    server = _serve.server()
    me = os.getpid()
    fds = len(os.listdir("/proc/self/fd"))
    threads = threading.active_count()
    kids = family(me)
    server_fds = len(os.listdir(f"/proc/{server.proc.pid}/fd"))
    server_threads = threads_of(server.proc.pid)
    for i in range(1000):
        k = i % 10
        if k == 0:
            r = session.run(["sh", "-c", f"echo {i}"])
            assert r.stdout == f"{i}\n".encode(), r
        elif k in (1, 2, 3):
            session.write(f"out/{k}.txt", f"v{i}\n".encode())
        elif k in (4, 5):
            assert session.read("a.txt") == b"alpha\nTODO one\n"
        elif k in (6, 7):
            g = session.grep("TODO")
            assert {m.path for m in g.matches} >= {"a.txt", "pkg/m.py"}, g
        else:
            found = session.glob("**/*.py")
            assert [m.path for m in found.matches] == ["pkg/m.py"], found
    assert session.read("out/3.txt") == b"v993\n"
    assert _serve.server() is server, "one server for every call"
    assert len(os.listdir("/proc/self/fd")) == fds
    assert threading.active_count() == threads
    assert family_settles(me, kids) == kids, "a process was left"
    assert len(os.listdir(f"/proc/{server.proc.pid}/fd")) == server_fds
    assert threads_of(server.proc.pid) == server_threads == 1


def test_the_servers_processes_are_named_as_documented(session: hutch.Session) -> None:
    """docs/machine.md: the waiting spare is `hutch-spare`, a request's
    process (the resident one of the session loop too) has the server's
    name. A release build once left the resident process nameless (nix
    0.30's `prctl::get_name` read back an optimized-away buffer)."""
    session.run(["true"])
    assert session.read("a.txt") == b"alpha\nTODO one\n"
    server = _serve.server().proc.pid

    def comm(pid: int) -> str:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().rstrip("\n")

    server_name = comm(server)
    children: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid == server:
                children[int(entry)] = comm(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    names = sorted(children.values())
    # The session's warm server (a process of its own), the resident
    # request process and the spare.
    assert "hutch-spare" in names, children
    assert all(n in (server_name, "hutch-spare") for n in names), children
    assert names.count(server_name) >= 1, children


def test_server_killed_mid_call_is_one_clear_error_and_the_next_call_works(
    session: hutch.Session,
) -> None:
    session.run(["true"])
    server = _serve.server()
    caught: list[BaseException] = []

    def call() -> None:
        try:
            session.run(["sh", "-c", "exec sleep 9471"])
        except BaseException as e:
            caught.append(e)

    t = threading.Thread(target=call)
    t.start()
    wait_until("the sandboxed sleep", lambda: len(sleeps("9471")) == 1)
    os.kill(server.proc.pid, signal.SIGKILL)
    t.join(WAIT)
    assert not t.is_alive()
    assert len(caught) == 1, caught
    e = caught[0]
    assert isinstance(e, hutch.ServerDied), repr(e)
    assert isinstance(e, hutch.HutchError)
    assert e.where == "serve"
    assert "in flight" in str(e) and e.hint and "retry" in e.hint
    # Its sandbox went with it (parent-death signals down the chain).
    wait_until("the sleep to be gone", lambda: not sleeps("9471"))
    assert session.run(["echo", "again"]).stdout == b"again\n"
    assert _serve.server() is not server


def test_calls_from_threads_run_at_once(tmp_path: Path) -> None:
    # Each command waits for a file the one before it writes: only
    # requests running at once can all finish.
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # the sandbox's uid is not the caller's
    n = 4
    results: dict[int, bytes] = {}

    def step(i: int) -> None:
        wait = f"while [ ! -e /shared/go{i} ]; do sleep 0.01; done"
        script = f"{wait}; echo {i}; : > /shared/go{i + 1}"
        r = hutch.run(
            ["sh", "-c", script],
            binds=[hutch.Bind(shared, "/shared", readonly=False)],
            timeout=WAIT,
        )
        results[i] = r.stdout + r.stderr

    threads = [threading.Thread(target=step, args=(i,)) for i in range(n, 0, -1)]
    for t in threads:
        t.start()
    (shared / "go1").write_bytes(b"")
    for t in threads:
        t.join(WAIT)
    assert results == {i: f"{i}\n".encode() for i in range(1, n + 1)}


def test_environment_and_cwd_of_each_call_reach_hutch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hutch.run(["true"])  # a server started with the old environment
    state = tmp_path / "later-state"
    state.mkdir(mode=0o700)
    src = tmp_path / "rel"
    src.mkdir()
    (src / "f.txt").write_text("relative\n")
    monkeypatch.setenv("HUTCH_STATE_DIR", str(state))
    monkeypatch.chdir(tmp_path)
    with hutch.Session.create(from_dir="rel") as s:
        assert s.read("f.txt") == b"relative\n"
        assert (state / s.id).exists() or any(state.iterdir())


def test_each_change_of_the_environment_reaches_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The client compares the environment per call (an unchanged one
    cheaply): a variable set, changed, removed and set again, and one the
    server started with removed and restored, each reach the next call as
    they are then (a name hutch does not have is refused by ``pass_env``)."""
    names = ("HUTCH_T_NEW", "HUTCH_T_OLD")

    def seen() -> bytes:
        r = hutch.run(
            ["sh", "-c", "echo ${HUTCH_T_NEW-unset} ${HUTCH_T_OLD-unset}"],
            pass_env=[n for n in names if n in os.environ],
        )
        assert r.returncode == 0, r
        for n in names:
            if n not in os.environ:
                with pytest.raises(hutch.UsageError, match=n):
                    hutch.run(["true"], pass_env=[n])
        return r.stdout

    monkeypatch.setenv("HUTCH_T_OLD", "old")
    _serve.server().close()  # the next server starts with HUTCH_T_OLD set
    assert seen() == b"unset old\n"
    assert seen() == b"unset old\n"
    monkeypatch.setenv("HUTCH_T_NEW", "1")
    assert seen() == b"1 old\n"
    monkeypatch.setenv("HUTCH_T_NEW", "2")
    assert seen() == b"2 old\n"
    assert seen() == b"2 old\n"
    monkeypatch.delenv("HUTCH_T_NEW")
    monkeypatch.delenv("HUTCH_T_OLD")
    assert seen() == b"unset unset\n"
    monkeypatch.setenv("HUTCH_T_NEW", "3")
    monkeypatch.setenv("HUTCH_T_OLD", "back")
    assert seen() == b"3 back\n"
    monkeypatch.setenv("HUTCH_T_OLD", "old")
    monkeypatch.delenv("HUTCH_T_NEW")
    assert seen() == b"unset old\n"


def test_hutch_serve_0_execs_the_binary(
    session: hutch.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    session.run(["true"])
    server = _serve.server()
    before = server.next_id
    monkeypatch.setenv("HUTCH_SERVE", "0")
    assert session.run(["echo", "sub"]).stdout == b"sub\n"
    assert session.read("a.txt") == b"alpha\nTODO one\n"
    assert server.next_id == before, "no request reached the server"
    monkeypatch.delenv("HUTCH_SERVE")
    assert session.read("a.txt") == b"alpha\nTODO one\n"
    assert server.next_id == before + 1


def test_aio_shares_the_server_and_cancelling_ends_the_sandbox(session: hutch.Session) -> None:
    import asyncio

    import hutch.aio

    session.run(["true"])
    server = _serve.server()
    before = server.next_id

    async def main() -> None:
        # wait=True: concurrent reads of one session may meet its lock.
        s = hutch.aio.Session(session.id, state_dir=session.state_dir, wait=True)
        reads = await asyncio.gather(*(s.read("a.txt") for _ in range(8)))
        assert reads == [b"alpha\nTODO one\n"] * 8
        r = await hutch.aio.run(["echo", "aio"])
        assert r.stdout == b"aio\n"
        task = asyncio.ensure_future(hutch.aio.run(["sh", "-c", "exec sleep 9472"]))
        deadline = time.monotonic() + WAIT
        while not sleeps("9472"):
            assert time.monotonic() < deadline, "the sleep never ran"
            await asyncio.sleep(0.02)
        task.cancel()
        try:
            await task
            raise AssertionError("not cancelled")
        except asyncio.CancelledError:
            pass
        # The cancelled request ended its sandbox before the task ended.
        assert not sleeps("9472")

    asyncio.run(main())
    assert server.next_id == before + 10, "every call went through the one server"
