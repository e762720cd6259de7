"""Parity with the CLI: every option of ``hutch run``, ``hutch session``
and ``hutch image`` (read from the installed binary's ``--help``) has a
typed keyword, and the verbs added for it work end to end."""

from __future__ import annotations

import asyncio
import gc
import inspect
import re
import shutil
import subprocess
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

import hutch
import hutch.aio
from hutch import images

#: Flags the package gives hutch itself (its transport), never a caller.
TRANSPORT = {
    "--json",  # every call reads the machine envelope
    "--quiet",  # hutch's notes become exceptions, warnings and report fields
    "--status-fd",  # spawn() reads the start event and the report from it
    "--result-fd",  # run() reads the envelope from it
}

#: Flags whose keyword is not the flag's name (``--max-bytes`` is
#: ``max_bytes`` by the general rule).
RENAMED = {
    "--ro-bind": "binds",
    "--bind": "binds",
    "--dev-bind": "binds",
    "--ro-bind-try": "binds",  # Bind(optional=True)
    "--bind-try": "binds",
    "--dev-bind-try": "binds",
    "--size": "tmpfs",  # ("/scratch", "1G")
    "--dir": "dirs",
    "--overlay": "overlays",
    "--symlink": "symlinks",
    "--setenv": "env",
    "--chdir": "cwd",
    "--label": "labels",
    "--allow-host": "allow_hosts",
    "--allow-address": "allow_addresses",
    "--secret": "secrets",
    "--gateway": "gateways",
    "--audit": "egress_audit",
    "--require-limits": "strict",
    "--rlimit": "rlimits",
    "--insecure-registry": "insecure_registries",
    "--use-secret": "use_secrets",
    # session create / fork / seal
    "--from": "from_dir",  # fork's --from is from_ (below)
    "--from-git": "from_git",
    "--lock": "locks",
    "--network": "network_none",
    # grep's short forms are listed beside their long ones
    "-i": "ignore_case",
    "-F": "fixed_strings",
    "-l": "files_with_matches",
}

FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*|-[iFl])(?![\w-])")


def help_text(*words: str) -> str:
    p = subprocess.run(
        [hutch.binary(), *words, "--help"], capture_output=True, text=True, check=False
    )
    return p.stdout + p.stderr


def flags(text: str) -> set[str]:
    return set(FLAG.findall(text)) - TRANSPORT


def keywords(*callables: Callable[..., Any]) -> set[str]:
    out: set[str] = set()
    for f in callables:
        out |= set(inspect.signature(f).parameters)
    return out


#: The options of a sandboxed command (``hutch.run(**options)``).
OPTIONS = set(hutch.Options.__annotations__)


def missing(found: Iterable[str], have: set[str], renamed: dict[str, str]) -> list[str]:
    names = {**RENAMED, **renamed}
    return sorted(f for f in found if names.get(f, f.lstrip("-").replace("-", "_")) not in have)


def test_every_run_flag_is_a_keyword() -> None:
    found = flags(help_text("run"))
    assert {"--memory", "--allow-host", "--approved", "--platform"} <= found
    # --agent NAME and --prompt TEXT are run_agent's/spawn_agent's own.
    have = OPTIONS | keywords(hutch.run_agent)
    assert missing(found, have, {}) == []


#: Each session verb's methods (sync first, then asyncio's of the same name).
SESSION_METHODS: dict[str, tuple[str, ...]] = {
    "create": ("create",),
    "run": ("run",),
    "warm": ("warm", "warm_ready"),
    "read": ("read",),
    "write": ("write",),
    "rm": ("rm",),
    "glob": ("glob",),
    "grep": ("grep",),
    "diff": ("diff",),
    "export": ("export",),
    "seal": ("seal",),
    "snapshot": ("snapshot",),
    "snapshots": ("snapshots",),
    "fork": ("fork",),
    "rollback": ("rollback",),
    "compact": ("compact",),
    "show": ("show",),
    "audit": ("audit",),
    "close": ("close",),
    "list": ("list",),
    "gc": ("gc",),
}

#: Per verb, keywords that differ from the general table.
SESSION_RENAMED: dict[str, dict[str, str]] = {
    "fork": {"--from": "from_"},
    # --ready is warm_ready(), whose --timeout is its timeout=.
    "warm": {"--ready": "warm_ready", "--timeout": "timeout", "--warm-idle": "idle"},
}

