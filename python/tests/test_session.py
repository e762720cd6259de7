"""``hutch.Session`` (and ``hutch.aio.Session``) end to end: the issue
bot's flow, each verb, each error a real failure raises."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from support import git

import hutch
import hutch.aio


def test_issue_bot_flow_ends_in_a_patch_that_applies(
    repo: tuple[Path, str], state_dir: Path, tmp_path: Path
) -> None:
    path, rev = repo
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    with hutch.Session.create(
        from_git=path, rev=rev, deadline="10m", max_commands=50, state_dir=state_dir
    ) as s:
        assert s.info is not None
        assert s.info.source.kind == "git" and s.info.source.rev == rev
        assert s.info.files == 7 and len(s.info.fingerprint) == 64
        # Provision: a setup step, then the agent's tools.
        prov = s.run(["sh", "-c", "mkdir -p .cache && echo ready > .cache/provisioned"])
        assert prov.ok and prov.command_seq == 1
        # read, glob, grep, bash
        assert s.read("src/app.py").startswith(b"def main():")
        assert [m.path for m in s.glob("**/*.py")] == [
            "run_tests.py",
            "src/app.py",
            "src/util.py",
            "tests/test_app.py",
        ]
        hits = s.grep(r"def \w+", path="src", max_matches=100)
        assert [(m.path, m.line) for m in hits] == [
            ("src/app.py", 1),
            ("src/app.py", 5),
            ("src/util.py", 1),
        ]
        no_pyc = {"PYTHONDONTWRITEBYTECODE": "1"}
        failing = s.run(["python3", "run_tests.py"], env=no_pyc)
        if failing.returncode == 0:
            pytest.fail("the seeded bug should make the test fail")
        # The agent edits: through write, and through a command.
        s.write("src/app.py", s.read("src/app.py").replace(b"a - b", b"a + b"))
        edit = s.run(["sh", "-c", "sed -i 's/pass/return 42/' src/util.py && rm old.txt"])
        assert edit.ok, edit.stderr
        s.write("NEWS.md", "fixed add()\n")
        s.write("logo.bin", bytes(range(255, -1, -1)) * 4)
        tests = s.run(["python3", "run_tests.py"], env=no_pyc, timeout=120)
        assert tests.ok, tests.stdout_text + tests.stderr_text
        patch = s.diff()
        stat = s.diff(format="stat")
        report = s.diff(format="json")
        manifest = s.export(["test-results.xml"], out=artifacts / "issue.zip", patch=True)
        assert s.info.id in {i.id for i in hutch.Session.list(state_dir=state_dir)}
    assert s.closed
    assert s.info.id not in {i.id for i in hutch.Session.list(state_dir=state_dir)}

    assert b"+    return a + b" in patch and b"deleted file mode" in patch
    assert b"GIT binary patch" in patch
    assert ".cache/provisioned" in stat and "src/util.py" in stat
    assert stat.splitlines()[-1].startswith(" 7 files changed")
    statuses = {f.path: f.status for f in report.files}
    assert statuses["src/app.py"] == "modified" and statuses["old.txt"] == "deleted"
    assert statuses["NEWS.md"] == "added" and statuses["test-results.xml"] == "added"
    assert next(f for f in report.files if f.path == "logo.bin").binary
    # The artifact bundle: manifest sha256s match the archive's bytes.
    entry = manifest.by_path()["test-results.xml"]
    with zipfile.ZipFile(manifest.archive) as z:
        data = z.read("test-results.xml")
        assert hashlib.sha256(data).hexdigest() == entry.sha256
        assert z.read(".hutch/changes.patch") == patch
    assert b"testsuite" in data and manifest.patch_sha256 == hashlib.sha256(patch).hexdigest()
    # The control plane: git apply --check on a fresh checkout of the commit.
    fresh = tmp_path / "fresh"
    subprocess.run(["git", "clone", "-q", str(path), str(fresh)], check=True)
    git(fresh, "checkout", "-q", rev)
    (tmp_path / "change.patch").write_bytes(patch)
    git(fresh, "apply", "--check", str(tmp_path / "change.patch"))
    git(fresh, "apply", str(tmp_path / "change.patch"))
    assert (fresh / "src" / "app.py").read_text().count("a + b") == 1
    assert not (fresh / "old.txt").exists()
    assert (fresh / "logo.bin").read_bytes() == bytes(range(255, -1, -1)) * 4


def test_create_refusals_overrides_and_fingerprints(tmp_path: Path, state_dir: Path) -> None:
    r = tmp_path / "linky"
    r.mkdir()
    git(r, "init", "-q")
    (r / "target.txt").write_text("t\n")
    (r / "link").symlink_to("target.txt")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "link")
    rev = git(r, "rev-parse", "HEAD")
    with pytest.raises(hutch.Refused, match="allow_symlinks=True"):
        hutch.Session.create(from_git=r, rev=rev, state_dir=state_dir)
    with hutch.Session.create(from_git=r, rev=rev, allow_symlinks=True, state_dir=state_dir) as s:
        fp = s.info.fingerprint if s.info else ""
        assert [(m.path, m.kind) for m in s.glob("*")] == [
            ("link", "symlink"),
            ("target.txt", "file"),
        ]
    with pytest.raises(hutch.FingerprintMismatch):
        hutch.Session.create(
            from_git=r,
            rev=rev,
            allow_symlinks=True,
            expect_fingerprint="0" * 64,
            state_dir=state_dir,
        )
    with hutch.Session.create(
        from_git=r, rev=rev, allow_symlinks=True, expect_fingerprint=fp, state_dir=state_dir
    ) as again:
        assert again.info is not None and again.info.fingerprint == fp
    with pytest.raises(hutch.SetupError, match=r"is not in the repository"):
        hutch.Session.create(from_git=r, rev="1" * 40, state_dir=state_dir)
    with pytest.raises(hutch.Refused, match="max_files="):
        hutch.Session.create(from_dir=r, max_files=1, state_dir=state_dir)
    with pytest.raises(TypeError):
        hutch.Session.create(from_git=r, state_dir=state_dir)
    assert hutch.Session.list(state_dir=state_dir) == []


def _git_in(repo: Path, args: list[str], data: str) -> str:
    """``git ARGS`` in ``repo`` with ``data`` on stdin (plumbing: no
    identity or configuration needed beyond commit-tree's)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo.parent),
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        input=data,
        check=True,
        capture_output=True,
        text=True,
        env=env,
    ).stdout.strip()


