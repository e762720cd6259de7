"""Issue 35's rough edges, each through the installed package (root and uid
65534): defaults validated at create, ``hutch.UnenforcedLimit`` and
``strict=True``, ``(host_path, dest)`` workspaces, the session's source and
info, denied hosts counted once, error kinds with ``where``/``hint`` in
Python's words, setup failures raised on entering ``spawn``, ``result()``
refusing to drop streamed output, ``async with Session.create(...)``, and
hutch's own lines kept out of the workload's stderr."""

from __future__ import annotations

import asyncio
import functools
import warnings
from pathlib import Path

import pytest
from support import git

import hutch
import hutch.aio

FORBIDDEN_HOST = "forbidden.test"


@functools.lru_cache(maxsize=1)
def memory_works() -> bool:
    """Whether this host (as this user) enforces a memory cap: decides
    which of the two correct behaviours a test expects."""
    return hutch.check().limits["memory"].works


def test_session_defaults_are_validated_at_create(tmp_path: Path, state_dir: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    if memory_works():
        with hutch.Session.create(
            from_dir=src, defaults={"memory": "1G"}, state_dir=state_dir
        ) as s:
            res = s.run(["true"])
            assert res.ok and "limits.memory" not in " ".join(res.report.unenforced)
        return
    with pytest.raises(hutch.SetupError) as e:
        hutch.Session.create(from_dir=src, defaults={"memory": "1G"}, state_dir=state_dir)
    assert e.value.where == "limits.memory", e.value.what
    assert e.value.hint and "cgroup" in e.value.hint
    # Nothing was made: no session to count a failed command against.
    assert hutch.Session.list(state_dir=state_dir) == []


def test_an_unenforced_default_limit_warns_and_strict_refuses(work: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = hutch.run(["true"], workspace=work)
    unenforced = [w for w in caught if issubclass(w.category, hutch.UnenforcedLimit)]
    assert res.ok
    if memory_works():
        assert not any("limits.memory" in str(w.message) for w in unenforced), unenforced
        assert hutch.run(["true"], workspace=work, strict=True).ok
        return
    # The default 2 GiB cap: a warning at the caller's line, naming it.
    assert any(
        w.message.limit == "limits.memory"  # type: ignore[union-attr]
        and w.filename == __file__
        for w in unenforced
    ), [str(w.message) for w in caught]
    # strict=True: refused before anything runs.
    with pytest.raises(hutch.SetupError) as e:
        hutch.run(["true"], workspace=work, strict=True)
    assert e.value.where == "limits.memory"
    assert e.value.report is None or e.value.report.reason == "setup-failed"


def test_a_workspace_tuple_is_host_path_and_dest(work: Path) -> None:
    res = hutch.run(
        ["cat", "hello.txt"], workspace=(work, "/workspace/six"), cwd="/workspace/six", check=True
    )
    assert res.stdout == b"hello\n"
    with pytest.raises(TypeError, match="workspace"):
        hutch.run(["true"], workspace=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="workspace"):
        hutch.run(["true"], workspace=(work, 6))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="absolute"):
        hutch.run(["true"], workspace=(work, "rel"))


def test_show_keeps_the_source_and_an_attached_session_has_its_info(
    repo: tuple[Path, str], state_dir: Path
) -> None:
    path, rev = repo
    with hutch.Session.create(from_git=path, rev=rev, state_dir=state_dir) as s:
        assert s.info is not None
        created = s.info.source
        assert (created.kind, created.repo, created.rev) == ("git", str(path), rev)
        assert s.show().source == created
        attached = hutch.Session(s.id, state_dir=state_dir)
        assert attached.info is not None and attached.info.source == created
        assert attached.info.id == s.id


def test_denied_hosts_are_listed_once_with_counts(work: Path) -> None:
    res = hutch.run(
        [
            "sh",
            "-c",
            "for i in 1 2 3; do curl -sS --max-time 10 -o /dev/null "
            f"https://{FORBIDDEN_HOST}/; done; true",
        ],
        workspace=work,
        allow_hosts=["example.com"],
        resolve={FORBIDDEN_HOST: "127.0.0.1"},
    )
    assert res.denied_hosts == (FORBIDDEN_HOST,), res.egress
    assert res.denied_counts == {FORBIDDEN_HOST: 3}


def test_errors_have_their_kind_where_and_a_hint_in_python_words(
    repo: tuple[Path, str], state_dir: Path, work: Path
) -> None:
    path, rev = repo
    # A short rev is a bad argument, named by its keyword.
    with pytest.raises(hutch.UsageError) as short:
        hutch.Session.create(from_git=path, rev=rev[:7], state_dir=state_dir)
    assert "rev=" in short.value.what and "--rev" not in short.value.what
    assert "--rev" in short.value.cli_what
    # An unpinned image: the Spec's key and the keyword that sets it.
    with pytest.raises(hutch.SpecError) as unpinned:
        hutch.run(["true"], workspace=work, image="nosuch")
    assert unpinned.value.where == "image.name"
    assert unpinned.value.hint == "set by image="
    # An image missing from the store: refused (docs/machine.md).
    with pytest.raises(hutch.Refused, match="no image"):
        hutch.run(["true"], workspace=work, image="nosuch@sha256:" + "0" * 64)
    # A refusal names the keyword that lifts it.
    (path / "link").symlink_to("README.md")
    git(path, "add", "link")
    git(path, "commit", "-q", "-m", "link")
    head = git(path, "rev-parse", "HEAD")
    with pytest.raises(hutch.Refused) as refused:
        hutch.Session.create(from_git=path, rev=head, state_dir=state_dir)
    assert "allow_symlinks=True" in refused.value.what
    assert "--allow-symlinks" not in refused.value.what


def test_a_setup_failure_is_raised_when_spawn_is_entered(tmp_path: Path, work: Path) -> None:
    missing = tmp_path / "absent"

    async def main() -> None:
        with pytest.raises(hutch.SetupError) as e:
            async with hutch.aio.spawn(
                ["echo", "never"], workspace=work, binds=[(missing, "/data")]
            ) as proc:
                raise AssertionError(f"entered a command that never started: {proc}")
        assert e.value.errno == "ENOENT"
        with pytest.raises(hutch.SetupError):
            await hutch.aio.spawn(["echo", "never"], workspace=work, binds=[(missing, "/data")])

    asyncio.run(main())


def test_result_refuses_to_drop_a_streamed_stdout(work: Path) -> None:
    async def main() -> None:
        async with hutch.aio.spawn(["echo", "hi"], workspace=work) as proc:
            with pytest.raises(hutch.UsageError, match="never read"):
                await proc.result()
            assert (await proc.wait()).success
        async with hutch.aio.spawn(["echo", "hi"], workspace=work) as proc:
            assert await proc.stdout.read() == b"hi\n"
            assert (await proc.result()).stdout == b""
        async with hutch.aio.spawn(["echo", "hi"], workspace=work, stdout="capture") as proc:
            assert (await proc.result()).stdout == b"hi\n"

    asyncio.run(main())


def test_async_with_session_create_works_directly(tmp_path: Path, state_dir: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.txt").write_text("a\n")

    async def main() -> str:
        async with hutch.aio.Session.create(from_dir=src, state_dir=state_dir) as s:
            assert (await s.read("a.txt")) == b"a\n"
            return s.id

    sid = asyncio.run(main())
    assert sid not in {i.id for i in hutch.Session.list(state_dir=state_dir)}


def test_hutchs_own_lines_stay_out_of_the_workloads_stderr(
    work: Path, tmp_path: Path, state_dir: Path
) -> None:
    slow = ["sh", "-c", "echo mine >&2; exec sleep 30"]
    res = hutch.run(slow, workspace=work, timeout=0.5)
    assert res.timed_out and res.stderr_text == "mine\n", res.stderr_text
    src = tmp_path / "src"
    src.mkdir()
    with hutch.Session.create(from_dir=src, state_dir=state_dir) as s:
        r = s.run(slow, timeout=0.5)
        assert r.timed_out and r.stderr_text == "mine\n", r.stderr_text