#: Flags a verb's help names only to point at another verb's.
SESSION_MENTIONED: dict[str, set[str]] = {
    "fork": {"--since"},  # "`diff --since SNAP` gives only its own changes"
    "compact": {"--compact-depth"},  # "the session's --compact-depth" (create's)
}


def test_every_session_verb_is_a_method_and_its_flags_keywords() -> None:
    top = help_text("session")
    verbs = re.findall(r"^  ([a-z]+) ", top, re.M)
    assert len(verbs) >= 18, top
    # `hutch session [--state-dir DIR] [--wait]`: the session's own.
    assert missing(flags(top.split("\n", 1)[0]), keywords(hutch.Session), {}) == []
    assert sorted(set(verbs) - set(SESSION_METHODS)) == []
    gaps: dict[str, list[str]] = {}
    for verb in verbs:
        methods = []
        for name in SESSION_METHODS[verb]:
            for cls in (hutch.Session, hutch.aio.Session):
                f = getattr(cls, name, None)
                if f is None:
                    gaps.setdefault(verb, []).append(f"{cls.__module__}.Session.{name}")
                    continue
                methods.append(f)
                # The sync and the asyncio front end take the same keywords.
                sync = getattr(hutch.Session, name, None)
                if sync is not None:
                    assert keywords(sync) == keywords(f), (verb, name)
        have = keywords(*methods) | {"warm_ready"}
        if verb in ("create", "run"):
            # Defaults of every command (create) and a command's own
            # options (run) are hutch.run's.
            have |= OPTIONS
        found = flags(help_text("session", verb)) - SESSION_MENTIONED.get(verb, set())
        gap = missing(found, have, SESSION_RENAMED.get(verb, {}))
        if gap:
            gaps.setdefault(verb, []).extend(gap)
    assert gaps == {}


IMAGE_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "import": images.import_,
    "pull": images.pull,
    "list": images.list,
    "inspect": images.inspect,
    "rm": images.rm,
    "gc": images.gc,
}


def test_every_image_verb_is_a_function_and_its_flags_keywords() -> None:
    top = help_text("image")
    verbs = re.findall(r"^  ([a-z]+) ", top, re.M)
    assert sorted(set(verbs)) == sorted(IMAGE_FUNCTIONS), top
    # `hutch image [--image-store DIR]` is each function's store=.
    renamed = {"--image-store": "store"}
    # rm's help names `hutch session create --image` (a live session's
    # image is not removed).
    mentioned = {"rm": {"--image"}}
    gaps = {}
    for verb, f in IMAGE_FUNCTIONS.items():
        found = flags(help_text("image", verb)) - mentioned.get(verb, set())
        gap = missing(found, keywords(f), renamed)
        if gap:
            gaps[verb] = gap
    assert gaps == {}


def test_diff_since_exclude_include_ignored_export_rm_audit(
    tmp_path: Path, state_dir: Path
) -> None:
    base = tmp_path / "base"
    base.mkdir()
    (base / ".gitignore").write_text("build/\n")
    (base / "app.py").write_text("x = 1\n")
    audit_dir = tmp_path / "audit"
    audit_dir.mkdir()
    s = hutch.Session.create(from_dir=base, state_dir=state_dir)
    try:
        s.run(["sh", "-c", "mkdir -p .deps build && echo dep > .deps/d.py && echo b > build/o"])
        s.write("app.py", "x = 2\n")
        sealed = s.seal()
        s.write("app.py", "x = 3\n")
        # Since the seal (the default), and since the baseline.
        assert b"+x = 3" in s.diff() and b"x = 2" in s.diff()
        whole = s.diff(since="baseline")
        assert b"+x = 3" in whole and b".deps/d.py" in whole
        assert b"build/o" not in whole
        assert b"build/o" in s.diff(since="baseline", include_ignored=True)
        report = s.diff(format="json", since="baseline", exclude=[".deps/"])
        assert [f.path for f in report.files] == ["app.py"]
        assert s.diff(since=sealed.index) == s.diff()
        # The patch of an export is shaped the same way.
        out = tmp_path / "a.zip"
        s.export(["app.py"], out=out, patch=True, since="baseline", exclude=[".deps/"])
        with zipfile.ZipFile(out) as z:
            patch = z.read(".hutch/changes.patch")
        assert b"app.py" in patch and b".deps" not in patch
        with pytest.raises(TypeError, match="patch=True"):
            s.export(["app.py"], out=tmp_path / "b.zip", exclude=[".deps/"])
        # rm: gone from the workspace, and from the diff.
        assert s.rm(".deps", "build") == [".deps", "build"]
        assert s.glob("**/*").paths == [".gitignore", "app.py"]
        events = s.audit()
        kinds = [e.get("event") for e in events]
        assert "command" in kinds, kinds
        assert s.close(keep_audit=audit_dir)
        kept = hutch.Session(s.id, state_dir=state_dir).audit(audit_dir=audit_dir)
        assert [e.get("event") for e in kept][: len(kinds)] == kinds
    finally:
        s.close()


