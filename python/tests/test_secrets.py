"""Secrets from Python (docs/secrets.md): the sandbox holds placeholders,
the value (from this process's environment, a file, an fd or memory)
reaches neither the sandbox nor argv nor a repr; bad sources are
``SetupError`` naming the secret; a session declares secrets by name."""

from __future__ import annotations

import os
import secrets as random
from pathlib import Path

import pytest

import hutch

GATEWAY = hutch.Gateway(
    "anthropic", "https://api.anthropic.com", env=["ANTHROPIC_BASE_URL"], methods=["POST"]
)


def env_of(out: bytes) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.decode().splitlines() if "=" in line)


def test_every_source_is_a_placeholder_inside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = {k: f"sk-py-{k}-{random.token_hex(12)}" for k in ("env", "file", "fd", "mem")}
    monkeypatch.setenv("HUTCH_PY_TEST_KEY", values["env"])
    key = tmp_path / "key"
    key.write_text(values["file"] + "\n")
    r, w = os.pipe()
    os.write(w, values["fd"].encode())
    os.close(w)
    hosts = ["api.anthropic.com"]
    secrets = [
        hutch.Secret("a", hosts, env="A", from_env="HUTCH_PY_TEST_KEY"),
        hutch.Secret("b", hosts, env="B", from_file=key, inject="header:x-api-key"),
        hutch.Secret("c", hosts, env="C", from_fd=r, inject="bearer"),
        hutch.Secret("d", hosts, env="D", value=values["mem"]),
    ]
    try:
        cmd = hutch.Command(
            ["sh", "-c", "env; cat /proc/[0-9]*/environ | tr '\\0' '\\n'"],
            allow_hosts=hosts,
            gateways=[GATEWAY],
            secrets=secrets,
        )
        argv = " ".join(cmd.hutch_argv())
        res = cmd.run(check=True)
    finally:
        os.close(r)
    env = env_of(res.stdout)
    for name in "ABCD":
        assert env[name].startswith(f"hutch-placeholder-{name.lower()}-"), env
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:3128/anthropic"
    for v in values.values():
        assert v not in res.stdout_text and v not in res.stderr.decode()
        assert v not in argv and v not in repr(secrets) and v not in repr(cmd)
    assert res.report.enforced.network == "proxy"


def test_a_bad_source_is_a_setup_error_naming_the_secret(tmp_path: Path) -> None:
    with pytest.raises(hutch.SetupError) as e:
        hutch.run(
            ["true"],
            allow_hosts=["api.anthropic.com"],
            gateways=[GATEWAY],
            secrets=[
                hutch.Secret(
                    "anthropic",
                    ["api.anthropic.com"],
                    env="ANTHROPIC_API_KEY",
                    from_file=tmp_path / "absent",
                )
            ],
        )
    assert 'secret "anthropic": cannot read file' in str(e.value)
    # A host off the allow-list is the Spec's refusal, at its key.
    with pytest.raises(hutch.SpecError) as s:
        hutch.run(
            ["true"],
            allow_hosts=["api.anthropic.com"],
            gateways=[GATEWAY],
            secrets=[hutch.Secret("x", ["evil.example"], env="X", value="v")],
        )
    assert "secrets[0].hosts[0]" in str(s.value)
    # Two sources, or none, are refused before anything runs.
    with pytest.raises(ValueError):
        hutch.run(["true"], secrets=[hutch.Secret("x", ["h"], env="X", value="v", from_env="Y")])
    with pytest.raises(ValueError):
        hutch.run(["true"], secrets=[hutch.Secret("x", ["h"], env="X")])


def test_a_memory_value_leaves_no_fd_behind() -> None:
    before = set(os.listdir("/proc/self/fd"))
    hutch.run(
        ["true"],
        allow_hosts=["api.anthropic.com"],
        gateways=[GATEWAY],
        secrets=[hutch.Secret("d", ["api.anthropic.com"], env="D", value="sk-x")],
    )
    assert set(os.listdir("/proc/self/fd")) <= before | {str(x) for x in range(3)}


def test_a_session_declares_secrets_by_name(
    state_dir: Path, work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = f"sk-py-session-{random.token_hex(12)}"
    monkeypatch.setenv("HUTCH_PY_SESSION_KEY", key)
    declared = hutch.Secret(
        "anthropic",
        ["api.anthropic.com"],
        env="ANTHROPIC_API_KEY",
        from_env="HUTCH_PY_SESSION_KEY",
        inject="header:x-api-key",
    )
    with hutch.Session.create(
        from_dir=work,
        state_dir=state_dir,
        defaults={
            "allow_hosts": ["api.anthropic.com"],
            "gateways": [GATEWAY],
            "secrets": [declared],
        },
    ) as s:
        plain = env_of(s.run(["env"], check=True).stdout)
        assert "ANTHROPIC_API_KEY" not in plain
        used = env_of(s.run(["env"], use_secrets=["anthropic"], check=True).stdout)
        assert used["ANTHROPIC_API_KEY"].startswith("hutch-placeholder-anthropic-")
        once = env_of(
            s.run(
                ["env"],
                secrets=[hutch.Secret("reg", ["api.anthropic.com"], env="REG", value="tok-1")],
                check=True,
            ).stdout
        )
        assert once["REG"].startswith("hutch-placeholder-reg-")
        stored = (state_dir / s.id / "session.json").read_text()
        assert key not in stored and "tok-1" not in stored
    with pytest.raises(TypeError):
        hutch.Session.create(
            from_dir=work,
            state_dir=state_dir,
            defaults={"secrets": [hutch.Secret("m", ["h"], env="M", value="v")]},
        )
