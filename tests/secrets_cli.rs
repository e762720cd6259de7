//! Secrets through `hutch run` (issue 31, docs/secrets.md): bad input is
//! one line and exit 125 before anything starts, and a secret's value
//! reaches neither the sandbox (its environment, every process's
//! `/proc/*/environ`, its files) nor the status file, the audit log, the
//! error lines or `hutch ps`. Root and uid 65534.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;

/// A value that cannot appear anywhere by chance.
fn fresh_value() -> String {
    let mut b = [0u8; 12];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    format!(
        "sk-ant-test-{}",
        b.iter().map(|x| format!("{x:02x}")).collect::<String>()
    )
}

/// The flags of a sandbox whose secret `anthropic` comes from `source`,
/// bound to a gateway's upstream.
fn secret_flags(source: &str) -> Vec<String> {
    [
        "--allow-host",
        "api.anthropic.com",
        "--gateway",
        "name=anthropic,upstream=https://api.anthropic.com,env=ANTHROPIC_BASE_URL",
        "--secret",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!(
        "name=anthropic,env=ANTHROPIC_API_KEY,{source},host=api.anthropic.com,inject=header:x-api-key"
    )])
    .collect()
}

/// `hutch run FLAGS -- sh -c SCRIPT` as `who`, with `env` added to
/// hutch's own environment and `shell_redirect` (`3<file`) applied.
fn run_with(
    who: As,
    cwd: &Path,
    flags: &[String],
    script: &str,
    env: &[(&str, &str)],
    shell_redirect: &str,
) -> std::process::Output {
    // Through sh so that an fd source can be opened for hutch (`3<FILE`).
    let mut argv = vec![hutch_bin().display().to_string(), "run".into()];
    argv.extend(flags.iter().cloned());
    argv.extend(["--".into(), "sh".into(), "-c".into(), script.into()]);
    let quoted: Vec<String> = argv
        .iter()
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let line = format!("exec {} {shell_redirect}", quoted.join(" "));
    let mut cmd = if who.drops_to_nobody() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sh",
            "-c",
        ]);
        c
    } else {
        let mut c = Command::new("sh");
        c.arg("-c");
        c
    };
    cmd.arg(line).current_dir(cwd).stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("spawn hutch")
}

/// Each bad input: one error line naming the secret (never the value),
/// exit 125, and nothing started (the command's marker is never made, the
/// audit log never opened).
#[test]
fn bad_secret_input_is_one_line_and_exit_125_before_anything_starts() {
    for who in identities() {
        let dir = TempDir::new("secret-bad", who);
        let value = fresh_value();
        let key = dir.path().join("key");
        write_as(&key, &value, who);
        let marker = dir.path().join("started");
        let audit = dir.path().join("audit.jsonl");
        let script = format!("touch {}", marker.display());
        let unreadable = dir.path().join("root-only");
        std::fs::write(&unreadable, &value).unwrap();
        std::fs::set_permissions(
            &unreadable,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let mut cases: Vec<(&str, Vec<String>, &str)> = vec![
            (
                "a missing env source",
                secret_flags("from-env=HUTCH_TEST_NOT_SET"),
                "environment variable HUTCH_TEST_NOT_SET is not set",
            ),
            (
                "a missing file source",
                secret_flags(&format!("from-file={}/absent", dir.path().display())),
                "cannot read file",
            ),
            (
                "a directory as the file source",
                secret_flags(&format!("from-file={}", dir.path().display())),
                "is not a regular file",
            ),
            (
                "an fd source that is not open",
                secret_flags("from-fd=9"),
                "cannot read fd 9",
            ),
            (
                "a host off the allow-list",
                {
                    let mut f = secret_flags(&format!("from-file={}", key.display()));
                    let last = f.last_mut().unwrap();
                    *last = last.replace("host=api.anthropic.com", "host=evil.example");
                    f
                },
                "\"evil.example\" is not on the allow-list",
            ),
            (
                "a placeholder variable set by --setenv too",
                {
                    let mut f = secret_flags(&format!("from-file={}", key.display()));
                    f.extend(["--setenv".into(), "ANTHROPIC_API_KEY".into(), "x".into()]);
                    f
                },
                "ANTHROPIC_API_KEY is already set",
            ),
        ];
        if who.drops_to_nobody() {
            cases.push((
                "an unreadable file source",
                secret_flags(&format!("from-file={}", unreadable.display())),
                "Permission denied",
            ));
        }
        for (what, mut flags, want) in cases {
            flags.extend([
                "--quiet".into(),
                "--audit".into(),
                audit.display().to_string(),
            ]);
            let o = run_with(who, dir.path(), &flags, &script, &[], "");
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(125), "{who:?} {what}: {err}");
            assert_eq!(err.lines().count(), 1, "{who:?} {what}: one line: {err}");
            assert!(err.contains(want), "{who:?} {what}: {err}");
            assert!(err.contains("secret"), "{who:?} {what}: {err}");
            assert!(
                !err.contains(&value),
                "{who:?} {what}: the value leaked: {err}"
            );
            assert!(stdout(&o).is_empty(), "{who:?} {what}");
            assert!(!marker.exists(), "{who:?} {what}: the command ran");
            assert!(!audit.exists(), "{who:?} {what}: the audit log was opened");
        }
    }
}