def test_output_bytes_is_what_the_workload_wrote(work: Path) -> None:
    res = hutch.run(["sh", "-c", "head -c 100000 /dev/zero"], workspace=work, output_limit=1000)
    assert len(res.stdout) == 1000 and res.report.output_truncated
    assert (res.report.output_bytes, res.report.output_kept) == (100000, 1000)


BURN = """\
import time
b = bytearray(100 << 20)
for i in range(0, len(b), 4096):
    b[i] = 1
t = time.process_time()
while time.process_time() - t < 0.5:
    pass
"""


def _assert_burned(u: hutch.Usage | None) -> None:
    assert u is not None
    assert u.source in ("cgroup", "rusage"), u
    # The command's own process_time() saw 0.5 s; all of it is counted.
    assert u.cpu_seconds is not None and u.cpu_seconds >= 0.5, u
    assert u.cpu_user_usec is not None and u.cpu_user_usec > 0, u
    assert u.memory_peak_bytes is not None and u.memory_peak_bytes >= 100 << 20, u
    if u.source == "cgroup" and u.pids_peak is not None:
        assert u.pids_peak >= 1, u


def test_usage_in_every_result(work: Path, state_dir: Path) -> None:
    res = hutch.run(["python3", "-c", BURN], workspace=work)
    assert res.ok, res.stderr_text
    _assert_burned(res.usage)
    assert res.usage == res.report.usage
    # A trivial command uses far less: the figures are the command's.
    small = hutch.run(["true"], workspace=work).usage
    assert small is not None and small.memory_peak_bytes is not None
    assert small.memory_peak_bytes < 100 << 20, small
    with hutch.Session.create(from_dir=work, state_dir=state_dir) as s:
        r = s.run(["python3", "-c", BURN])
        assert r.ok, r.stderr_text
        _assert_burned(r.usage)


def test_approved_and_allow_unpinned_on_run_and_session(tmp_path: Path) -> None:
    before = set(Path(tempfile.gettempdir()).glob("hutch-approved-*"))
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "tmp").mkdir()
    shutil.copy("/bin/busybox", rootfs / "bin" / "busybox")
    (rootfs / "bin" / "sh").symlink_to("busybox")
    (rootfs / "bin" / "echo").symlink_to("busybox")
    store = tmp_path / "store"
    img = images.import_(rootfs, rootfs=True, store=store, name="parity/box").image
    other = "sha256:" + "0" * 64
    base = tmp_path / "base"
    base.mkdir()
    run = {"image": img.manifest, "image_store": store, "workspace": base}
    # Entries: a private file for the call, refused when not listed.
    with pytest.raises(hutch.Refused):
        hutch.run(["echo", "hi"], approved=[other], **run)  # type: ignore[arg-type]
    ok = hutch.run(["echo", "hi"], approved=[img.manifest], **run)  # type: ignore[arg-type]
    assert ok.stdout == b"hi\n", ok.stderr_text
    listed = tmp_path / "approved.list"
    listed.write_text(img.manifest + "\n")
    assert hutch.run(["echo", "hi"], approved=listed, **run).ok  # type: ignore[arg-type]
    # A bare name runs only with allow_unpinned=True.
    named = {"image_store": store, "workspace": base}
    with pytest.raises(hutch.HutchError):
        hutch.run(["echo", "hi"], image="parity/box", **named)  # type: ignore[arg-type]
    res = hutch.run(
        ["echo", "hi"],
        image="parity/box",
        allow_unpinned=True,
        **named,  # type: ignore[arg-type]
    )
    assert res.stdout == b"hi\n", res.stderr_text
    # Session.create: the approved list (entries) is the session's; its
    # refusal is `refused`, as hutch run's.
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    with pytest.raises(hutch.Refused, match="approved=") as refused:
        hutch.Session.create(
            from_dir=base, image=img.manifest, image_store=store, approved=[other], state_dir=state
        )
    with hutch.Session.create(
        from_dir=base,
        image="parity/box",
        allow_unpinned=True,
        image_store=store,
        approved=[img.manifest],
        state_dir=state,
    ) as s:
        assert s.run(["echo", "in"]).stdout == b"in\n"
    assert "--approved" not in str(refused.value)
    # The private files of the entries are gone with the calls (the
    # refused create's once its exception, which holds the call, is).
    del refused
    gc.collect()
    assert set(Path(tempfile.gettempdir()).glob("hutch-approved-*")) <= before


