//! `hutch ps [--json]` and `hutch kill SANDBOX | --session ID | --label K=V
//! | --all [--json]`: the live sandboxes of the runtime registry, and the
//! reaper's lever (see `src/registry/`).

use std::ffi::OsString;
use std::io::Write;

use anyhow::{Result, anyhow, bail};
use serde_json::json;

use super::machine::{ErrorKind, MachineError, error_line, ok_line};
use crate::registry::{self, Entry, KillOutcome, Liveness, RegistryError};

const PS_USAGE: &str = "usage: hutch ps [--json]
List the running sandboxes (of hutch run, session commands and the library):
the caller's own; root sees every user's. Records of supervisors that were
killed (stale) are shown once and removed. hutch-oci's containers (under
/run/hutch-oci and containerd's /run/containerd/runc/NS) follow as oci:ID.";

const KILL_USAGE: &str =
    "usage: hutch kill (SANDBOX... | --session ID | --label KEY=VALUE | --all) [--json]
End sandboxes and every process in them (through their pid namespace; a
pid is never signalled on its own). Exit status 0 when every one is gone.";

/// Exit code when hutch itself fails.
const EXIT_FAILURE: i32 = 125;

fn print(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Print the failure (human line on stderr; with `--json` also the
/// envelope on stdout) and return hutch's failure status.
fn fail(verb: &str, json: bool, e: &anyhow::Error) -> i32 {
    eprintln!("hutch {verb}: {e:#}");
    if json {
        let kind = if e.chain().any(|c| {
            matches!(
                c.downcast_ref::<RegistryError>(),
                Some(RegistryError::NoSandbox(_))
            )
        }) {
            ErrorKind::NotFound
        } else if e.chain().any(|c| {
            matches!(
                c.downcast_ref::<RegistryError>(),
                Some(RegistryError::BadId(_))
            )
        }) {
            ErrorKind::Usage
        } else {
            MachineError::classify(e).kind
        };
        let m = MachineError::new(kind, format!("hutch {verb}: {e:#}"));
        print(&format!("{}\n", error_line(verb, &m)));
    }
    EXIT_FAILURE
}

fn age(started_ms: u64) -> String {
    let s = crate::util::clock::now_ms().saturating_sub(started_ms) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn state_name(l: &Liveness) -> &'static str {
    match l {
        Liveness::Live => "live",
        Liveness::Ending => "ending",
        Liveness::Stale { .. } => "stale",
    }
}

/// One sandbox as `--json` shows it.
fn entry_json(e: &Entry) -> serde_json::Value {
    json!({
        "sandbox_id": e.record.sandbox_id,
        "state": state_name(&e.liveness),
        "session": e.record.session(),
        "labels": e.record.labels,
        "uid": e.record.uid,
        "pid": e.record.init.pid,
        "supervisor_pid": e.record.supervisor.pid,
        "started_unix_ms": e.record.started_unix_ms,
        "command": e.record.command,
        "secrets": e.record.secrets,
        "cgroup": e.record.cgroup,
    })
}

/// The state roots `hutch ps` reads hutch-oci containers from: the
/// default one, and containerd's runc-shim roots (one per namespace; runc's
/// own containers there are not hutch-oci records and are skipped).
fn oci_roots() -> Vec<std::path::PathBuf> {
    let mut roots = vec![std::path::PathBuf::from(
        crate::oci::lifecycle::DEFAULT_ROOT,
    )];
    if let Ok(dir) = std::fs::read_dir("/run/containerd/runc") {
        let mut ns: Vec<_> = dir.flatten().map(|e| e.path()).collect();
        ns.sort();
        roots.extend(ns);
    }
    roots
}

/// hutch-oci's containers (podman, containerd, CRI-O): the OCI state of
/// each, with the root it is under.
fn oci_containers() -> Vec<(std::path::PathBuf, crate::oci::config::State)> {
    let mut out = Vec::new();
    for path in oci_roots() {
        let root = crate::oci::lifecycle::Root::new(&path);
        for id in root.list() {
            if let Ok(state) = root.state(&id) {
                out.push((path.clone(), state));
            }
        }
    }
    out
}

/// `hutch ps`.
pub fn ps_main(args: Vec<OsString>) -> i32 {
    let mut json_out = false;
    for a in &args {
        match a.to_str() {
            Some("--json") => json_out = true,
            Some("-h" | "--help") => {
                println!("{PS_USAGE}");
                return 0;
            }
            _ => {
                let e = anyhow!("unexpected argument {a:?}\n{PS_USAGE}");
                return fail("ps", json_out, &e);
            }
        }
    }
    let entries = match registry::list() {
        Ok(e) => e,
        Err(e) => return fail("ps", json_out, &e.into()),
    };
    let cleaned = registry::clean_stale(&entries);
    registry::sweep_kill_marks();
    let oci = oci_containers();
    if json_out {
        let list: Vec<_> = entries.iter().map(entry_json).collect();
        let oci: Vec<_> = oci
            .iter()
            .map(|(root, s)| {
                json!({"id": s.id, "status": s.status, "pid": s.pid, "bundle": s.bundle,
                       "root": root})
            })
            .collect();
        print(&format!(
            "{}\n",
            ok_line(
                "ps",
                &json!({"sandboxes": list, "cleaned": cleaned, "oci_containers": oci})
            )
        ));
        return 0;
    }
    let mut out = format!(
        "{:<16}  {:<32}  {:>7}  {:>4}  {:<6}  COMMAND\n",
        "SANDBOX", "SESSION", "PID", "AGE", "STATE"
    );
    for e in &entries {
        let command = crate::util::quote::display_name(e.record.command.join(" ").as_bytes());
        out += &format!(
            "{:<16}  {:<32}  {:>7}  {:>4}  {:<6}  {}\n",
            e.record.sandbox_id,
            e.record.session().unwrap_or("-"),
            e.record.init.pid,
            age(e.record.started_unix_ms),
            state_name(&e.liveness),
            command
        );
    }
    // hutch-oci's containers: SANDBOX is `oci:ID`, COMMAND the bundle.
    for (_, st) in &oci {
        out += &format!(
            "{:<16}  {:<32}  {:>7}  {:>4}  {:<6}  {}\n",
            format!("oci:{}", st.id),
            "-",
            st.pid.unwrap_or(0),
            "-",
            st.status,
            crate::util::quote::display_name(st.bundle.as_bytes())
        );
    }
    print(&out);
    for id in cleaned {
        eprintln!("hutch ps: removed the stale record of {id} (its supervisor was killed)");
    }
    0
}

/// Which sandboxes `hutch kill` ends.
enum Target {
    Ids(Vec<String>),
    Session(String),
    Label(String, String),
    All,
}

fn parse_kill(args: &[OsString]) -> Result<(Target, bool)> {
    let mut json_out = false;
    let mut target: Option<Target> = None;
    let mut ids = Vec::new();
    let mut it = args.iter();
    let set = |t: &mut Option<Target>, new: Target| -> Result<()> {
        if t.is_some() {
            bail!("name sandboxes, or one of --session, --label, --all\n{KILL_USAGE}");
        }
        *t = Some(new);
        Ok(())
    };
    while let Some(a) = it.next() {
        let a = a
            .to_str()
            .ok_or_else(|| anyhow!("argument {a:?} is not UTF-8"))?;
        match a {
            "--json" => json_out = true,
            "--all" => set(&mut target, Target::All)?,
            "--session" => {
                let id = it
                    .next()
                    .and_then(|v| v.to_str())
                    .ok_or_else(|| anyhow!("--session needs a session id"))?;
                if !crate::workspace::valid_id(id) {
                    return Err(crate::workspace::WorkspaceError::BadId(id.into()).into());
                }
                set(&mut target, Target::Session(id.to_string()))?;
            }
            "--label" => {
                let kv = it
                    .next()
                    .and_then(|v| v.to_str())
                    .ok_or_else(|| anyhow!("--label needs KEY=VALUE"))?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| anyhow!("--label: expected KEY=VALUE, got {kv:?}"))?;
                set(&mut target, Target::Label(k.into(), v.into()))?;
            }
            flag if flag.starts_with('-') => bail!("unknown option {flag}\n{KILL_USAGE}"),
            id => {
                if !registry::valid_sandbox_id(id) {
                    return Err(RegistryError::BadId(id.into()).into());
                }
                ids.push(id.to_string());
            }
        }
    }
    if !ids.is_empty() {
        set(&mut target, Target::Ids(ids))?;
    }
    let target = target.ok_or_else(|| anyhow!("nothing to kill\n{KILL_USAGE}"))?;
    Ok((target, json_out))
}

/// `hutch kill`.
pub fn kill_main(args: Vec<OsString>) -> i32 {
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{KILL_USAGE}");
        return 0;
    }
    let json_out = args.iter().any(|a| a == "--json");
    match kill(&args) {
        Ok(code) => code,
        Err(e) => fail("kill", json_out, &e),
    }
}

