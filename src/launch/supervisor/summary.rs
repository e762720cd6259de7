//! The exit report of a finished sandbox, the notices on stderr, and the
//! status file's start event.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;

use super::ending::ending_of;
use super::relay::Relay;
use super::report::{ChangesReport, Enforcement, ExitReport, Outcome};
use super::seen::Seen;
use crate::launch::options::RunOptions;
use crate::launch::prepare::{LaunchPlan, network_name};
use crate::spec::Spec;

/// The exit report (and the notices on stderr): the ending of what was
/// seen, what was enforced, what changed.
#[allow(clippy::too_many_arguments)]
pub(crate) fn report(
    p: &mut LaunchPlan,
    spec: &Spec,
    opts: &RunOptions,
    mut seen: Seen,
    relay: &Relay,
    layers_without_idmap: Vec<PathBuf>,
    duration_ms: u64,
    leaf_removed_after: bool,
) -> ExitReport {
    // Every process of the command is gone: read the cgroup's counters,
    // then remove the leaf. With `leaf_removed_after` (a warm sandbox
    // reported on `Exited`, its idle init still in the leaf) the counters
    // only: the leaf stays in the plan, removed once init is reaped.
    let limits = if leaf_removed_after {
        p.cgroup.as_ref().map(crate::cgroup::Leaf::report)
    } else {
        p.cgroup.take().map(crate::cgroup::Leaf::finish)
    };
    seen.facts.limit_event = limits.as_ref().and_then(|l| l.ended_by);
    let ending = ending_of(&seen.facts);
    let failure = seen.failure_record();
    let usage = super::usage::usage(
        limits.as_ref().and_then(|l| l.stats.as_ref()),
        seen.rusage.as_ref(),
    );
    // `hutch kill` leaves a mark naming who killed the sandbox's pid 1.
    let kill_mark = (ending.reason == Outcome::Killed && seen.facts.init_signaled.is_some())
        .then(|| match &p.registry_path {
            Some(dir) => crate::registry::take_kill_mark_in(dir, &p.sandbox_id),
            None => crate::registry::take_kill_mark(&p.sandbox_id),
        })
        .flatten();
    let error = match seen.failure {
        Some((_, line)) => Some(line),
        None if ending.reason == Outcome::SetupFailed => {
            Some("the sandbox ended before its workload reported an exit status".into())
        }
        None => kill_mark.map(|m| format!("killed by `{}` (uid {})", m.by, m.by_uid)),
    };
    let changes = changes_report(p, seen.changed_paths.as_deref(), opts.skip_kept_changes);
    let changes = super::report::with_lowers(changes, spec);
    let unenforced = unenforced(p, limits.as_ref());
    if !opts.quiet {
        notices(
            p,
            &layers_without_idmap,
            &changes,
            &unenforced,
            ending.reason,
        );
    }
    ExitReport {
        event: "exit".into(),
        sandbox_id: p.sandbox_id.clone(),
        status: ending.status,
        exit_code: ending.exit_code,
        signal: ending.signal,
        reason: ending.reason,
        error,
        failure,
        duration_ms,
        output_bytes: relay.read,
        output_kept: relay.written,
        output_truncated: relay.truncated,
        output_undelivered: relay.undelivered,
        changes,
        enforced: Enforcement {
            limits,
            layers_without_idmap,
            ..enforcement(p, spec)
        },
        unenforced,
        usage,
        warm: p.child.warm,
    }
}

/// Notices on stderr (unless quiet): layers without idmapping, changed
/// paths, and preferred limits this host does not enforce (once, when the
/// workload ran).
pub(crate) fn notices(
    p: &LaunchPlan,
    layers_without_idmap: &[PathBuf],
    changes: &[ChangesReport],
    unenforced: &[String],
    reason: Outcome,
) {
    for layer in layers_without_idmap {
        eprintln!(
            "hutch: note: {} is on a filesystem without idmapped mounts; the sandbox \
             saw it with its host owners, as host uid {}",
            layer.display(),
            p.child.ids.host_uid
        );
    }
    for c in changes {
        if c.changed_paths == 0 {
            continue;
        }
        match &c.kept_in {
            Some(dir) => eprintln!(
                "hutch: {} paths changed under {}; kept in {}",
                c.changed_paths,
                c.dest.display(),
                dir.display()
            ),
            None => eprintln!(
                "hutch: {} paths changed under {}; discarded (keep them with --changes DIR)",
                c.changed_paths,
                c.dest.display()
            ),
        }
    }
    if !matches!(reason, Outcome::SetupFailed | Outcome::ExecFailed) {
        for u in unenforced
            .iter()
            .filter(|u| !u.starts_with("limits.upper_size"))
        {
            eprintln!("hutch: note: not enforced on this host: {u}");
        }
    }
}

