"""The agent spawner's API (issue 32): ``hutch.aio.spawn_agent`` and
``hutch.run_agent`` with the real Claude Code and Codex (installed by
tests/setup under /opt/hutch-test-agents) against the fake model server
(examples/fake_model.rs, at ``HUTCH_TEST_FAKE_MODEL``; .ci/run builds it),
reached only through hutch's model-API gateway: the spawner's three tests
(a write to /workspace/<repo> lands in the kept upper, not the host repo;
a disallowed host refused and audited; a runaway allocation killed where
the host enforces the cap, else the run refused before start), the key
absent inside, output streamed before the end, and with no model the CLI
ended by the wall clock. Profiles of the caller's own (``agents_dir``,
``HUTCH_AGENTS_PATH``) add to and replace the built-in ones."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import hutch
import hutch.aio

AGENTS = Path("/opt/hutch-test-agents")
MODEL_HOST = "model.test"
FORBIDDEN_HOST = "forbidden.test"
# Only in this process (a Secret's value, through a memfd): the sandbox
# holds a placeholder. Its halves: the scripted search never carries it whole.
KEY_HEAD, KEY_TAIL = "sk-py-REAL-", "KEY-93be1d07"
REAL_KEY = KEY_HEAD + KEY_TAIL
# A port nothing listens on: the unreachable model's.
DEAD_PORT = 1


@dataclass(frozen=True)
class Cli:
    name: str
    bin_dir: Path
    gateway: str
    key_env: str
    inject: str
    base_env: tuple[str, ...]


CLAUDE = Cli(
    "claude-code",
    AGENTS / "claude-code-2.1.332/node_modules/.bin",
    "anthropic",
    "ANTHROPIC_API_KEY",
    "header:x-api-key",
    ("ANTHROPIC_BASE_URL",),
)
CODEX = Cli(
    "codex", AGENTS / "codex-0.171.0/node_modules/.bin", "openai", "OPENAI_API_KEY", "bearer", ()
)
CLIS = [pytest.param(CLAUDE, id="claude-code"), pytest.param(CODEX, id="codex")]


class FakeModel:
    """examples/fake_model.rs as a process: a scripted tool call, then
    ``final``; its log (stderr) has one line per request with the key it
    received."""

    def __init__(self, tmp: Path, command: str, final: str) -> None:
        exe = os.environ.get("HUTCH_TEST_FAKE_MODEL", "")
        if not exe or not os.access(exe, os.X_OK):
            pytest.skip("HUTCH_TEST_FAKE_MODEL names no fake_model binary (.ci/run builds it)")
        self.ca = tmp / "ca.pem"
        self.log = tmp / "model.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [exe, str(self.ca), command, final],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        assert self.proc.stdout is not None
        # Printed once both ports are bound.
        ports = dict(w.split("=") for w in self.proc.stdout.readline().decode().split())
        self.https_port = int(ports["https"])

    def stop(self) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        return self.log.read_text()


def ready(cli: Cli) -> None:
    if not (cli.bin_dir / cli.name.split("-")[0]).exists():
        pytest.skip(f"{cli.name} is not installed under {AGENTS} (tests/setup installs it)")


def through_gateway(cli: Cli, port: int) -> dict[str, object]:
    """The keywords that point the profile's gateway and key (the vendor's
    API) at the fake model: a gateway and a secret of the same name
    replace the profile's."""
    upstream = f"{MODEL_HOST}:{port}"
    return {
        "gateways": [hutch.Gateway(cli.gateway, f"https://{upstream}", env=list(cli.base_env))],
        "secrets": [
            hutch.Secret(
                cli.gateway, [upstream], env=cli.key_env, value=REAL_KEY, inject=cli.inject
            )
        ],
        "allowed_egress": [upstream],
        "resolve": {MODEL_HOST: "127.0.0.1", FORBIDDEN_HOST: "127.0.0.1"},
        "allow_addresses": ["127.0.0.1/32"],
        # The CLI by its name, from where tests/setup installed it.
        "env": {"PATH": f"{cli.bin_dir}:/usr/local/bin:/usr/bin:/bin"},
    }


def a_repo(tmp: Path) -> Path:
    repo = tmp / "demo"
    repo.mkdir()
    (repo / "README").write_text("the host repository\n")
    return repo