def _wide_commit(repo: Path, n: int) -> str:
    """A commit of ``n`` paths in one tree, all the same empty blob: a
    repository of a few hundred KiB whatever ``n``."""
    repo.mkdir()
    git(repo, "init", "-q")
    blob = _git_in(repo, ["hash-object", "-w", "--stdin"], "")
    tree = _git_in(repo, ["mktree"], "".join(f"100644 blob {blob}\tf{i:06}\n" for i in range(n)))
    return _git_in(repo, ["commit-tree", tree, "-m", "wide"], "")


def test_default_entry_cap_refuses_a_wide_commit_before_writing(
    tmp_path: Path, state_dir: Path
) -> None:
    # Issue 29 item 7: 300 000 paths were under the old default (1 000 000)
    # and were all written; the default cap (250 000) refuses the commit
    # from its listing, and max_files raises the cap for one that fits.
    wide = tmp_path / "wide"
    rev = _wide_commit(wide, 300_000)
    with pytest.raises(hutch.Refused, match=r"more than 250000 entries.*max_files="):
        hutch.Session.create(from_git=wide, rev=rev, state_dir=state_dir)
    assert list(state_dir.iterdir()) == []
    small = tmp_path / "small"
    small_rev = _wide_commit(small, 300)
    with pytest.raises(hutch.Refused, match=r"more than 299 entries"):
        hutch.Session.create(from_git=small, rev=small_rev, max_files=299, state_dir=state_dir)
    assert list(state_dir.iterdir()) == []
    with hutch.Session.create(
        from_git=small, rev=small_rev, max_files=300, state_dir=state_dir
    ) as s:
        assert s.info is not None and s.info.files == 300