pub(crate) fn unenforced(
    p: &LaunchPlan,
    limits: Option<&crate::cgroup::LimitsReport>,
) -> Vec<String> {
    limits
        .iter()
        .flat_map(|l| &l.unenforced)
        .map(|u| format!("limits.{}: {}", u.limit, u.reason))
        .chain(p.kept_uppers.iter().map(|(dest, upper)| {
            format!(
                "limits.upper_size: the upper of {} is on the host's disk ({}); \
                 only that filesystem's quota bounds it",
                dest.display(),
                upper.display()
            )
        }))
        .collect()
}

pub(crate) fn changes_report(
    p: &LaunchPlan,
    counted: Option<&[u64]>,
    skip_kept: bool,
) -> Vec<ChangesReport> {
    let mut out: Vec<ChangesReport> = p
        .tmp_overlay_dests
        .iter()
        .enumerate()
        .map(|(i, dest)| ChangesReport {
            dest: dest.clone(),
            changed_paths: counted.and_then(|c| c.get(i)).copied().unwrap_or(0),
            kept_in: None,
            lowers: Vec::new(),
        })
        .collect();
    for (dest, upper) in p.kept_uppers.iter().filter(|_| !skip_kept) {
        let count = std::fs::File::open(upper)
            .ok()
            .filter(|f| f.metadata().is_ok_and(|m| m.is_dir()))
            .map_or(0, |f| crate::fs::count::changed_paths(f.as_fd()));
        out.push(ChangesReport {
            dest: dest.clone(),
            changed_paths: count,
            kept_in: Some(upper.clone()),
            lowers: Vec::new(),
        });
    }
    out
}

pub(crate) fn enforcement(p: &LaunchPlan, spec: &Spec) -> Enforcement {
    let ns = &spec.namespaces;
    let namespaces = [
        ("user", ns.user),
        ("mount", true),
        ("pid", ns.pid),
        ("ipc", ns.ipc),
        ("uts", ns.uts),
        ("net", ns.net),
        ("cgroup", ns.cgroup),
    ]
    .iter()
    .filter(|(_, on)| *on)
    .map(|(n, _)| n.to_string())
    .collect();
    let confinement = p.child.confinement.report();
    let ids = &p.child.ids;
    Enforcement {
        namespaces,
        uid: ids.inside_uid,
        gid: ids.inside_gid,
        host_uid: ids.host_uid,
        host_gid: ids.host_gid,
        no_new_privs: true,
        capabilities: confinement.caps_kept.clone(),
        network: network_name(&spec.network).into(),
        wall_clock_ms: spec.limits.wall_clock.map(|d| d.0.as_millis() as u64),
        output_bytes: spec.limits.output_bytes.map(|b| b.0),
        confinement: Some(confinement),
        limits: None,
        layers_without_idmap: Vec::new(),
        image: p.image.as_ref().map(|i| i.report.clone()),
    }
}

pub(crate) fn namespace_inodes(pid: libc::pid_t) -> serde_json::Map<String, serde_json::Value> {
    let mut namespaces = serde_json::Map::new();
    for ns in ["user", "mnt", "pid", "ipc", "uts", "net", "cgroup"] {
        if let Ok(m) = std::fs::metadata(format!("/proc/{pid}/ns/{ns}")) {
            namespaces.insert(ns.into(), std::os::unix::fs::MetadataExt::ino(&m).into());
        }
    }
    namespaces
}

pub(crate) fn write_start_event(
    f: &mut std::fs::File,
    id: &str,
    pid: libc::pid_t,
    workload_pid: i32,
    namespaces: serde_json::Map<String, serde_json::Value>,
) {
    let event = serde_json::json!({
        "event": "start",
        "sandbox_id": id,
        "pid": pid,
        "workload_pid": workload_pid,
        "namespaces": namespaces,
        "time_ms": crate::util::clock::now_ms(),
    });
    let _ = writeln!(f, "{event}");
}