fn kill(args: &[OsString]) -> Result<i32> {
    let (target, json_out) = parse_kill(args)?;
    let entries = registry::list()?;
    let chosen: Vec<&Entry> = match &target {
        Target::All => entries.iter().collect(),
        Target::Session(id) => entries
            .iter()
            .filter(|e| e.record.session() == Some(id.as_str()))
            .collect(),
        Target::Label(k, v) => entries
            .iter()
            .filter(|e| e.record.labels.get(k) == Some(v))
            .collect(),
        Target::Ids(ids) => {
            let mut out = Vec::new();
            for id in ids {
                match entries.iter().find(|e| &e.record.sandbox_id == id) {
                    Some(e) => out.push(e),
                    None => return Err(RegistryError::NoSandbox(id.clone()).into()),
                }
            }
            out
        }
    };
    let mut results = Vec::new();
    let mut remaining = Vec::new();
    for e in chosen {
        let outcome = registry::kill(e, "hutch kill")?;
        audit_kill(e, outcome);
        if outcome == KillOutcome::StillRunning {
            remaining.push(e.record.sandbox_id.clone());
        }
        results.push(json!({
            "sandbox_id": e.record.sandbox_id,
            "session": e.record.session(),
            "outcome": outcome,
        }));
        if !json_out {
            let what = match outcome {
                KillOutcome::Killed => "killed",
                KillOutcome::Gone => "already gone",
                KillOutcome::StillRunning => "still running",
            };
            print(&format!("{} {what}\n", e.record.sandbox_id));
        }
    }
    if !remaining.is_empty() {
        let e = anyhow!(
            "sandbox{} {} did not end within {}s of SIGKILL",
            if remaining.len() == 1 { "" } else { "es" },
            remaining.join(", "),
            registry::KILL_WAIT.as_secs()
        );
        if json_out {
            print(&format!(
                "{}\n",
                error_line(
                    "kill",
                    &MachineError::new(ErrorKind::Internal, format!("hutch kill: {e}"))
                )
            ));
        }
        eprintln!("hutch kill: {e}");
        return Ok(EXIT_FAILURE);
    }
    if json_out {
        print(&format!(
            "{}\n",
            ok_line("kill", &json!({"killed": results}))
        ));
    }
    Ok(0)
}

/// A session command killed by `hutch kill` gets a line in the session's
/// audit (when the caller may open the session's state directory).
fn audit_kill(e: &Entry, outcome: KillOutcome) {
    let (Some(id), Some(state)) = (
        e.record.session(),
        e.record.labels.get(registry::STATE_LABEL),
    ) else {
        return;
    };
    let Ok(dir) = crate::workspace::StateDir::open(std::path::Path::new(state)) else {
        return;
    };
    if let Ok(s) = dir.open_session(id) {
        let _ = s.audit(&json!({
            "event": "kill", "time_unix_ms": crate::util::clock::now_ms(),
            "sandbox_id": e.record.sandbox_id, "by": "hutch kill",
            "by_uid": rustix::process::getuid().as_raw(), "outcome": outcome,
            "stale": matches!(e.liveness, Liveness::Stale { .. }),
        }));
    }
}