def test_files_commands_and_limits(work: Path, state_dir: Path) -> None:
    with hutch.Session.create(from_dir=work, max_commands=3, state_dir=state_dir) as s:
        assert s.read_text("hello.txt") == "hello\n"
        assert s.write("dir/new.bin", b"\x00\xffdata") == 6
        assert s.read("dir/new.bin") == b"\x00\xffdata"  # non-UTF-8 round trip
        r = s.run(["sh", "-c", "cat dir/new.bin | wc -c; pwd; echo $$ > pid"])
        assert r.stdout_text.split() == ["6", "/workspace"]
        assert r.command_seq == 1 and not r.deadline_hit
        assert s.run(["cat", "pid"]).ok  # files persist, processes do not
        with pytest.raises(hutch.TooLarge):
            s.read("dir/new.bin", max_bytes=2)
        with pytest.raises(hutch.TooLarge):
            s.write("big", b"x" * 100, max_bytes=10)
        # The refused input, left unread, is not the next write's (calls
        # are served one after another by one process of the server).
        assert s.write("small", b"ok\n") == 3
        assert s.read("small") == b"ok\n"
        with pytest.raises(hutch.UsageError, match="does not exist"):
            s.read("missing.txt")
        with pytest.raises(hutch.UsageError, match=r"\.\."):
            s.read("../etc/passwd")
        with pytest.raises(TypeError, match="workspace"):
            s.run(["true"], workspace=work)
        assert s.run(["true"]).command_seq == 3
        with pytest.raises(hutch.Refused, match="budget"):
            s.run(["true"])
    with pytest.raises(hutch.NotFound):
        s.read("hello.txt")
    assert s.close() is False


def test_session_commands_through_the_egress_proxy(work: Path, state_dir: Path) -> None:
    with hutch.Session.create(from_dir=work, state_dir=state_dir) as s:
        r = s.run(
            ["curl", "-sS", "--max-time", "20", "https://elsewhere.example/"],
            allow_hosts=["api.example"],
            timeout=60,
        )
        assert r.returncode != 0 and "403" in r.stderr_text
        assert r.denied_hosts == ("elsewhere.example",)
        assert r.egress_counts == {"decisions": 1, "recorded": 1, "dropped": 0}


def test_timeouts_and_deadlines_in_sessions(work: Path, state_dir: Path) -> None:
    with hutch.Session.create(from_dir=work, deadline=2, state_dir=state_dir) as s:
        r = s.run(["sleep", "30"], timeout=0.3)
        assert r.timed_out and not r.deadline_hit
        r = s.run(["sleep", "30"], timeout=60)
        assert r.timed_out and r.deadline_hit
        with pytest.raises(hutch.Refused, match="deadline"):
            s.run(["true"])