# The agent's tool call: write foo.txt, try a host off the allow-list,
# search the sandbox for the real key (one `key-in:` line per place), all
# into a file of the workspace (so the upper shows what it found).
PROBE = (
    "{ echo written-by-the-agent > foo.txt; "
    f"curl -sS --max-time 10 -o /dev/null https://{FORBIDDEN_HOST}/; echo forbidden-exit:$?; "
    f"k={KEY_HEAD}; k=${{k}}{KEY_TAIL}; "
    "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
    'tr "\\0" "\\n" < $f 2>/dev/null | grep -qF "$k" && echo key-in:$f; done; '
    'grep -rlsF "$k" /workspace $HOME /tmp | sed "s/^/key-in:/"; '
    "echo key-search-done; } > probe.txt 2>&1"
)


@pytest.mark.parametrize("cli", CLIS)
def test_spawn_agent_writes_only_to_the_upper_and_the_forbidden_host_is_refused(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ready(cli)
    model = FakeModel(tmp_path, PROBE, "All done: foo.txt is written.")
    monkeypatch.setenv("SSL_CERT_FILE", str(model.ca))
    repo = a_repo(tmp_path)
    changes = tmp_path / "changes"

    async def main() -> tuple[bytes, hutch.Result]:
        async with hutch.aio.spawn_agent(
            cli.name,
            # A prompt like an option, with shell syntax: one argument.
            prompt="-create foo.txt; $(touch /tmp/injected)",
            repo=repo,
            changes=changes,
            timeout="120s",
            **through_gateway(cli, model.https_port),  # type: ignore[arg-type]
        ) as proc:
            out = b"".join([line async for line in proc.stdout])
            return out, await proc.result()

    # hutch's proxy verifies the fake model against the test CA.
    t0 = time.monotonic()
    out, res = asyncio.run(main())
    log = model.stop()
    what = f"{res.report}\nstdout: {out!r}\nstderr: {res.stderr!r}\nmodel:\n{log}"
    assert res.returncode == 0, what
    assert b"All done: foo.txt is written." in out, what
    assert time.monotonic() - t0 < 60, what
    upper = changes / "upper"
    # The manual probe: the write is in the kept upper, not the host repo.
    assert (upper / "foo.txt").read_text() == "written-by-the-agent\n", what
    assert not (repo / "foo.txt").exists()
    probe = (upper / "probe.txt").read_text()
    # The forbidden host: refused, and audited.
    assert "forbidden-exit:0" not in probe, probe
    assert any(d.host == FORBIDDEN_HOST and d.verdict == "deny" for d in res.egress), res.egress
    model_calls = [d for d in res.egress if d.host == MODEL_HOST]
    assert model_calls and all(d.allowed and d.raw.get("via") == "gateway" for d in model_calls), (
        res.egress
    )
    # The key: never inside, but what the model received.
    assert "key-search-done" in probe and "key-in:" not in probe, probe
    assert REAL_KEY not in out.decode() + res.stderr.decode()
    assert REAL_KEY in log and "-> final" in log, log


def test_spawn_agent_streams_output_before_the_agent_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ready(CLAUDE)
    gate = tmp_path / "gate"
    gate.mkdir()
    gate.chmod(0o755)
    # The tool call waits for the test's go: the agent cannot end before
    # the test has read its first line.
    wait_for_go = (
        "for i in $(seq 1200); do [ -e /gate/go ] && break; sleep 0.05; done; echo gated > done.txt"
    )
    model = FakeModel(tmp_path, wait_for_go, "Finished after the gate.")
    monkeypatch.setenv("SSL_CERT_FILE", str(model.ca))
    repo = a_repo(tmp_path)

    async def main() -> tuple[bytes, bool, hutch.ExitReport]:
        async with hutch.aio.spawn_agent(
            "claude-code",
            prompt="wait for the gate",
            repo=repo,
            workspace_at="/workspace/elsewhere",
            # Claude Code's own option: one JSON event per line, as it goes.
            cli_args=["--output-format", "stream-json", "--verbose"],
            binds=[hutch.Bind(gate, "/gate")],
            timeout="120s",
            **through_gateway(CLAUDE, model.https_port),  # type: ignore[arg-type]
        ) as proc:
            first = await proc.stdout.readline()
            running = proc.returncode is None
            (gate / "go").write_text("")
            await proc.stdout.read()
            report = await proc.wait()
        return first, running, report

    first, running, report = asyncio.run(main())
    log = model.stop()
    assert report.success, f"{report}\n{log}"
    assert first.startswith(b"{") and b'"type"' in first, first
    assert running


@pytest.mark.parametrize("cli", CLIS)
def test_a_runaway_allocation_is_killed_or_the_run_refused_before_start(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ready(cli)
    # The agent's tool call allocates 3 GiB under a 1 GiB cap.
    model = FakeModel(
        tmp_path,
        "python3 -c 'a = bytearray(3 << 30); print(\"allocated\")' > alloc.txt 2>&1",
        "Allocated.",
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(model.ca))
    repo = a_repo(tmp_path)
    changes = tmp_path / "changes"

    async def main() -> tuple[hutch.StartEvent | None, hutch.ExitReport]:
        async with hutch.aio.spawn_agent(
            cli.name,
            prompt="allocate",
            repo=repo,
            changes=changes,
            memory="1G",
            timeout="120s",
            **through_gateway(cli, model.https_port),  # type: ignore[arg-type]
        ) as proc:
            start = await proc.started()
            return start, await proc.wait()

    try:
        start, report = asyncio.run(main())
    except hutch.SetupError as e:
        # Refused before start: the reason and what to do, nothing ran.
        log = model.stop()
        assert e.where == "limits.memory" and e.hint, str(e)
        assert "memory=" in str(e), str(e)  # the keyword, not --memory
        assert log == "", log
        assert not (changes / "upper" / "alloc.txt").exists()
        return
    log = model.stop()
    assert start is not None
    assert report.reason == "oom-killed", f"{report}\n{log}"
    assert "allocated" not in (changes / "upper" / "alloc.txt").read_text()


@pytest.mark.parametrize("cli", CLIS)
def test_with_no_model_the_agent_ends_by_the_wall_clock(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ready(cli)
    t0 = time.monotonic()
    res = hutch.run_agent(
        cli.name,
        prompt="anything",
        repo=a_repo(tmp_path),
        timeout="3s",
        **through_gateway(cli, DEAD_PORT),  # type: ignore[arg-type]
    )
    assert res.report.reason == "timed-out" and res.returncode == 124, res.report
    assert time.monotonic() - t0 < 30
    with pytest.raises(hutch.Timeout, match="timed out"):
        hutch.run_agent(
            cli.name,
            prompt="anything",
            timeout="1s",
            check=True,
            **through_gateway(cli, DEAD_PORT),  # type: ignore[arg-type]
        )


ECHO_PROFILE = """\
description = "prints its prompt"
command = "printf"
prompt = ["%s|", "{prompt}"]
"""


def test_profiles_of_ones_own_add_and_replace_the_built_in_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mine = tmp_path / "agents"
    mine.mkdir()
    (mine / "echo.toml").write_text(ECHO_PROFILE)
    # A file of a built-in name replaces it.
    (mine / "codex.toml").write_text(ECHO_PROFILE.replace("%s|", "codex:%s|"))
    mine.chmod(0o755)
    prompt = "-x; $(id) `id` 'q' \"dq\" \n*"
    # cli_args go between the CLI's name and the prompt's words (here the
    # format printf repeats over them).
    res = hutch.run_agent("echo", prompt=prompt, agents_dir=mine, cli_args=["%s:"], check=True)
    assert res.stdout.decode() == f"%s|:{prompt}:"
    res = hutch.run_agent("codex", prompt="hi", agents_dir=mine, check=True)
    assert res.stdout == b"codex:hi|"
    # HUTCH_AGENTS_PATH: read by hutch itself (also `hutch run --agent`).
    monkeypatch.setenv("HUTCH_AGENTS_PATH", f"/nonexistent:{mine}")
    assert hutch.run_agent("codex", prompt="yo", check=True).stdout == b"codex:yo|"
    listed = subprocess.run(
        [hutch.binary(), "agent", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert "echo" in listed and "claude-code" in listed, listed
    # Mistakes: before anything runs.
    with pytest.raises(ValueError, match="prompt is empty"):
        hutch.run_agent("echo", prompt="")
    with pytest.raises(TypeError, match="workspace_at"):
        hutch.run_agent("echo", prompt="x", workspace_at="/workspace/x")
    with pytest.raises(hutch.HutchError, match="no agent profile"):
        hutch.run_agent("no-such-agent", prompt="x")
    (mine / "noprompt.toml").write_text('description = "x"\ncommand = "true"\n')
    with pytest.raises(hutch.HutchError, match="has no `prompt`"):
        hutch.run_agent("noprompt", prompt="x")
