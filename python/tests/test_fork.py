"""Best-of-N from one provisioned state (issue 36): ``snapshot``,
``fork(count=N)``, ``rollback``, ``snapshots``, sync and asyncio."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

from support import git

import hutch
import hutch.aio

NO_PYC = {"PYTHONDONTWRITEBYTECODE": "1"}


def applies(repo: Path, rev: str, patch: bytes, tmp_path: Path) -> bool:
    """``git apply --check`` of ``patch`` on a fresh export of ``rev``."""
    fresh = tmp_path / f"fresh-{os.urandom(4).hex()}"
    fresh.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", rev], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(fresh)], input=archive, check=True)
    git(fresh, "init", "-q")
    p = subprocess.run(["git", "-C", str(fresh), "apply", "--check", "-"], input=patch, check=False)
    return p.returncode == 0


FIXES = [b"a + b", b"b + a", b"sum((a, b))", b"a - b"]


def test_best_of_n_keeps_the_fix_whose_tests_pass(
    repo: tuple[Path, str], state_dir: Path, tmp_path: Path
) -> None:
    path, rev = repo
    with hutch.Session.create(from_git=path, rev=rev, state_dir=state_dir) as s:
        assert s.run(["sh", "-c", "echo ready > provisioned.txt"]).ok
        snap = s.snapshot("provisioned")
        assert (snap.id, snap.name, snap.kind, snap.files) == (1, "provisioned", "snapshot", 1)
        assert [x.id for x in s.snapshots()] == [1]
        children = s.fork(count=4, from_=snap)
        assert len({c.id for c in children}) == 4
        passed = []
        for c, fix in zip(children, FIXES):
            with c:
                c.write("src/app.py", c.read("src/app.py").replace(b"a - b", fix))
                if c.run(["python3", "run_tests.py"], env=NO_PYC).returncode == 0:
                    passed.append(fix)
                patch = c.diff()
                assert b"+ready" in patch
                assert applies(path, rev, patch, tmp_path)
                for other in FIXES:
                    if other not in (fix, b"a - b"):
                        assert b"+    return " + other not in patch
        assert passed == FIXES[:3]
        # The parent is unchanged.
        assert b"a - b" in s.read("src/app.py")
        # Rollback after destroying the workspace.
        assert s.run(["sh", "-c", "rm -rf ./* && echo junk > junk"]).ok
        back = s.rollback("provisioned")
        assert back.id == 1
        assert s.read("provisioned.txt") == b"ready\n"
        assert b"def add" in s.read("src/app.py")
    assert sorted(os.listdir(state_dir)) == []


def test_aio_fork_and_rollback(repo: tuple[Path, str], state_dir: Path) -> None:
    path, rev = repo

    async def main() -> None:
        async with await hutch.aio.Session.create(from_git=path, rev=rev, state_dir=state_dir) as s:
            assert (await s.run(["sh", "-c", "echo 1 > one.txt"])).ok
            snap = await s.snapshot()
            kids = await s.fork(count=2)
            assert [x.id for x in await kids[0].snapshots()][: snap.id] == [1]
            for k in kids:
                async with k:
                    assert await k.read("one.txt") == b"1\n"
                    assert (await k.run(["sh", "-c", "rm one.txt"])).ok
            assert await s.read("one.txt") == b"1\n"
            assert (await s.run(["sh", "-c", "rm one.txt"])).ok
            await s.rollback(snap)
            assert await s.read("one.txt") == b"1\n"

    asyncio.run(main())
    assert sorted(os.listdir(state_dir)) == []


def test_compact_merges_old_layers_and_keeps_the_tree(
    repo: tuple[Path, str], state_dir: Path
) -> None:
    path, rev = repo
    with hutch.Session.create(from_git=path, rev=rev, state_dir=state_dir, compact_depth=4) as s:
        for i in range(6):
            s.write(f"step{i}.txt", f"{i}\n")
            if i == 2:
                s.rm("step0.txt")
            s.snapshot(f"s{i}")
        # Past compact_depth=4 the snapshots merged the oldest by themselves.
        frozen = [x for x in s.snapshots() if "merged_into" not in x.raw]
        assert len(frozen) <= 4, [x.raw for x in s.snapshots()]
        report = s.compact(depth=1)
        assert report.layers_after == 1 and report.layers_before >= 2
        assert report.merged and report.entries > 0
        names = {g.path for g in s.glob("step*.txt")}
        assert names == {f"step{i}.txt" for i in range(1, 6)}
        assert s.read("step5.txt") == b"5\n"
        try:
            s.compact(depth=0)
        except ValueError as e:
            assert "depth=0" in str(e)
        else:
            raise AssertionError("depth=0 was accepted")


def test_aio_compact(repo: tuple[Path, str], state_dir: Path) -> None:
    path, rev = repo

    async def main() -> None:
        async with hutch.aio.Session.create(from_git=path, rev=rev, state_dir=state_dir) as s:
            for i in range(3):
                await s.write(f"a{i}.txt", "x")
                await s.snapshot()
            report = await s.compact(depth=1)
            assert (report.layers_before, report.layers_after) == (3, 1)
            assert await s.read("a2.txt") == b"x"

    asyncio.run(main())