def test_glob_and_grep_run_inside_the_sandbox_and_are_bounded(
    tmp_path: Path, state_dir: Path
) -> None:
    src = tmp_path / "src"
    (src / "pkg" / "deep").mkdir(parents=True)
    (src / ".hidden").mkdir()
    for i in range(30):
        (src / "pkg" / f"m{i:02}.py").write_text(f"def f{i}():\n    return {i}\n# TODO {i}\n")
    (src / "pkg" / "deep" / "x.txt").write_text("TODO deep\n")
    (src / ".hidden" / "h.py").write_text("# todo hidden\n")
    (src / "blob.dat").write_bytes(b"\x00TODO binary\n")
    (src / "long.txt").write_text("TODO " + "y" * 5000 + "\n")
    (src / "etc").symlink_to("/etc")
    with hutch.Session.create(from_dir=src, allow_symlinks=True, state_dir=state_dir) as s:
        # Changes made by commands are visible: the search runs over the
        # workspace as the sandbox sees it.
        s.run(["sh", "-c", "echo 'TODO from a command' > pkg/made.txt; rm pkg/m29.py"])
        g = s.glob("pkg/**/*.py")
        assert len(g) == 29 and g.engine == "builtin" and not g.truncated
        assert g.matches[0].path == "pkg/m00.py"
        assert [m.path for m in s.glob("**/*.{txt,dat}")] == [
            "blob.dat",
            "long.txt",
            "pkg/deep/x.txt",
            "pkg/made.txt",
        ]
        assert s.glob("*.py", path="pkg/deep").matches == ()
        some = s.glob("**/*.py", max_matches=5)
        assert len(some) == 5 and some.truncated_by == "max-matches"
        engines = ["builtin"] + (["rg"] if shutil.which("rg") else [])
        assert "rg" in engines, "CI installs ripgrep: both engines must be tested"
        results = {}
        for engine in engines:
            r = s.grep("TODO", engine=engine)
            assert r.engine == engine and not r.truncated
            results[engine] = [(m.path, m.line, m.text) for m in r]
            assert ("pkg/made.txt", 1, "TODO from a command") in results[engine]
            assert not any(p == "blob.dat" for p, _, _ in results[engine])  # binary
            assert not any(p.startswith("etc/") for p, _, _ in results[engine])  # no links
            long = next(m for m in r if m.path == "long.txt")
            assert long.text_truncated and long.text is not None and len(long.text) == 1024
            ci = s.grep("todo", ignore_case=True, glob="*.py", engine=engine)
            assert ".hidden/h.py" in ci.paths and all(p.endswith(".py") for p in ci.paths)
            files = s.grep("TODO", files_with_matches=True, path="pkg", engine=engine)
            # Path order, a directory's contents where its name sorts.
            assert files.paths == ["pkg/deep/x.txt"] + [f"pkg/m{i:02}.py" for i in range(29)] + [
                "pkg/made.txt"
            ]
            assert all(m.line is None for m in files)
            few = s.grep("return", max_matches=3, engine=engine)
            assert len(few) == 3 and few.truncated_by == "max-matches"
            small = s.grep("return", max_bytes=1000, engine=engine)
            assert small.truncated_by == "max-bytes" and 0 < len(small) < 10
            fixed = s.grep("f1()", fixed_strings=True, engine=engine)
            assert [m.path for m in fixed] == ["pkg/m01.py"]
            with pytest.raises(hutch.UsageError):
                s.grep("(unclosed", engine=engine)
        if len(results) == 2:
            assert results["rg"] == results["builtin"]
        assert s.grep("TODO").engine == engines[-1]  # auto: rg when the sandbox has it
        with pytest.raises(hutch.UsageError, match="outside the workspace"):
            s.grep("root", path="etc")
        with pytest.raises(hutch.UsageError):
            s.glob("../*")
        # Searches never change the workspace and take no command.
        assert b"pkg/made.txt" in s.diff() and s.run(["true"]).command_seq == 2


def test_diff_formats_and_bounds(work: Path, state_dir: Path) -> None:
    with hutch.Session.create(from_dir=work, state_dir=state_dir) as s:
        assert s.diff() == b"" and s.diff(format="json").files == ()
        s.run(["sh", "-c", "seq 1 20000 > numbers.txt; printf '\\377\\376' > latin.txt"])
        patch = s.diff()
        assert patch.startswith(b"diff --git")
        with pytest.raises(hutch.DiffTooLarge) as e:
            s.diff(max_bytes=1000)
        assert isinstance(e.value, hutch.TooLarge) and e.value.kind == "too-large"
        assert "1000" in e.value.what
        stat = s.diff(format="stat")
        assert "numbers.txt" in stat and "latin.txt" in stat
        assert stat.splitlines()[-1].startswith(" 2 files changed, 20001 insertions(+)")
        j = s.diff(format="json")
        assert j.files_changed == 2 and {f.path for f in j.files} == {"numbers.txt", "latin.txt"}
        with pytest.raises(ValueError):
            s.diff(format="html")  # type: ignore[call-overload]


