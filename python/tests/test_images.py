"""``hutch.images`` end to end: an image pushed into a real registry
(Debian's ``docker-registry`` on loopback, ``skopeo copy`` from an OCI
layout umoci builds), pulled by digest with an approved list, and the
issue bot's flow run on it in a session: the image's /bin/sh and tar on a
copied workspace, the patch collected."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import hutch
from hutch import images

TOOLS = ("docker-registry", "skopeo", "umoci")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing (tests/setup installs them)")
    host = f"127.0.0.1:{_free_port()}"
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {tmp_path / 'registry'}\nhttp:\n  addr: {host}\n"
    )
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", int(host.split(":")[1])), 1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"docker-registry did not start on {host}") from None
                time.sleep(0.02)
        yield host
    finally:
        proc.kill()
        proc.wait()


def _push_busybox_image(tmp_path: Path, host: str) -> str:
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "tmp").mkdir()
    shutil.copy("/bin/busybox", rootfs / "bin" / "busybox")
    for tool in ["sh", "tar", "cat", "echo", "ls", "sed"]:
        (rootfs / "bin" / tool).symlink_to("busybox")
    layout = f"{tmp_path / 'layout'}:bot"
    rootless = [] if os.geteuid() == 0 else ["--rootless"]
    subprocess.run(["umoci", "init", "--layout", str(tmp_path / "layout")], check=True)
    subprocess.run(["umoci", "new", "--image", layout], check=True)
    subprocess.run(["umoci", "insert", *rootless, "--image", layout, str(rootfs), "/"], check=True)
    dest = f"docker://{host}/hutch/bot:1"
    # skopeo's own credential file (none needed): never the user's.
    auth = tmp_path / "skopeo-auth.json"
    auth.write_text("{}")
    subprocess.run(
        [
            "skopeo",
            "copy",
            "--quiet",
            f"--authfile={auth}",
            "--dest-tls-verify=false",
            f"oci:{layout}",
            dest,
        ],
        check=True,
    )
    raw = subprocess.run(
        ["skopeo", "inspect", "--raw", f"--authfile={auth}", "--tls-verify=false", dest],
        check=True,
        capture_output=True,
    ).stdout
    return f"{host}/hutch/bot@sha256:{hashlib.sha256(raw).hexdigest()}"


def test_pulled_pinned_approved_image_runs_the_issue_bot_flow(
    registry: str, tmp_path: Path, work: Path, state_dir: Path
) -> None:
    ref = _push_busybox_image(tmp_path, registry)
    store = tmp_path / "images"
    other = "sha256:" + "ab" * 32

    with pytest.raises(hutch.Refused) as refused:
        images.pull(ref, store=store, insecure_registries=[registry], approved=[other])
    assert "not on the approved list" in refused.value.what
    assert images.list(store=store) == []

    pulled = images.pull(ref, store=store, insecure_registries=[registry], approved=[ref])
    assert pulled.pinned and pulled.digest == ref.split("@")[1]
    assert pulled.image.pulled is not None
    assert pulled.image.pulled.repository == f"{registry}/hutch/bot"
    assert [i.manifest for i in images.list(store=store)] == [pulled.image.manifest]
    assert images.inspect(ref, store=store, approved=[ref]).approved is True
    assert images.inspect(ref, store=store, approved=[other]).approved is False
    assert images.inspect(ref, store=store).approved is None

    with hutch.Session.create(
        from_dir=work, state_dir=state_dir, image=ref, image_store=store
    ) as s:
        res = s.run(
            [
                "sh",
                "-c",
                "sed -i s/hello/fixed/ hello.txt && tar cf /tmp/a.tar hello.txt"
                " && tar tf /tmp/a.tar",
            ]
        )
        assert res.ok, res.stderr
        assert res.stdout.decode() == "hello.txt\n"
        assert b"+fixed" in s.diff()
    assert (work / "hello.txt").read_text() == "hello\n"

    removed = images.rm(ref, store=store)
    assert removed.image_removed
    assert images.gc(store=store).layers


def test_a_registry_that_cannot_be_reached_raises_registry_error(tmp_path: Path) -> None:
    port = _free_port()
    ref = f"127.0.0.1:{port}/x/y@sha256:" + "cd" * 32
    with pytest.raises(hutch.RegistryError) as e:
        images.pull(ref, store=tmp_path / "images", insecure_registries=[f"127.0.0.1:{port}"])
    assert e.value.where == f"127.0.0.1:{port}"
    with pytest.raises(hutch.Refused):
        images.pull(f"127.0.0.1:{port}/x/y:latest", store=tmp_path / "images")


def test_session_create_pulls_a_missing_image_and_run_takes_an_approved_list(
    registry: str, tmp_path: Path, work: Path, state_dir: Path
) -> None:
    ref = _push_busybox_image(tmp_path, registry)
    store = tmp_path / "images"
    other = "sha256:" + "ab" * 32

    # Not on the list: refused before any layer is fetched, nothing stored.
    with pytest.raises(hutch.Refused) as refused:
        hutch.Session.create(
            from_dir=work,
            state_dir=state_dir,
            image=ref,
            image_store=store,
            pull="missing",
            insecure_registries=[registry],
            approved=[other],
        )
    assert "not on the approved list" in refused.value.what
    assert images.list(store=store) == []

    with hutch.Session.create(
        from_dir=work,
        state_dir=state_dir,
        image=ref,
        image_store=store,
        pull="missing",
        insecure_registries=[registry],
        approved=[ref],
    ) as s:
        res = s.run(["sh", "-c", "cat hello.txt"])
        assert res.ok, res.stderr
        assert res.stdout == b"hello\n"
    assert len(images.list(store=store)) == 1

    # hutch.run's approved=: the entries, or a file of them.
    ok = hutch.run(["sh", "-c", "echo ran"], image=ref, image_store=store, approved=[ref])
    assert ok.ok and ok.stdout == b"ran\n", ok.stderr
    listed = tmp_path / "approved.list"
    listed.write_text(f"# ours\n{other}\n")
    with pytest.raises(hutch.Refused) as refused:
        hutch.run(["true"], image=ref, image_store=store, approved=listed)
    assert "not on the approved list" in refused.value.what
