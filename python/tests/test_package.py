"""The package as installed from the wheel: its binary, version checks,
``hutch.check()``."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import hutch

REPO = Path(__file__).resolve().parents[2]


def test_the_installed_wheel_is_what_runs() -> None:
    # Not the source tree: the package and its binary come from the venv.
    assert (
        Path(hutch.__file__)
        .resolve()
        .is_relative_to(Path(sysconfig.get_paths()["purelib"]).resolve())
    )
    assert Path(hutch.binary()) == Path(sysconfig.get_paths()["scripts"]) / "hutch"


def test_versions_agree_with_the_crate() -> None:
    cargo = (REPO / "Cargo.toml").read_text()
    m = re.search(r'^version = "([^"]+)"', cargo, re.M)
    assert m is not None
    assert hutch.__version__ == m.group(1)
    from importlib.metadata import version

    assert version("hutch") == hutch.__version__
    out = subprocess.run([hutch.binary(), "version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"hutch {hutch.__version__}"


def test_the_wheel_binary_is_static_pie() -> None:
    # ET_DYN (position independent) without a PT_INTERP program header: no
    # dynamic loader, so no libc of the host is needed.
    data = Path(hutch.binary()).read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2  # 64-bit
    e_type = struct.unpack_from("<H", data, 16)[0]
    assert e_type == 3
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    pt_interp, pt_dynamic = 3, 2
    assert pt_interp not in types
    assert pt_dynamic in types  # static-pie relocates itself


def test_import_is_light() -> None:
    code = "import sys, hutch; print('asyncio' in sys.modules, 'hutch.aio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
    code = "import hutch; print(hutch.aio.spawn.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "spawn"


def fake_hutch(tmp_path: Path, version: str) -> str:
    p = tmp_path / "hutch"
    result = json.dumps({"version": version, "machine": 1})
    doc = f'{{"hutch":1,"verb":"version","ok":true,"result":{result}}}'
    p.write_text(f"#!/bin/sh\necho '{doc}'\n")
    p.chmod(0o755)
    return str(p)


def test_a_binary_of_another_version_is_refused(tmp_path: Path) -> None:
    try:
        hutch.set_binary(fake_hutch(tmp_path, "9.9.9"))
        with pytest.raises(hutch.VersionMismatch, match=r"is hutch 9\.9\.9"):
            hutch.run(["true"])
        silent = tmp_path / "silent"
        silent.write_text("#!/bin/sh\nexit 0\n")
        silent.chmod(0o755)
        hutch.set_binary(str(silent))
        with pytest.raises(hutch.VersionMismatch, match="does not answer"):
            hutch.binary()
    finally:
        hutch.set_binary(None)
    assert hutch.binary() == str(Path(sysconfig.get_paths()["scripts"]) / "hutch")


def test_hutch_bin_is_used_when_the_wheel_has_no_binary(tmp_path: Path) -> None:
    # A copy of the package without its scripts directory: HUTCH_BIN wins
    # over PATH, and a wrong version there falls through to PATH.
    pkg = Path(hutch.__file__).parent
    site = tmp_path / "site"
    site.mkdir()
    os.symlink(pkg, site / "hutch")
    code = "import hutch; print(hutch.binary())"
    env = {
        "PYTHONPATH": str(site),
        "PATH": f"{Path(hutch.binary()).parent}:/usr/bin:/bin",
        "HUTCH_BIN": hutch.binary(),
    }
    py = sys.executable
    # Run the base interpreter so that the venv's scripts are not "the
    # wheel's" for this process.
    base = getattr(sys, "_base_executable", py)
    out = subprocess.run([base, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == hutch.binary()
    env["HUTCH_BIN"] = fake_hutch(tmp_path, "0.0.1")
    out = subprocess.run([base, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == str(Path(hutch.binary()).parent / "hutch")
    env["PATH"] = "/usr/bin:/bin"
    out = subprocess.run([base, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode != 0 and "VersionMismatch" in out.stderr


def test_check_reports_kernel_features() -> None:
    report = hutch.check()
    assert isinstance(report, hutch.CheckReport)
    assert report.ok
    assert report.hutch_version == hutch.__version__
    assert report.uid == os.geteuid()
    userns = report.feature("user_namespace")
    assert userns is not None and userns.ok and userns.required
    assert set(report.limits) >= {"memory", "pids"}
    assert report.limits["memory"].flag == "--memory"