def test_export_caps_and_manifest(work: Path, state_dir: Path, tmp_path: Path) -> None:
    with hutch.Session.create(from_dir=work, state_dir=state_dir) as s:
        s.run(["sh", "-c", "mkdir -p out && echo a > out/a.txt && head -c 5000 /dev/zero > out/z"])
        m = s.export(["out", "hello.txt"], out=tmp_path / "a.tar")
        by = m.by_path()
        assert by["out/a.txt"].sha256 == hashlib.sha256(b"a\n").hexdigest()
        assert by["out/z"].size == 5000 and by["hello.txt"].kind == "file"
        assert m.archive == tmp_path / "a.tar" and m.total_bytes >= 5008
        with pytest.raises(hutch.TooLarge):
            s.export(["out"], out=tmp_path / "b.zip", max_file_bytes=100)
        assert not (tmp_path / "b.zip").exists()


def test_busy_sessions_and_waiting(work: Path, state_dir: Path) -> None:
    async def main() -> None:
        s = await hutch.aio.Session.create(from_dir=work, state_dir=state_dir)
        async with s:
            proc = await s.spawn(["sleep", "1"]).__aenter__()
            assert await proc.started() is not None
            other = hutch.Session(s.id, state_dir=state_dir)
            with pytest.raises(hutch.SessionBusy) as e:
                await asyncio.to_thread(other.read, "hello.txt")
            assert e.value.where == s.id
            with pytest.raises(hutch.SessionBusy):
                await s.run(["true"])
            waiting = hutch.Session(s.id, state_dir=state_dir, wait=True)
            assert await asyncio.to_thread(waiting.read, "hello.txt") == b"hello\n"
            assert (await proc.wait()).success

    asyncio.run(main())


def test_aio_session_verbs(repo: tuple[Path, str], state_dir: Path, tmp_path: Path) -> None:
    path, rev = repo

    async def main() -> bytes:
        async with await hutch.aio.Session.create(from_git=path, rev=rev, state_dir=state_dir) as s:
            assert (await s.read("README.md")) == b"# demo\n"
            await s.write("README.md", "# fixed\n")
            assert await s.read_text("README.md") == "# fixed\n"
            r = await s.run(["sh", "-c", "echo more >> README.md; cat README.md"])
            assert r.stdout == b"# fixed\nmore\n" and isinstance(r, hutch.SessionResult)
            assert [m.path for m in await s.glob("*.md")] == ["README.md"]
            assert (await s.grep("more")).paths == ["README.md"]
            async with s.spawn(["sh", "-c", "echo streamed"]) as proc:
                assert await proc.stdout.readline() == b"streamed\n"
            stat = await s.diff(format="stat")
            assert "README.md" in stat
            j = await s.diff(format="json")
            assert [f.path for f in j.files] == ["README.md"]
            m = await s.export(["README.md"], out=tmp_path / "r.zip")
            assert m.entries[0].path == "README.md"
            assert any(i.id == s.id for i in await hutch.aio.Session.list(state_dir=state_dir))
            patch = await s.diff()
        assert s.closed and not await s.close()
        return patch

    patch = asyncio.run(main())
    assert b"+# fixed" in patch


def test_gc_removes_unused_sessions(work: Path, state_dir: Path) -> None:
    keep = hutch.Session.create(from_dir=work, state_dir=state_dir)
    old = hutch.Session.create(from_dir=work, state_dir=state_dir)
    report = hutch.Session.gc(3600, state_dir=state_dir)
    assert report.removed == () and report.failed == ()
    # gc is about time unused: let 300 ms pass, use one session, collect
    # what has not been used for 200 ms.
    time.sleep(0.3)
    keep.run(["true"])
    report = hutch.Session.gc("200ms", state_dir=state_dir)
    assert report.removed == (old.id,)
    assert [i.id for i in hutch.Session.list(state_dir=state_dir)] == [keep.id]
    keep.close()


