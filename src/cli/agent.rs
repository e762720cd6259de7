//! `hutch agent list|show|check`: the agent profiles (docs/agents.md).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::agent::{self, AgentProfile};

const USAGE: &str = "\
usage: hutch agent list                 the agent profiles: built in, and NAME.toml in
                                        the directories of $HUTCH_AGENTS_PATH (first)
       hutch agent show NAME|FILE       a profile's text (to copy and adapt)
       hutch agent check NAME|FILE [--command PATH]
                                        what this host still lacks to run the
                                        agent with `hutch run --agent`: exit 0
                                        when nothing, 1 when something (each
                                        named with what to do)";

/// The directories the default profile shows inside a sandbox (read-only):
/// a CLI installed elsewhere must be bound in.
const VISIBLE: &[&str] = &[
    "/usr", "/opt", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/lib32",
];

pub fn main(args: Vec<OsString>) -> i32 {
    let args: Vec<String> = match args
        .into_iter()
        .map(|a| a.into_string())
        .collect::<Result<_, _>>()
    {
        Ok(a) => a,
        Err(a) => {
            eprintln!("hutch agent: argument {a:?} is not valid UTF-8");
            return 125;
        }
    };
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["list"] => {
            // The caller's own (HUTCH_AGENTS_PATH) replace built-in ones
            // of the same name.
            let user = agent::user_profiles();
            let mut names: Vec<&str> = agent::builtin_names().collect();
            names.extend(user.keys().map(String::as_str));
            names.sort_unstable();
            names.dedup();
            for name in names {
                let from = user
                    .get(name)
                    .map(|p| format!(" ({})", p.display()))
                    .unwrap_or_default();
                match agent::load(name) {
                    Ok(p) => println!("{name:<14} {}{from}", p.description),
                    Err(e) => println!("{name:<14} (broken: {e})"),
                }
            }
            0
        }
        ["show", name] => match agent::show(name) {
            Ok(text) => {
                print!("{text}");
                0
            }
            Err(e) => fail(&e),
        },
        ["check", name] => check(name, None),
        ["check", name, "--command", path] | ["check", "--command", path, name] => {
            check(name, Some(PathBuf::from(path)))
        }
        ["--help" | "-h" | "help"] => {
            println!("{USAGE}");
            0
        }
        _ => {
            eprintln!("hutch agent: unexpected arguments {words:?}\n{USAGE}");
            125
        }
    }
}

fn fail(e: &dyn std::fmt::Display) -> i32 {
    eprintln!("hutch agent: {e}");
    125
}

/// One finding of `hutch agent check`.
struct Findings {
    lacking: usize,
}

impl Findings {
    fn ok(&self, what: &str) {
        println!("ok     {what}");
    }
    fn lacks(&mut self, what: &str) {
        self.lacking += 1;
        println!("lacks  {what}");
    }
    fn note(&self, what: &str) {
        println!("note   {what}");
    }
}

fn check(name: &str, command: Option<PathBuf>) -> i32 {
    let profile = match agent::load(name) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    let mut f = Findings { lacking: 0 };
    f.ok(&format!(
        "profile {}: {}",
        profile.origin, profile.description
    ));

    let found = command.or_else(|| in_path(&profile.command));
    let bin = match found {
        Some(p) if p.exists() => {
            let real = std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone());
            if VISIBLE.iter().any(|d| real.starts_with(d)) {
                f.ok(&format!("{} is {}", profile.command, p.display()));
                Some(p)
            } else {
                f.lacks(&format!(
                    "{} is {} (really {}), which a sandbox does not show: install it under /usr or /opt, or bind its directory with --ro-bind DIR DIR",
                    profile.command,
                    p.display(),
                    real.display()
                ));
                None
            }
        }
        _ => {
            f.lacks(&format!(
                "{}: not found in PATH; install it (docs/agents.md) or give its path with --command PATH",
                profile.command
            ));
            None
        }
    };

    if let Some(key) = &profile.key_env {
        // The shipped profiles read the key on the host through a secret
        // (the sandbox gets a placeholder); a profile without one leaves
        // the handing over to the caller.
        let how = if profile
            .secrets
            .iter()
            .any(|s| s.env.as_deref() == Some(key.as_str()))
        {
            "the profile's secret reads it on the host; the sandbox gets a placeholder"
        } else {
            "the profile does not place it: --pass-env it"
        };
        if std::env::var_os(key).is_some() {
            f.ok(&format!("{key} is set here ({how})"));
        } else {
            f.lacks(&format!(
                "{key} is not set in this environment: the CLI needs its API key (export it; {how})"
            ));
        }
    }

    if let Some(bin) = bin {
        trial(&profile, name, &bin, &mut f);
    }
    if f.lacking == 0 {
        println!("{name}: ready");
        0
    } else {
        println!("{name}: {} thing(s) lacking", f.lacking);
        1
    }
}

/// The first executable `name` in the caller's PATH.
fn in_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Start the CLI as `hutch run --agent` would (`CLI --version`: no model,
/// no network used) and read what the exit report says about the limits.
fn trial(profile: &AgentProfile, name: &str, bin: &Path, f: &mut Findings) {
    let dir = std::env::temp_dir().join(format!("hutch-agent-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    if let Err(e) = std::fs::create_dir(&dir) {
        f.lacks(&format!("cannot make {}: {e}", dir.display()));
        return;
    }
    let status = dir.join("status.jsonl");
    let Ok(me) = std::env::current_exe() else {
        f.lacks("cannot find hutch's own executable (/proc/self/exe)");
        return;
    };
    let out = Command::new(me)
        .args([
            "run",
            "--agent",
            name,
            "--quiet",
            "--timeout",
            "60s",
            "--workspace",
        ])
        .arg(&dir)
        .arg("--status-file")
        .arg(&status)
        .arg("--")
        .arg(bin)
        .arg("--version")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .output();
    let report = std::fs::read_to_string(&status)
        .ok()
        .and_then(|t| t.lines().last().map(str::to_string))
        .and_then(|l| serde_json::from_str::<serde_json::Value>(&l).ok());
    let _ = std::fs::remove_dir_all(&dir);
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            f.lacks(&format!("cannot start hutch run: {e}"));
            return;
        }
    };
    let said = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .to_string()
    };
    if out.status.success() {
        f.ok(&format!(
            "hutch run --agent {name} -- {} --version: {}",
            profile.command,
            said(&out.stdout)
        ));
    } else {
        f.lacks(&format!(
            "hutch run --agent {name} -- {} --version failed (exit {}): {}",
            profile.command,
            out.status
                .code()
                .map_or("by a signal".to_string(), |c| c.to_string()),
            said(&out.stderr)
        ));
    }
    let unenforced: Vec<String> = report
        .as_ref()
        .and_then(|r| r["unenforced"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    if let Some(m) = profile.memory {
        match unenforced.iter().find(|u| u.starts_with("limits.memory")) {
            Some(why) => f.note(&format!(
                "the memory cap ({} MiB) is not enforced on this host ({why}); `--memory {}M` makes it required, and the run is then refused here",
                m.0 >> 20,
                m.0 >> 20
            )),
            None if report.is_some() => f.ok(&format!("memory cap {} MiB enforced", m.0 >> 20)),
            None => {}
        }
    }
}
