//! `hutch session snapshot|snapshots|fork|rollback`: sessions that branch
//! and undo (docs/sessions.md, "Snapshots, forks and rollback").

use anyhow::{Result, bail};

use super::{Args, emit, id_arg, json_mode, out, print_result, start_warm_server};
use crate::workspace::{ForkOptions, SnapshotInfo, StateDir};

/// One human line of a snapshot.
fn human(s: &SnapshotInfo) -> String {
    format!(
        "{}\t{}\t{:?}\t{}\t{} files\t{} bytes\tparent {}\n",
        s.id,
        s.name.as_deref().unwrap_or("-"),
        s.kind,
        s.time_unix_ms,
        s.files,
        s.bytes,
        s.parent.map_or("baseline".to_string(), |p| p.to_string()),
    )
    .to_lowercase()
}

/// `session snapshot ID [--name NAME]`: prints the snapshot's id.
pub(super) fn snapshot(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let mut name = None;
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--name") => name = Some(a.string("--name")?),
            _ => bail!("snapshot: unexpected argument {arg:?}"),
        }
    }
    let snap = state
        .open_session(&id)?
        .with_wait(wait)
        .snapshot(name.as_deref())?;
    print_result(
        "snapshot",
        &serde_json::to_value(&snap)?,
        &format!("{}\n", snap.id),
    )?;
    Ok(0)
}

/// `session snapshots ID`: one line (or one JSON array) of the layers.
pub(super) fn snapshots(state: &StateDir, a: &mut Args) -> Result<i32> {
    let id = id_arg(a)?;
    if let Some(arg) = a.next() {
        bail!("snapshots: unexpected argument {arg:?}");
    }
    let list = state.open_session(&id)?.snapshots();
    if json_mode() {
        emit("snapshots", &serde_json::json!({ "snapshots": list }))?;
    } else {
        let text: String = list.iter().map(human).collect();
        out(text.as_bytes())?;
    }
    Ok(0)
}

/// `session fork ID [--from SNAP] [--count N] [--deadline DUR]
/// [--max-commands N] [--warm N [--warm-idle DUR]]`: prints the new ids,
/// one a line.
pub(super) fn fork(state: &StateDir, a: &mut Args) -> Result<i32> {
    let id = id_arg(a)?;
    let mut opts = ForkOptions::default();
    let mut warm = None;
    let mut idle = crate::workspace::warm::DEFAULT_IDLE;
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--from") => opts.from = Some(a.string("--from")?),
            Some("--count") => opts.count = a.count("--count")? as usize,
            Some("--deadline") => opts.deadline = Some(a.duration("--deadline")?),
            Some("--max-commands") => opts.max_commands = Some(a.count("--max-commands")?),
            Some("--warm") => warm = Some(a.count("--warm")? as usize),
            Some("--warm-idle") => idle = a.duration("--warm-idle")?,
            _ => bail!("fork: unexpected argument {arg:?}"),
        }
    }
    let report = state.fork(&id, &opts)?;
    if let Some(n) = warm.filter(|n| *n > 0) {
        for child in &report.children {
            if let Err(e) = start_warm_server(state, child, n, idle) {
                // No half-made fork: every child goes.
                for c in &report.children {
                    let _ = state.close(c, true);
                }
                return Err(e);
            }
        }
    }
    if json_mode() {
        emit("fork", &report)?;
    } else {
        let text: String = report.children.iter().map(|c| format!("{c}\n")).collect();
        out(text.as_bytes())?;
    }
    Ok(0)
}

/// `session rollback ID SNAP`.
pub(super) fn rollback(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let Some(snap) = a.next() else {
        bail!("rollback: name the SNAPSHOT (its id or name; `session snapshots ID` lists them)");
    };
    let Some(snap) = snap.to_str().map(str::to_string) else {
        bail!("rollback: the snapshot {snap:?} is not UTF-8");
    };
    if let Some(arg) = a.next() {
        bail!("rollback: unexpected argument {arg:?}");
    }
    let s = state.open_session(&id)?.with_wait(wait).rollback(&snap)?;
    print_result(
        "rollback",
        &serde_json::to_value(&s)?,
        &format!("rolled back to snapshot {}\n", s.id),
    )?;
    Ok(0)
}

/// `session compact ID [--depth N]`.
pub(super) fn compact(state: &StateDir, a: &mut Args, wait: bool) -> Result<i32> {
    let id = id_arg(a)?;
    let mut depth = 1;
    while let Some(arg) = a.next() {
        match arg.to_str() {
            Some("--depth") => depth = a.count("--depth")? as usize,
            _ => bail!("compact: unexpected argument {arg:?}"),
        }
    }
    if depth == 0 {
        bail!("compact: --depth 0: a session keeps at least 1 frozen layer when it has any");
    }
    let report = state.open_session(&id)?.with_wait(wait).compact(depth)?;
    print_result(
        "compact",
        &serde_json::to_value(&report)?,
        &format!(
            "{} frozen layers before, {} after\n",
            report.layers_before, report.layers_after
        ),
    )?;
    Ok(0)
}