/// From each source, the sandbox sees the placeholder and the gateway's
/// URL; the value is in no process's environment inside, in no file the
/// status file or audit log hold, not on stderr, not in `hutch ps`.
#[test]
fn the_value_reaches_neither_the_sandbox_nor_any_report() {
    for who in identities() {
        let dir = TempDir::new("secret-leak", who);
        let value = fresh_value();
        let key = dir.path().join("key");
        write_as(&key, &format!("{value}\n"), who);
        // (what, the flag's source, hutch's extra environment, a redirect)
        type Source<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, String);
        let sources: [Source; 3] = [
            (
                "env",
                "from-env=HUTCH_TEST_REAL_KEY".into(),
                vec![("HUTCH_TEST_REAL_KEY", value.as_str())],
                String::new(),
            ),
            (
                "file",
                format!("from-file={}", key.display()),
                vec![],
                String::new(),
            ),
            (
                "fd",
                "from-fd=3".into(),
                vec![],
                format!("3<{}", key.display()),
            ),
        ];
        for (what, source, env, redirect) in sources {
            let status = dir.path().join(format!("status-{what}"));
            let audit = dir.path().join(format!("audit-{what}"));
            let fifo = dir.path().join(format!("go-{what}"));
            nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
            own_as(&fifo, who);
            let tag = format!("{}-{who:?}-{what}", std::process::id());
            let label = format!("secret-test={tag}");
            let mut flags = secret_flags(&source);
            flags.extend([
                "--quiet".into(),
                "--json".into(),
                "--status-file".into(),
                status.display().to_string(),
                "--audit".into(),
                audit.display().to_string(),
                "--label".into(),
                label.clone(),
                "--bind".into(),
                dir.path().display().to_string(),
                "/w".into(),
            ]);
            // Every process's environment (the shell's, a child's, every
            // one /proc shows), then
            // wait for the test to have looked at `hutch ps`.
            let script = format!(
                "env; echo ---; sh -c 'cat /proc/$$/environ' | tr '\\0' '\\n'; \
                 for f in /proc/[0-9]*/environ; do cat \"$f\" 2>/dev/null; done | tr '\\0' '\\n'; \
                 read _ < /w/go-{what}"
            );
            let child = {
                let dir = dir.path().to_path_buf();
                let env: Vec<(String, String)> = env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                std::thread::spawn(move || {
                    let env: Vec<(&str, &str)> =
                        env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                    run_with(who, &dir, &flags, &script, &env, &redirect)
                })
            };
            // `hutch ps` while it runs: the sandbox is there, the value not.
            let mut ps = String::new();
            wait_until(Duration::from_secs(20), "the sandbox in hutch ps", || {
                let o = hutch_as(who, dir.path(), &["ps", "--json"]);
                ps = stdout(&o);
                ps.contains(&format!("\"secret-test\":\"{tag}\""))
            });
            assert!(!ps.contains(&value), "{who:?} {what}: hutch ps: {ps}");
            // It names the secret, not its source.
            let listed: serde_json::Value = serde_json::from_str(&ps).unwrap();
            let me = listed["result"]["sandboxes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["labels"]["secret-test"] == tag.as_str())
                .unwrap()
                .clone();
            assert_eq!(me["secrets"], serde_json::json!(["anthropic"]), "{me}");
            std::fs::OpenOptions::new()
                .write(true)
                .open(&fifo)
                .unwrap()
                .write_all(b"go\n")
                .unwrap();
            let o = child.join().unwrap();
            let (out, err) = (stdout(&o), stderr(&o));
            assert_eq!(o.status.code(), Some(0), "{who:?} {what}: {err} {out}");
            let placeholder = out
                .lines()
                .find_map(|l| l.strip_prefix("ANTHROPIC_API_KEY="))
                .unwrap_or_else(|| panic!("{who:?} {what}: no placeholder: {out}"));
            assert!(
                placeholder.starts_with("hutch-placeholder-anthropic-"),
                "{placeholder}"
            );
            assert!(
                out.contains("ANTHROPIC_BASE_URL=http://127.0.0.1:3128/anthropic"),
                "{out}"
            );
            let environ = out.split_once("---").map_or("", |(_, e)| e).to_string();
            assert!(environ.contains(placeholder), "{who:?} {what}: {environ}");
            for (name, text) in [
                ("stdout", out.clone()),
                ("stderr", err),
                ("/proc/*/environ", environ),
                ("status file", std::fs::read_to_string(&status).unwrap()),
                (
                    "audit log",
                    std::fs::read_to_string(&audit).unwrap_or_default(),
                ),
            ] {
                assert!(
                    !text.contains(&value),
                    "{who:?} {what}: the value is in the {name}: {text}"
                );
            }
        }
    }
}
