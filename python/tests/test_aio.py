"""``hutch.aio``: spawn with streamed output, run, cancellation."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import pytest
from support import alive, family

import hutch
import hutch.aio

# 50 MB of 100-byte lines (99 'a' and a newline).
FIFTY_MB = f"yes {'a' * 99} | head -c 50000000"
# A sleep no other process on the machine runs (leftovers are found by it).
LONG = f"{1000 + random.random():.6f}"


def test_spawn_streams_lines_and_reports(work: Path) -> None:
    async def main() -> None:
        async with hutch.aio.spawn(
            ["sh", "-c", "for i in 1 2 3; do echo line $i; done; echo err >&2; exit 4"],
            workspace=work,
        ) as proc:
            assert proc.pid > 0
            start = await proc.started()
            assert start is not None and proc.sandbox_pid == start.pid
            lines = [line async for line in proc.stdout]
            report = await proc.wait()
        assert lines == [b"line 1\n", b"line 2\n", b"line 3\n"]
        assert report.exit_code == 4 and report.reason == "exited"
        assert proc.returncode == 4
        res = await proc.result()
        assert res.stderr == b"err\n" and res.stdout == b""  # streamed, not captured
        assert res.start == start and start.sandbox_id == report.sandbox_id
        with pytest.raises(TypeError, match="status_file"):
            await hutch.aio.spawn(["true"], workspace=work, status_file="/tmp/x")

    asyncio.run(main())


def test_await_spawn_read_and_readline(work: Path) -> None:
    async def main() -> None:
        proc = await hutch.aio.spawn(
            ["sh", "-c", "printf 'ab\\ncd'"], workspace=work, stderr="stream"
        )
        assert await proc.stdout.readline() == b"ab\n"
        assert await proc.stdout.read() == b"cd"
        assert await proc.stdout.read(10) == b""
        assert await proc.stderr.read() == b""
        assert (await proc.wait()).success

    asyncio.run(main())


def test_spawn_streams_50_mb_within_the_output_limit(work: Path) -> None:
    async def main() -> tuple[int, int, hutch.ExitReport]:
        got = lines = 0
        # stderr carries a few MB at the same time: captured aside, it
        # never stalls stdout.
        cmd = f"head -c 4000000 /dev/zero >&2 & {FIFTY_MB}; wait"
        async with hutch.aio.spawn(
            ["sh", "-c", cmd], workspace=work, output_limit="30M", timeout=120
        ) as proc:
            async for line in proc.stdout:
                got += len(line)
                lines += 1
            report = await proc.wait()
        return got, lines, report

    t0 = time.monotonic()
    got, lines, report = asyncio.run(main())
    assert time.monotonic() - t0 < 90
    assert report.output_truncated and report.output_kept == 30 << 20
    # What the workload wrote: all of it, the discarded part too.
    assert report.output_bytes == 54_000_000
    assert 26 << 20 <= got <= 30 << 20  # stdout's share of the 30 MiB
    assert lines >= got // 100


def test_spawn_without_limit_streams_all_50_mb(work: Path) -> None:
    async def main() -> int:
        got = 0
        async with hutch.aio.spawn(
            ["sh", "-c", FIFTY_MB], workspace=work, output_limit=None, timeout=120
        ) as proc:
            while chunk := await proc.stdout.read(1 << 16):
                got += len(chunk)
            assert (await proc.wait()).success
        return got

    assert asyncio.run(main()) == 50_000_000


def test_wait_drains_output_nobody_reads(work: Path) -> None:
    async def main() -> hutch.ExitReport:
        proc = await hutch.aio.spawn(
            ["sh", "-c", "head -c 10000000 /dev/zero; head -c 5000000 /dev/zero >&2"],
            workspace=work,
            stderr="stream",
        )
        return await asyncio.wait_for(proc.wait(), 60)

    report = asyncio.run(main())
    assert report.success and report.output_bytes == report.output_kept == 15_000_000


def test_aio_run_captures(work: Path) -> None:
    res = asyncio.run(
        hutch.aio.run(["sh", "-c", "cat; echo e >&2"], workspace=work, input=b"x" * 200_000)
    )
    assert res.ok and res.stdout == b"x" * 200_000 and res.stderr == b"e\n"
    with pytest.raises(hutch.CommandFailed):
        asyncio.run(hutch.aio.run(["false"], workspace=work, check=True))


async def _family_of(start: hutch.StartEvent, at_least: int) -> set[int]:
    """The sandbox's processes (its init and descendants) once there are
    ``at_least`` of them (readiness, with a deadline)."""
    deadline = time.monotonic() + 20
    while len(procs := family(start.pid)) < at_least:
        assert time.monotonic() < deadline, f"only {procs} started"
        await asyncio.sleep(0.01)
    return procs


def _assert_gone(procs: set[int], hutch_pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for p in procs | {hutch_pid} if alive(p)]
        if not left:
            return
        time.sleep(0.02)
    raise AssertionError(f"processes left: {left}")


def test_cancelling_the_awaiting_task_leaves_no_process(work: Path) -> None:
    async def main() -> tuple[set[int], int]:
        started: asyncio.Queue[tuple[hutch.StartEvent, int]] = asyncio.Queue()

        async def job() -> hutch.ExitReport:
            proc = await hutch.aio.spawn(
                ["sh", "-c", "sleep 1000 & sleep 1000 & wait"], workspace=work
            )
            start = await proc.started()
            assert start is not None
            await started.put((start, proc.pid))
            return await proc.wait()

        task = asyncio.ensure_future(job())
        start, pid = await asyncio.wait_for(started.get(), 30)
        procs = await _family_of(start, 4)  # init, sh and both sleeps
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Awaiting the cancelled task returned only once hutch was gone.
        assert not alive(pid)
        return procs, pid

    procs, pid = asyncio.run(main())
    _assert_gone(procs, pid)


def test_cancelling_aio_run_and_an_async_with_block(work: Path) -> None:
    async def main() -> list[tuple[set[int], int]]:
        seen: list[tuple[set[int], int]] = []

        async def block() -> None:
            async with hutch.aio.spawn(["sleep", LONG], workspace=work) as proc:
                start = await proc.started()
                assert start is not None
                seen.append((await _family_of(start, 2), proc.pid))
                await asyncio.sleep(1000)

        task = asyncio.ensure_future(block())
        while not seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # aio.run, cancelled by a timeout around it.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(hutch.aio.run(["sleep", LONG], workspace=work), 1.0)
        return seen

    for procs, pid in asyncio.run(main()):
        _assert_gone(procs, pid)
    leftovers = [
        p
        for p in Path("/proc").iterdir()
        if p.name.isdigit() and _cmdline(p) == f"sleep\0{LONG}\0".encode() and alive(int(p.name))
    ]
    assert leftovers == []


def _cmdline(p: Path) -> bytes:
    try:
        return (p / "cmdline").read_bytes()
    except OSError:
        return b""


def test_kill_ends_the_sandbox_with_a_report(work: Path) -> None:
    async def main() -> tuple[hutch.ExitReport, set[int], int]:
        proc = await hutch.aio.spawn(["sh", "-c", "sleep 1000 & sleep 1000"], workspace=work)
        start = await proc.started()
        assert start is not None
        procs = await _family_of(start, 4)
        proc.kill()
        return await asyncio.wait_for(proc.wait(), 30), procs, proc.pid

    report, procs, pid = asyncio.run(main())
    assert report.reason == "signaled" and report.signal == 9 and report.status == 137
    _assert_gone(procs, pid)


def test_aio_errors_are_typed(work: Path) -> None:
    async def main() -> None:
        with pytest.raises(hutch.SetupError) as e:
            await hutch.aio.run(["true"], workspace=work, binds=[("/nonexistent-xyz", "/x")])
        assert e.value.errno == "ENOENT"
        # Raised on entering: the command never started (issue 35).
        with pytest.raises(hutch.SpecError):
            async with hutch.aio.spawn(["true"], workspace=work, seccomp="no-such-profile"):
                raise AssertionError("entered a command that never started")

    asyncio.run(main())


def test_a_denied_host_is_a_clear_result_in_aio(work: Path) -> None:
    async def main() -> hutch.Result:
        return await asyncio.wait_for(
            hutch.aio.run(
                ["curl", "-sS", "https://api.other.example/v1"],
                workspace=work,
                allow_hosts=["api.anthropic.com"],
            ),
            30,
        )

    res = asyncio.run(main())
    assert res.returncode != 0 and res.denied_hosts == ("api.other.example",)
