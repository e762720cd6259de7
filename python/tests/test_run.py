"""``hutch.run`` and ``hutch.Command`` end to end against the real binary."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import hutch


def test_run_returns_output_status_and_the_exit_report(work: Path) -> None:
    res = hutch.run(["sh", "-c", "echo hi; echo oops >&2; exit 3"], workspace=work)
    assert res.returncode == 3
    assert res.stdout == b"hi\n" and res.stdout_text == "hi\n"
    assert res.stderr == b"oops\n"
    assert res.report.reason == "exited" and res.report.exit_code == 3
    assert not res.ok
    assert res.start is None  # no start event asked for: the cheaper path
    assert "net" in res.report.enforced.namespaces
    assert res.report.enforced.network == "none"
    assert res.args == ("sh", "-c", "echo hi; echo oops >&2; exit 3")


def test_a_status_file_gets_the_launchers_events(work: Path, tmp_path: Path) -> None:
    status = tmp_path / "status.jsonl"
    res = hutch.run(["true"], workspace=work, status_file=status)
    events = [json.loads(line) for line in status.read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "exit"]
    assert events[0]["sandbox_id"] == res.report.sandbox_id
    assert events[1]["status"] == 0 and res.ok
    # A command that never starts still ends the file with an exit event.
    with pytest.raises(hutch.SpecError):
        hutch.run(["true"], workspace=work, status_file=status, pids=0)
    last = json.loads(status.read_text().splitlines()[-1])
    assert last["event"] == "exit" and last["status"] == 125


def test_the_workspace_is_an_overlay_and_changes_can_be_kept(work: Path, tmp_path: Path) -> None:
    res = hutch.run(["sh", "-c", "cat hello.txt; echo new > new.txt"], workspace=work)
    assert res.ok and res.stdout == b"hello\n"
    assert not (work / "new.txt").exists()
    assert res.report.changes[0].changed_paths == 1
    keep = tmp_path / "keep"
    res = hutch.run(["sh", "-c", "echo kept > k.txt"], workspace=work, changes=keep)
    assert res.ok
    assert (keep / "upper" / "k.txt").read_text() == "kept\n"


def test_input_env_cwd_ids_and_hostname(work: Path) -> None:
    res = hutch.run(
        ["sh", "-c", 'cat; echo "$GREETING"; pwd; id -u; id -g; hostname'],
        workspace=work,
        input=b"from stdin\n",
        env={"GREETING": "hello there"},
        cwd="/tmp",
        uid=1234,
        gid=4321,
        hostname="box",
    )
    assert res.ok, res.stderr
    assert res.stdout_text.splitlines() == [
        "from stdin",
        "hello there",
        "/tmp",
        "1234",
        "4321",
        "box",
    ]


def test_large_input_and_output_do_not_deadlock(work: Path) -> None:
    data = os.urandom(3 << 20)
    res = hutch.run(["sh", "-c", "cat; head -c 2000000 /dev/zero >&2"], workspace=work, input=data)
    assert res.ok
    assert res.stdout == data
    assert len(res.stderr) == 2_000_000


def test_output_is_bounded_by_default_and_by_output_limit(work: Path) -> None:
    res = hutch.run(["sh", "-c", "head -c 20000000 /dev/zero"], workspace=work)
    assert res.ok
    assert len(res.stdout) == 16 << 20  # the default 16M
    assert res.report.output_truncated
    res = hutch.run(["sh", "-c", "head -c 100000 /dev/zero"], workspace=work, output_limit=1000)
    assert len(res.stdout) == 1000 and res.report.output_truncated


def test_a_timeout_is_a_result_and_an_exception_only_when_asked(work: Path) -> None:
    t0 = time.monotonic()
    res = hutch.run(["sleep", "30"], workspace=work, timeout=0.3)
    assert time.monotonic() - t0 < 10
    assert res.timed_out and res.returncode == 124
    with pytest.raises(hutch.Timeout) as e:
        hutch.run(["sleep", "30"], workspace=work, timeout="300ms", check=True)
    assert e.value.result.report.reason == "timed-out"
    with pytest.raises(hutch.CommandFailed) as f:
        hutch.run(["false"], workspace=work, check=True)
    assert not isinstance(f.value, hutch.Timeout) and f.value.result.returncode == 1
    assert hutch.run(["true"], workspace=work, check=True).ok


def test_a_missing_command_is_a_result(work: Path) -> None:
    res = hutch.run(["no-such-command-xyz"], workspace=work)
    assert res.returncode == 127 and res.report.reason == "exec-failed"
    assert res.report.error is not None and "not found" in res.report.error


def test_binds_and_tmpfs(work: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("input\n")
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    res = hutch.run(
        [
            "sh",
            "-c",
            "cat /data/in.txt; echo x > /data/no.txt 2>/dev/null || echo ro; "
            "echo written > /out/o.txt; df -k /scratch | tail -1 | tr -s ' ' | cut -d' ' -f2",
        ],
        workspace=work,
        binds=[
            (data, "/data"),
            hutch.Bind(out, "/out", readonly=False),
            hutch.Bind("/nonexistent-xyz", "/opt/x", optional=True),
        ],
        tmpfs=[("/scratch", "8M")],
    )
    assert res.ok, res.stderr
    assert res.stdout_text.splitlines() == ["input", "ro", "8192"]
    assert (out / "o.txt").read_text() == "written\n"
    assert not (data / "no.txt").exists()


def test_a_missing_bind_source_is_a_setup_error(work: Path) -> None:
    with pytest.raises(hutch.SetupError) as e:
        hutch.run(["true"], workspace=work, binds=[("/nonexistent-xyz", "/x")])
    err = e.value
    assert err.kind == "setup" and err.errno == "ENOENT" and err.returncode == 125
    assert err.where is not None and "/nonexistent-xyz" in err.where
    assert err.hint is not None and "optional bind" in err.hint
    assert "/nonexistent-xyz" in err.what
    assert err.report is not None and err.report.reason == "setup-failed"


def test_bad_profiles_are_spec_and_policy_errors(work: Path, tmp_path: Path) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text("version = 1\n[limits]\npids = 0\n")
    with pytest.raises(hutch.SpecError) as e:
        hutch.run(["true"], workspace=work, profile=profile)
    assert e.value.where == "limits.pids" and "p.toml" in e.value.what
    profile.write_text("version = 1\nno_such_key = 1\n")
    with pytest.raises(hutch.SpecError, match="no_such_key"):
        hutch.run(["true"], workspace=work, profile=profile)
    with pytest.raises(hutch.SpecError) as s:
        hutch.run(["true"], workspace=work, seccomp="no-such-profile")
    assert s.value.where == "security.seccomp" and s.value.hint == "set by seccomp="
    policy = tmp_path / "policy.toml"
    policy.write_text('[profiles.claude]\nallow = ["api.anthropic.com"]\n')
    with pytest.raises(hutch.PolicyError) as p:
        hutch.run(["true"], workspace=work, egress_policy=policy, egress_profile="nope")
    assert p.value.kind == "policy"
    with pytest.raises(hutch.PolicyError):
        hutch.run(["true"], workspace=work, allow_hosts=["bad host name!"])


def test_usage_errors_and_python_side_checks(work: Path) -> None:
    with pytest.raises(hutch.UsageError, match="cpus="):
        hutch.run(["true"], workspace=work, cpus="many")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no_such_option"):
        hutch.run(["true"], no_such_option=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="sequence"):
        hutch.run("echo hi")
    with pytest.raises(ValueError):
        hutch.run([])


def test_seccomp_landlock_caps_and_rlimits(work: Path) -> None:
    res = hutch.run(
        ["sh", "-c", "ulimit -n; grep CapEff /proc/self/status"],
        workspace=work,
        seccomp="strict",
        landlock_min_abi=1,
        rlimits={"nofile": 64},
        cap_add=["CAP_CHOWN"],
        pids=128,
    )
    assert res.ok, res.stderr
    lines = res.stdout_text.splitlines()
    assert lines[0] == "64"
    assert int(lines[1].split()[1], 16) == 1 << 0  # CAP_CHOWN only
    conf = res.report.enforced.confinement
    assert conf is not None and conf["seccomp"]["profile"] == "strict"
    assert res.report.enforced.capabilities == ("CAP_CHOWN",)


def test_memory_limits_are_enforced_or_refused_as_check_says(work: Path) -> None:
    works = hutch.check().limits["memory"].works
    if works:
        res = hutch.run(["true"], workspace=work, memory="256M")
        assert res.ok
        assert res.report.enforced.limits is not None
    else:
        with pytest.raises(hutch.SetupError, match=r"limits\.memory"):
            hutch.run(["true"], workspace=work, memory="256M")


def test_a_denied_egress_host_is_a_clear_result(work: Path) -> None:
    t0 = time.monotonic()
    res = hutch.run(
        ["curl", "-sS", "--max-time", "20", "https://denied.example/"],
        workspace=work,
        allow_hosts=["allowed.example"],
        timeout=60,
    )
    assert time.monotonic() - t0 < 20, "the denied request must not hang"
    assert res.returncode != 0
    assert "403" in res.stderr_text
    assert res.report.enforced.network == "proxy"
    assert res.denied_hosts == ("denied.example",)
    d = res.egress[0]
    assert d.verdict == "deny" and not d.allowed and d.port == 443 and d.status == 403


def test_egress_decisions_also_reach_the_callers_audit_file(work: Path, tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    audit.write_text('{"kind":"egress","verdict":"deny","host":"earlier.example"}\n')
    policy = tmp_path / "policy.toml"
    policy.write_text('default = "a"\n[profiles.a]\nallow = ["allowed.example"]\n')
    res = hutch.run(
        ["curl", "-sS", "https://other.example/"],
        workspace=work,
        egress_policy=policy,
        egress_audit=audit,
    )
    assert res.returncode != 0
    assert [d.host for d in res.egress] == ["other.example"]  # only this run's
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [line["host"] for line in lines] == ["earlier.example", "other.example"]


def test_command_runs_again_with_other_options(work: Path) -> None:
    cmd = hutch.Command(["sh", "-c", 'echo "$X"'], workspace=work, env={"X": "one"})
    assert cmd.run().stdout == b"one\n"
    assert cmd.run().stdout == b"one\n"
    two = cmd.with_options(env={"X": "two"}, timeout=10)
    assert two.run().stdout == b"two\n"
    argv = two.hutch_argv()
    assert (
        argv[1:3] == ["run", "--quiet"]
        and "--timeout" in argv
        and argv[-3:]
        == [
            "sh",
            "-c",
            'echo "$X"',
        ]
    )
    assert "hutch.Command" in repr(cmd)


def test_keyboard_interrupt_leaves_no_process(work: Path, tmp_path: Path) -> None:
    # A run abandoned by an exception (here: a signal handler raising)
    # kills its sandbox before the exception goes on.
    import random
    import signal
    import threading

    from support import alive

    long = f"{1000 + random.random():.6f}"  # no other process sleeps this long
    marks = tmp_path / "marks"
    marks.mkdir()
    marks.chmod(0o777)  # the sandbox's host uid writes here on root launches
    pidfile = marks / "started"

    class Stop(Exception):
        pass

    def raise_stop(*_: object) -> None:
        raise Stop

    old = signal.signal(signal.SIGALRM, raise_stop)
    ready = threading.Event()

    def arm() -> None:
        deadline = time.monotonic() + 20
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if pidfile.exists():
            ready.set()
        signal.setitimer(signal.ITIMER_REAL, 0.01)

    threading.Thread(target=arm, daemon=True).start()
    try:
        with pytest.raises(Stop):
            hutch.run(
                ["sh", "-c", f"echo $$ > /out/started; exec sleep {long}"],
                workspace=work,
                binds=[hutch.Bind(marks, "/out", readonly=False)],
            )
    finally:
        signal.signal(signal.SIGALRM, old)
    assert ready.is_set(), "the command never started"
    # The sandbox's processes are gone: nothing runs that sleep.
    deadline = time.monotonic() + 10
    leftovers = [1]
    while leftovers and time.monotonic() < deadline:
        leftovers = [
            int(p)
            for p in os.listdir("/proc")
            if p.isdigit() and _cmdline(int(p)) == f"sleep\0{long}\0".encode() and alive(int(p))
        ]
        time.sleep(0.02)
    assert leftovers == []


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_transparent_egress_resolves_allowed_names_only(work: Path) -> None:
    res = hutch.run(
        [
            "sh",
            "-c",
            "getent hosts allowed.example; getent hosts denied.example || echo denied-fails",
        ],
        workspace=work,
        allow_hosts=["allowed.example"],
        egress_mode="transparent",
        timeout=60,
    )
    assert res.returncode == 0, res.stderr_text
    out = res.stdout_text.splitlines()
    assert out[0].startswith("198.18.") and out[0].endswith("allowed.example"), out
    assert out[-1] == "denied-fails", out
    assert "denied.example" in res.denied_hosts