def test_seal_show_ps_kill_and_a_verified_close(work: Path, state_dir: Path) -> None:
    async def main() -> None:
        s = await hutch.aio.Session.create(from_dir=work, state_dir=state_dir)
        async with s:
            assert (await s.run(["sh", "-c", "echo dep > dep.txt"])).ok
            seal = await s.seal(network_none=True)
            assert seal.index == 1 and seal.network_none and len(seal.fingerprint) == 64
            shown = await s.show()
            assert shown.id == s.id and shown.raw["network_sealed"] is True
            assert [x["index"] for x in shown.raw["seals"]] == [1]
            # The diff starts at the seal: provisioning is not in it.
            assert await s.diff() == b""
            with pytest.raises(hutch.Refused):
                await s.run(["true"], allow_hosts=["example.com"])
            proc = await s.spawn(["sh", "-c", "sleep 1000 & sleep 1000"]).__aenter__()
            assert await proc.started() is not None
            mine = [x for x in await asyncio.to_thread(hutch.ps) if x.session == s.id]
            assert len(mine) == 1 and mine[0].state == "live", mine
            killed = await asyncio.to_thread(hutch.kill, session=s.id)
            assert [(k.sandbox_id, k.outcome) for k in killed] == [(mine[0].sandbox_id, "killed")]
            report = await proc.wait()
            assert report.status == 137 and report.reason == "killed"
            assert [x for x in await asyncio.to_thread(hutch.ps) if x.session == s.id] == []
            # The reaper's lever is idempotent; a named sandbox that is gone is not.
            assert await asyncio.to_thread(hutch.kill, session=s.id) == []
            with pytest.raises(hutch.NotFound):
                await asyncio.to_thread(hutch.kill, mine[0].sandbox_id)
        assert s.closed

    asyncio.run(main())


def test_production_create_options_image_path_defaults_and_locks(
    work: Path, state_dir: Path, tmp_path: Path
) -> None:
    # A one-layer image of the host's static busybox, imported the way a
    # platform would (`hutch image import --rootfs`) into a private store.
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "tmp").mkdir()
    shutil.copy("/bin/busybox", rootfs / "bin" / "busybox")
    for tool in ["sh", "cat", "echo", "pwd", "test", "ls"]:
        (rootfs / "bin" / tool).symlink_to("busybox")
    store = tmp_path / "images"
    imported = subprocess.run(
        [hutch.binary(), "image", "import", "--rootfs", str(rootfs), "--image-store", str(store)],
        check=True,
        capture_output=True,
        text=True,
    )
    digest = imported.stdout.split()[0]
    assert digest.startswith("sha256:"), imported.stdout

    probe = 'echo "$GREETING"; pwd; test -e /usr/bin/python3 && echo host-usr || echo image-only'
    res = hutch.run(["sh", "-c", probe], workspace=work, image=digest, image_store=store)
    assert res.ok, res.stderr
    assert res.stdout.decode().splitlines()[-1] == "image-only"
    assert res.report.raw["enforced"]["image"]["manifest_digest"] == digest

    with hutch.Session.create(
        from_dir=work,
        state_dir=state_dir,
        image=digest,
        image_store=store,
        workspace_path="/workspace/app",
        defaults={"env": {"GREETING": "hi"}},
        locks=["env"],
    ) as s:
        out = s.run(["sh", "-c", probe])
        assert out.ok, out.stderr
        assert out.stdout.decode().splitlines() == ["hi", "/workspace/app", "image-only"]
        shown = s.show()
        assert shown.raw["workspace_path"] == "/workspace/app"
        assert shown.raw["image"]["digest"] == digest
        # The session's defaults may be narrowed, never widened where locked.
        with pytest.raises(hutch.HutchError):
            s.run(["true"], env={"OTHER": "x"})
    with pytest.raises(ValueError):
        hutch.Session.create(from_dir=work, state_dir=state_dir, locks=["everything"])