def test_aio_session_attach_reads_info(work: Path, state_dir: Path) -> None:
    async def main() -> None:
        async with hutch.aio.Session.create(from_dir=work, state_dir=state_dir) as s:
            assert s.info is not None
            created = s.info.source
            attached = await hutch.aio.Session.attach(s.id, state_dir=state_dir)
            assert attached.info is not None and attached.info.source == created
            bare = hutch.aio.Session(s.id, state_dir=state_dir)
            with pytest.raises(hutch.UsageError, match="attach"):
                _ = bare.info  # not read yet: an error, not a silent None
            await bare.show()
            assert bare.info is not None and bare.info.id == s.id
        with pytest.raises(hutch.NotFound):
            await hutch.aio.Session.attach(s.id, state_dir=state_dir)

    asyncio.run(main())


def test_glob_and_grep_exclude_a_provisioned_tree(work: Path, state_dir: Path) -> None:
    (work / "app.py").write_text("import dep\n")
    with hutch.Session.create(from_dir=work, state_dir=state_dir) as s:
        s.run(["sh", "-c", "mkdir -p .deps/pkg sub/.deps && echo 'import x' > .deps/pkg/m.py"])
        s.run(["sh", "-c", "echo 'import y' > sub/.deps/n.py && echo 'import z' > sub/k.py"])
        assert s.glob("**/*.py").paths == [".deps/pkg/m.py", "app.py", "sub/.deps/n.py", "sub/k.py"]
        # A name anywhere; a path from the root; a trailing / is accepted.
        assert s.glob("**/*.py", exclude=[".deps"]).paths == ["app.py", "sub/k.py"]
        assert s.glob("**/*.py", exclude=["sub/**"]).paths == [".deps/pkg/m.py", "app.py"]
        assert s.glob("**/*.py", exclude=[".deps/", "sub/k.py"]).paths == ["app.py"]
        for engine in ("builtin", "auto"):
            hits = s.grep("^import", engine=engine, exclude=[".deps"])
            assert hits.paths == ["app.py", "sub/k.py"], (engine, hits)
            assert hits.engine == ("builtin" if engine == "builtin" else "rg"), hits
        with pytest.raises(hutch.UsageError, match="exclude"):
            s.glob("*", exclude=[""])
        with pytest.raises(TypeError):
            s.glob("*", exclude=".deps")  # one str, not a list


def test_the_disk_limit_line_stays_out_of_stderr_text(work: Path, state_dir: Path) -> None:
    with hutch.Session.create(from_dir=work, disk_max_preferred="16M", state_dir=state_dir) as s:
        r = s.run(["sh", "-c", "head -c 20000000 /dev/zero > big; echo mine >&2"])
        assert r.report.reason == "disk-limit-hit", r.report
        assert r.report.error is not None and "disk limit" in r.report.error
        # hutch's line is in the report; stderr is the workload's alone (as
        # root the quota is an ext4 image: head's own ENOSPC line is there).
        lines = r.stderr_text.splitlines()
        assert lines[-1] == "mine" and not [x for x in lines if x.startswith("hutch")], lines


def test_warm_and_warm_ready(work: Path, state_dir: Path) -> None:
    with hutch.Session.create(from_dir=work, state_dir=state_dir) as s:
        s.warm(1, idle="1m")
        status = s.warm_ready(timeout=60)
        assert status["ready"] == status["size"] == 1, status
        r = s.run(["cat", "hello.txt"])
        assert r.stdout == b"hello\n" and r.report.raw.get("warm") is True, r.report.raw
        assert r.usage is not None
