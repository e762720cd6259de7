//! Secrets through the library (`hutch::Command`, issue 31): the sources
//! are read in the calling process (its environment, a file, one of its
//! fds, which stays open), handed to the supervisor as fds, and the
//! sandbox holds placeholders; a bad source is a typed error naming the
//! secret. Root and uid 65534, from the multi-threaded test harness.

mod common;

use std::os::fd::AsRawFd;

use common::*;
use hutch::{Command, Gateway, Injection, Secret, SecretSource, SpawnError};

fn value() -> String {
    let mut b = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    format!(
        "sk-lib-{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

fn command(who: As, tools: &TempDir, script: &str) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", script]);
    if who == As::Nobody {
        c.hutch_binary(nobody_wrapper(tools.path()));
    } else {
        c.hutch_binary(hutch_bin());
    }
    c.allow_host("api.anthropic.com")
        .gateway(Gateway::new("anthropic", "https://api.anthropic.com").env("ANTHROPIC_BASE_URL"));
    c
}

#[test]
fn library_secrets_from_env_file_and_fd_reach_the_sandbox_as_placeholders() {
    let env_value = value();
    // SAFETY: set before any thread of this test reads the environment;
    // nextest runs each test in a process of its own.
    unsafe { std::env::set_var("HUTCH_LIB_TEST_KEY", &env_value) };
    for who in identities() {
        let tools = TempDir::new("lib-secret-tools", As::Root);
        let dir = TempDir::new("lib-secret", who);
        let file_value = value();
        let key = dir.path().join("key");
        write_as(&key, &format!("{file_value}\n"), who);
        let fd_value = value();
        let (r, w) = nix::unistd::pipe().unwrap();
        nix::unistd::write(&w, fd_value.as_bytes()).unwrap();
        drop(w);
        let out = command(who, &tools, "env | grep -E '^(A|B|C|ANTHROPIC_BASE_URL)='")
            .secret(
                Secret::new(
                    "a",
                    SecretSource::Env("HUTCH_LIB_TEST_KEY".into()),
                    ["api.anthropic.com"],
                )
                .env("A"),
            )
            .secret(
                Secret::new("b", SecretSource::File(key.clone()), ["api.anthropic.com"])
                    .env("B")
                    .inject(Injection::Header("x-api-key".into())),
            )
            .secret(
                Secret::new("c", SecretSource::Fd(r.as_raw_fd()), ["api.anthropic.com"])
                    .env("C")
                    .inject(Injection::Bearer),
            )
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.report.status, 0, "{who:?}: {err} {:?}", out.report);
        let mut lines: Vec<&str> = text.lines().collect();
        lines.sort_unstable();
        assert_eq!(lines.len(), 4, "{who:?}: {text}");
        for (line, name) in lines.iter().zip(["A", "ANTHROPIC_BASE_URL", "B", "C"]) {
            let prefix = match name {
                "ANTHROPIC_BASE_URL" => format!("{name}=http://127.0.0.1:3128/anthropic"),
                _ => format!("{name}=hutch-placeholder-{}-", name.to_lowercase()),
            };
            assert!(line.starts_with(&prefix), "{who:?}: {line}");
        }
        for v in [&env_value, &file_value, &fd_value] {
            assert!(!text.contains(v.as_str()) && !err.contains(v.as_str()));
            assert!(!format!("{:?}", out.report).contains(v.as_str()));
        }
        // The caller's fd is the caller's: still open after the spawn.
        assert!(
            nix::fcntl::fcntl(&r, nix::fcntl::FcntlArg::F_GETFD).is_ok(),
            "{who:?}: the library closed the caller's fd"
        );
    }
}

#[test]
fn library_bad_secret_source_is_a_typed_error_naming_the_secret() {
    for who in identities() {
        let tools = TempDir::new("lib-secret-tools", As::Root);
        let e = command(who, &tools, "true")
            .secret(
                Secret::new(
                    "anthropic",
                    SecretSource::File("/nonexistent/hutch-key".into()),
                    ["api.anthropic.com"],
                )
                .env("ANTHROPIC_API_KEY"),
            )
            .status()
            .unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, SpawnError::Launch(_)), "{who:?}: {e:?}");
        assert!(
            text.contains("secret \"anthropic\": cannot read file /nonexistent/hutch-key"),
            "{who:?}: {text}"
        );
        // A host off the allow-list: the Spec's check, at its key.
        let e = command(who, &tools, "true")
            .secret(Secret::new("x", SecretSource::Env("HOME".into()), ["evil.example"]).env("X"))
            .status()
            .unwrap_err();
        match e {
            SpawnError::Spec(s) => assert_eq!(s.path, "secrets[0].hosts[0]"),
            other => panic!("{who:?}: {other:?}"),
        }
    }
}
